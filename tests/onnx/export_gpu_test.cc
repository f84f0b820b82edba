// File: tests/onnx/export_gpu_test.cc
// ONNX export of a model that lives on the GPU: the file is the one the CPU
// export of the same weights writes, byte for byte, for NCHW and channels-last
// models (the trace records the ops the forward calls, not the device's
// kernels, fused graphs or layouts).
//
// N batch.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "core/ops/ops.h"
#include "layers/nn.h"
#include "models/registry.h"
#include "onnx/export.h"
#include "tests/testing.h"

using namespace loom;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The registry's model `name` with the weights of seed 1, on the CPU.
std::shared_ptr<nn::Module> build(const std::string& name) {
  manual_seed(1);
  const models::ZooModel& row = models::zoo_model(name);
  return row.build(row.num_classes);
}

}  // namespace

LOOM_GPU_TEST_CASE("a model on the GPU exports the CPU's file, NCHW and channels-last") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("loom_onnx_gpu_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string name : {"mnist_net", "resnet20", "mobilenet_v2_cifar", "unet", "vit_tiny"}) {
    for (const bool channels_last : {false, true}) {
      INFO(name << (channels_last ? " channels-last" : " NCHW"));
      const models::ZooModel& row = models::zoo_model(name);
      Generator gen(5);
      const Tensor x = randn(row.batch_shape(2), {}, &gen);
      std::shared_ptr<nn::Module> cpu = build(name), gpu = build(name);
      gpu->to(testing::test_gpu());
      Tensor x_gpu = x.to(testing::test_gpu());
      if (channels_last) {
        gpu->to(MemoryFormat::ChannelsLast);
        x_gpu = x_gpu.contiguous(MemoryFormat::ChannelsLast);
      }
      const onnx::ExportSummary a = onnx::export_model(*cpu, {x}, (dir / "cpu.onnx").string());
      const onnx::ExportSummary b = onnx::export_model(*gpu, {x_gpu}, (dir / "gpu.onnx").string());
      CHECK(a.nodes == b.nodes);
      CHECK(a.initializer_bytes == b.initializer_bytes);
      CHECK(read_file(dir / "cpu.onnx") == read_file(dir / "gpu.onnx"));
    }
  }
  std::filesystem::remove_all(dir);
}
