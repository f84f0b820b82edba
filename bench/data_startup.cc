// File: bench/data_startup.cc
// The host side of a trainer's start-up, phase by phase: what happens between
// train_on's clock start and the first step besides the model (issue 13).
//
//   bazel run -c opt //bench:data_startup -- /usr/share/datasets/fashion-mnist [repeats]
//
// Prints the median seconds of each phase of reading one MNIST folder: read
// (the .gz bytes as stored), inflate, parse (IDX checks and payload copy),
// tensor (the uint8 images as a Tensor, two ways), then load_mnist per split, both
// splits one after the other and on two threads (as the trainers read them),
// and the loader (DataLoader::resident on the CPU, which is the host mode).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "data/file_bytes.h"
#include "data/idx.h"

namespace {

using loom::data::Split;

double median_seconds(int repeats, const std::function<void()>& phase) {
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    phase();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

void show(const char* phase, double seconds) { fmt::print("{:<34} {:8.4f} s\n", phase, seconds); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: data_startup <mnist folder with train-images-idx3-ubyte.gz ...> [repeats]\n");
    return 2;
  }
  const std::string folder = argv[1];
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const std::string images = (std::filesystem::path(folder) / "train-images-idx3-ubyte.gz").string();
  namespace data = loom::data;

  std::vector<uint8_t> packed, file;
  show("read train images (.gz as stored)", median_seconds(repeats, [&] {
         packed = data::read_stored_bytes(images, "idx", data::kMaxIdxBytes);
       }));
  show("inflate train images", median_seconds(repeats, [&] {
         file = data::gunzip_bytes(packed, images, "idx", data::kMaxIdxBytes);
       }));
  data::IdxArray array;
  show("parse train images", median_seconds(repeats, [&] { array = data::parse_idx(file, images); }));
  show("train images via from_host", median_seconds(repeats, [&] {
         loom::from_host(array.bytes.data(), loom::DType::UInt8, {array.dims[0], 1, 28, 28},
                         {.dtype = loom::DType::UInt8});
       }));
  show("train images via empty + memcpy", median_seconds(repeats, [&] {
         loom::Tensor images = loom::empty({array.dims[0], 1, 28, 28}, {.dtype = loom::DType::UInt8});
         std::memcpy(images.data_ptr<uint8_t>(), array.bytes.data(), array.bytes.size());
       }));
  data::Dataset train, test;
  show("load_mnist train", median_seconds(repeats, [&] { train = data::load_mnist(folder, Split::Train); }));
  show("load_mnist test", median_seconds(repeats, [&] { test = data::load_mnist(folder, Split::Test); }));
  show("both splits, one after the other", median_seconds(repeats, [&] {
         train = data::load_mnist(folder, Split::Train);
         test = data::load_mnist(folder, Split::Test);
       }));
  show("both splits, on two threads", median_seconds(repeats, [&] {
         auto later = std::async(std::launch::async, [&] { return data::load_mnist(folder, Split::Test); });
         train = data::load_mnist(folder, Split::Train);
         test = later.get();
       }));
  show("loader (resident, host mode)", median_seconds(repeats, [&] {
         data::DataLoader::resident(train, {.batch_size = 128, .shuffle = true, .mean = {0.2860},
                                            .stddev = {0.3530}});
       }));
  return 0;
}
