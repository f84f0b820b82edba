// File: data/dataloader.cc
// Option checks, the per-epoch recipe, and iteration.
#include "data/dataloader.h"

#include "core/error.h"
#include "data/pipeline.h"

// N samples, B batch, C channels, H, W image size
namespace loom::data {

namespace {

void check_options(const DataLoaderOptions& options) {
  LOOM_CHECK(options.batch_size >= 1, ValueError, "[DataLoader] batch_size must be >= 1, got {}",
             options.batch_size);
  LOOM_CHECK(options.num_workers >= 0, ValueError, "[DataLoader] num_workers must be >= 0, got {}",
             options.num_workers);
  LOOM_CHECK(options.prefetch_per_worker >= 1, ValueError,
             "[DataLoader] prefetch_per_worker must be >= 1, got {}", options.prefetch_per_worker);
  LOOM_CHECK(options.augment.padding >= 0, ValueError,
             "[DataLoader] augment.padding must be >= 0, got {}", options.augment.padding);
  if (options.device.is_cpu()) return;
  LOOM_CHECK(cuda_available(), DeviceError,
             "[DataLoader] options.device is {} but {}; deliver batches to Device::cpu()",
             options.device.str(),
             cuda_built() ? "no CUDA GPU is usable here" : "this build has no CUDA backend");
}

}  // namespace

DataLoader::DataLoader(Dataset dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  check_dataset(dataset_, "DataLoader");
  check_options(options_);
  normalization_ = make_normalization(dataset_.channels(), options_.mean, options_.stddev);
}

DataLoader::DataLoader(const MapDataset& dataset, DataLoaderOptions options)
    : DataLoader(to_dataset(dataset), std::move(options)) {}

DataLoader DataLoader::resident(Dataset dataset, DataLoaderOptions options) {
  DataLoader loader(std::move(dataset), std::move(options));
  if (loader.options_.device.is_cpu()) return loader;
  LOOM_CHECK(loader.dataset_.channels() <= kMaxResidentChannels, ValueError,
             "[DataLoader::resident] images have {} channels; the GPU gather takes at most {}",
             loader.dataset_.channels(), kMaxResidentChannels);
  loader.resident_ = true;
  loader.device_dataset_ = {loader.dataset_.images.to(loader.options_.device),
                            loader.dataset_.labels.to(loader.options_.device)};
  return loader;
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::set_epoch(int64_t epoch) {
  LOOM_CHECK(epoch >= 0, ValueError, "[DataLoader::set_epoch] epoch must be >= 0, got {}", epoch);
  epoch_ = epoch;
}

DataLoader::Iterator DataLoader::begin() {
  auto recipe = std::make_shared<EpochRecipe>();
  recipe->dataset = dataset_;
  recipe->plan =
      plan_epoch(dataset_.size(), options_.shuffle, options_.augment, options_.seed, epoch_);
  recipe->normalization = normalization_;
  recipe->padding = options_.augment.padding;
  recipe->batch_size = options_.batch_size;
  recipe->batches = size();
  recipe->device = options_.device;
  ++epoch_;
  if (recipe->batches == 0) return Iterator(nullptr, 0);
  std::shared_ptr<BatchSource> source =
      resident_ ? make_resident_source(std::move(recipe), device_dataset_)
                : make_host_pipeline(std::move(recipe), options_.num_workers,
                                     options_.prefetch_per_worker);
  return Iterator(std::move(source), size());
}

DataLoader::Iterator::Iterator(std::shared_ptr<BatchSource> source, int64_t batches)
    : source_(std::move(source)), batches_(batches) {
  if (batches_ > 0) batch_ = source_->next();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  batch_ = index_ < batches_ ? source_->next() : Batch{};
  if (index_ == batches_) source_.reset();  // stops the workers, frees the staging buffers
  return *this;
}

}  // namespace loom::data
