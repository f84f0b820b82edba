// File: data/resident_source.cc
// GPU-resident batches: the epoch's order and placements go to the device once,
// then each batch is one gather kernel over the device copy of the set.
#include "core/error.h"
#include "data/pipeline.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/gather.h"
#endif

// N samples, B batch, C channels, H, W image size
namespace loom::data {

#ifdef LOOM_WITH_CUDA

namespace {

static_assert(sizeof(Placement) == 3 * sizeof(int32_t), "placements upload as (N, 3) int32");
static_assert(kMaxResidentChannels == cuda::kMaxGatherChannels);

cuda::ImageGatherParams gather_params(const EpochRecipe& recipe) {
  cuda::ImageGatherParams params;
  params.padding = recipe.padding;
  for (size_t c = 0; c < recipe.normalization.scale.size(); ++c) {
    params.scale[c] = recipe.normalization.scale[c];
    params.shift[c] = recipe.normalization.shift[c];
  }
  return params;
}

class ResidentSource : public BatchSource {
 public:
  ResidentSource(std::shared_ptr<const EpochRecipe> recipe, const Dataset& device_dataset)
      : recipe_(std::move(recipe)),
        device_dataset_(device_dataset),
        params_(gather_params(*recipe_)) {
    const std::vector<int64_t>& order = recipe_->plan.order;
    const std::vector<Placement>& placements = recipe_->plan.placements;
    const int64_t n = static_cast<int64_t>(order.size());
    const Device device = recipe_->device;
    order_ = from_host(order.data(), DType::Int64, {n}, {.dtype = DType::Int64, .device = device});
    placements_ = from_host(placements.data(), DType::Int32, {n, 3},
                            {.dtype = DType::Int32, .device = device});
  }

  Batch next() override {
    DeviceGuard guard(recipe_->device);
    const int64_t k = next_++;
    const int64_t first = recipe_->first(k), rows = recipe_->rows(k);
    const Tensor indices = order_.slice(0, first, first + rows);
    Batch batch{empty(recipe_->x_sizes(k), {.device = recipe_->device}),
                empty({rows}, {.dtype = DType::Int64, .device = recipe_->device})};
    cuda::gather_images(batch.x.strided(), device_dataset_.images.strided(), indices.strided(),
                        placements_.slice(0, first, first + rows).strided(), params_);
    cuda::gather_labels(batch.y.strided(), device_dataset_.labels.strided(), indices.strided());
    return batch;
  }

 private:
  std::shared_ptr<const EpochRecipe> recipe_;
  Dataset device_dataset_;
  cuda::ImageGatherParams params_;
  Tensor order_;       // (N,) int64 on the device
  Tensor placements_;  // (N, 3) int32 on the device
  int64_t next_ = 0;
};

}  // namespace

std::shared_ptr<BatchSource> make_resident_source(std::shared_ptr<const EpochRecipe> recipe,
                                                  const Dataset& device_dataset) {
  return std::make_shared<ResidentSource>(std::move(recipe), device_dataset);
}

#else

std::shared_ptr<BatchSource> make_resident_source(std::shared_ptr<const EpochRecipe>,
                                                  const Dataset&) {
  throw DeviceError(
      "[DataLoader::resident] a GPU-resident loader needs the CUDA backend; this "
      "build has none (use the CPU device)");
}

#endif

}  // namespace loom::data
