// File: training/datasets.cc
// Reading the splits and making the loaders.
#include "training/datasets.h"

#include <algorithm>

#include "core/error.h"
#include "core/generator.h"
#include "core/ops/ops.h"
#include "data/cifar.h"
#include "data/idx.h"

namespace loom::training {

namespace {

// Train-set statistics, as the PyTorch reference normalizes.
const std::vector<double> kMnistMean = {0.2860}, kMnistStd = {0.3530};
const std::vector<double> kCifarMean = {0.4914, 0.4822, 0.4465}, kCifarStd = {0.2470, 0.2435, 0.2616};

// Random uint8 images and labels of the dataset's shape: a test split a tenth the size.
data::Dataset synthetic(const TrainConfig& c, data::Split split) {
  bool cifar = c.dataset == "cifar10";
  int64_t n = split == data::Split::Train ? c.synthetic_images : std::max<int64_t>(c.synthetic_images / 10, 1);
  Shape sizes = cifar ? Shape{n, 3, 32, 32} : Shape{n, 1, 28, 28};
  Generator gen(c.seed + (split == data::Split::Train ? 1 : 2));
  return {randint(0, 256, sizes, {.dtype = DType::UInt8}, &gen), randint(0, 10, {n}, {.dtype = DType::Int64}, &gen)};
}

data::Dataset load(const TrainConfig& c, data::Split split) {
  LOOM_CHECK(c.dataset == "mnist" || c.dataset == "cifar10", ValueError,
             "[train] unknown dataset '{}' (mnist or cifar10)", c.dataset);
  if (c.synthetic_images > 0) return synthetic(c, split);
  return c.dataset == "cifar10" ? data::load_cifar10(c.data, split) : data::load_mnist(c.data, split);
}

data::Dataset first(const data::Dataset& d, int64_t n) {
  if (n <= 0 || n >= d.images.size(0)) return d;
  return {d.images.narrow(0, 0, n).contiguous(), d.labels.narrow(0, 0, n).contiguous()};
}

}  // namespace

// Both splits, read on threads of their own (the test split beside the training
// split) while the caller builds the model: on a GPU the CUDA context starts up
// meanwhile, which takes about as long as inflating the files. An error reading
// either is thrown by the future's get().
std::future<Splits> load_splits(const TrainConfig& c, const StartupPhases& startup) {
  return std::async(std::launch::async, [c, &startup] {
    std::future<data::Dataset> test = std::async(std::launch::async, [&c] {
      return first(load(c, data::Split::Test), c.test_limit);
    });
    Splits splits;
    splits.train = first(load(c, data::Split::Train), c.limit);
    splits.train_read = startup.seconds();
    splits.test = test.get();
    splits.test_read = startup.seconds();
    return splits;
  });
}

// Small sets live on the GPU whole; on the CPU two workers build batches ahead.
// Only training batches are augmented.
data::DataLoader make_loader(const TrainConfig& c, const data::Dataset& set, bool training) {
  bool cifar = c.dataset == "cifar10";
  data::DataLoaderOptions o{.batch_size = training ? c.batch_size : 1000,
                            .shuffle = training,
                            .seed = c.seed,
                            .device = c.device,
                            .mean = cifar ? kCifarMean : kMnistMean,
                            .stddev = cifar ? kCifarStd : kMnistStd};
  if (training) o.augment = {.padding = c.crop_padding, .flip = c.flip};
  if (c.device.is_cuda()) return data::DataLoader::resident(set, o);
  o.num_workers = 2;
  return data::DataLoader(set, o);
}

}  // namespace loom::training
