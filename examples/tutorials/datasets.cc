// File: examples/tutorials/datasets.cc
// docs/datasets.md: the data-set readers (IDX / MNIST, CIFAR-10 binary
// batches, image folders) and the DataLoader. It writes small sets in both
// file formats into a scratch folder first, so it runs without downloads.
//
//   bazel run //examples/tutorials:datasets -- SCRATCH_DIR [IMAGE_FOLDER]
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "core/tensor.h"
#include "data/cifar.h"
#include "data/dataloader.h"
#include "data/idx.h"
#include "data/image_folder.h"

using namespace loom;

// N random uint8 images (N, C, H, W) with labels in [0, 10).
data::Dataset random_set(int64_t n, int64_t c, int64_t side, Generator& gen) {
  return {.images = randint(0, 256, {n, c, side, side}, {.dtype = DType::UInt8}, &gen),
          .labels = randint(0, 10, {n}, {.dtype = DType::Int64}, &gen)};
}

void print_set(const char* name, const data::Dataset& set) {
  std::printf("%s: %lld images of %lld x %lld x %lld\n", name, static_cast<long long>(set.size()),
              static_cast<long long>(set.channels()), static_cast<long long>(set.height()),
              static_cast<long long>(set.width()));
}

int main(int argc, char** argv) try {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: datasets SCRATCH_DIR [IMAGE_FOLDER]\n");
    return 2;
  }
  const std::filesystem::path scratch = argv[1];
  std::filesystem::create_directories(scratch / "mnist");
  std::filesystem::create_directories(scratch / "cifar");
  Generator gen(0);

  // IDX files under MNIST's names (plain or .gz), as Fashion-MNIST ships them.
  data::save_mnist(scratch / "mnist", data::Split::Train, random_set(100, 1, 28, gen), true);
  data::Dataset mnist = data::load_mnist(scratch / "mnist", data::Split::Train);
  print_set("mnist", mnist);

  // CIFAR-10's binary batches: test_batch.bin here, data_batch_1..5.bin for Train.
  data::save_cifar10(scratch / "cifar", data::Split::Test, random_set(20, 3, 32, gen));
  print_set("cifar10", data::load_cifar10(scratch / "cifar", data::Split::Test));

  // One subfolder per class of PNG, JPEG or BMP files, as torchvision's ImageFolder.
  if (argc == 3) {
    data::ImageFolder folder = data::load_image_folder(argv[2], {.channels = 3});
    print_set("image folder", folder.dataset);
    for (size_t k = 0; k < folder.classes.size(); ++k) {
      std::printf("  class %zu: %s\n", k, folder.classes[k].c_str());
    }
  }

  // Shuffled, augmented, normalized batches built by two worker threads.
  data::DataLoader loader(mnist, {.batch_size = 32, .shuffle = true, .num_workers = 2,
                                  .mean = {0.5}, .stddev = {0.25},
                                  .augment = {.padding = 2, .flip = true}});
  int64_t seen = 0;
  for (auto& [x, y] : loader) {
    std::printf("batch x (%lld, %lld, %lld, %lld) y (%lld)\n", static_cast<long long>(x.size(0)),
                static_cast<long long>(x.size(1)), static_cast<long long>(x.size(2)),
                static_cast<long long>(x.size(3)), static_cast<long long>(y.size(0)));
    seen += y.size(0);
  }
  std::printf("one epoch: %lld batches, %lld samples\n", static_cast<long long>(loader.size()),
              static_cast<long long>(seen));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "datasets: %s\n", e.what());
  return 1;
}
