// File: tests/core/ops/no_cuda_test.cc
// The build without CUDA: core/ops calls the GPU tiers with no #ifdef, and
// such a build links core/cuda/no_cuda.cc and core/cudnn/no_cudnn.cc in their
// place. Checks that no op source or header has an #ifdef on the build, and that the stubs
// throw DeviceError with the message that says how to get a CUDA build.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/cuda/capture.h"
#include "core/cuda/matmul.h"
#include "core/cudnn/fused.h"
#include "core/cudnn/softmax.h"
#include "core/device.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace loom {
namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string no_cuda_message(const std::string& function) {
  return "Loom was built without CUDA; " + function +
         " needs a CUDA device. Rebuild without --config=cpu on a machine with the CUDA toolkit";
}

TEST_CASE("no core/ops source or header has an #ifdef on the CUDA build") {
  int sources = 0;
  for (const auto& entry : fs::directory_iterator("core/ops")) {
    const fs::path extension = entry.path().extension();
    if (extension != ".cc" && extension != ".h") continue;
    sources += extension == ".cc" ? 1 : 0;
    INFO(entry.path().string() << " mentions LOOM_WITH_CUDA: call the GPU tier unconditionally "
                                  "and give core/cuda/no_cuda.cc or core/cudnn/no_cudnn.cc a stub");
    CHECK(read_file(entry.path()).find("LOOM_WITH_CUDA") == std::string::npos);
  }
  CHECK(sources >= 20);  // the data dependency brought the sources
}

TEST_CASE("without CUDA, the GPU tiers' stubs throw DeviceError and say how to build with CUDA") {
  if (cuda_built()) {
    MESSAGE("built with CUDA: the real tiers are linked, not the stubs");
    return;
  }
  const Strided none;
  CHECK_THROWS_WITH_AS(cuda::matmul(none, none, none), no_cuda_message("cuda::matmul").c_str(),
                       DeviceError);
  CHECK_THROWS_WITH_AS(cudnn::softmax_forward(none, none, 1), no_cuda_message("cudnn::softmax_forward").c_str(),
                       DeviceError);
  CHECK_THROWS_WITH_AS(cudnn::epilogue_backward(none, cudnn::EpilogueBackwardArgs{}),
                       no_cuda_message("cudnn::epilogue_backward").c_str(), DeviceError);
  CHECK_THROWS_WITH_AS(cuda::synchronize(), no_cuda_message("cuda::synchronize").c_str(), DeviceError);
  CHECK_FALSE(cuda::is_capturing());  // capture state: the honest answer, not an error
}

}  // namespace
}  // namespace loom
