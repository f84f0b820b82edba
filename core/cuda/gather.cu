// File: core/cuda/gather.cu
// Batch gathers for the DataLoader's GPU-resident mode: one thread per output
// element, which reads its source pixel through the image's placement.
#include "core/cuda/gather_kernels.h"
#include "core/cuda/geometry.cuh"

// N images, B batch, C channels, H, W image size, P padding
namespace loom::cuda {

namespace {

struct ImageDims {
  int64_t batch, channels, height, width;
};

// Output (b, c, h, w) reads input (indices[b], c, top + h - P, left + w' - P),
// w' = W - 1 - w when flipped; outside the input the pixel is 0 (the padding).
__global__ void gather_images_kernel(float* out, const uint8_t* images, const int64_t* indices,
                                     const int32_t* placements, ImageDims d,
                                     ImageGatherParams params) {
  const int64_t n = d.batch * d.channels * d.height * d.width;
  for (int64_t i = first_index(); i < n; i += index_step()) {
    const int64_t w = i % d.width;
    const int64_t h = (i / d.width) % d.height;
    const int64_t c = (i / (d.width * d.height)) % d.channels;
    const int64_t b = i / (d.width * d.height * d.channels);
    const int32_t* p = placements + 3 * b;
    const int64_t sh = p[0] + h - params.padding;
    const int64_t sw = p[1] + (p[2] ? d.width - 1 - w : w) - params.padding;
    uint8_t pixel = 0;
    if (sh >= 0 && sh < d.height && sw >= 0 && sw < d.width) {
      pixel = images[((indices[b] * d.channels + c) * d.height + sh) * d.width + sw];
    }
    out[i] = fmaf(static_cast<float>(pixel), params.scale[c], params.shift[c]);
  }
}

__global__ void gather_labels_kernel(int64_t* out, const int64_t* labels, const int64_t* indices,
                                     int64_t batch) {
  for (int64_t b = first_index(); b < batch; b += index_step()) out[b] = labels[indices[b]];
}

}  // namespace

cudaError_t launch_gather_images(const Strided& out, const Strided& images, const Strided& indices,
                                 const Strided& placements, const ImageGatherParams& params,
                                 cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return cudaSuccess;
  const ImageDims dims{out.sizes[0], out.sizes[1], out.sizes[2], out.sizes[3]};
  gather_images_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
      out.ptr<float>(), images.ptr<uint8_t>(), indices.ptr<int64_t>(), placements.ptr<int32_t>(),
      dims, params);
  return cudaGetLastError();
}

cudaError_t launch_gather_labels(const Strided& out, const Strided& labels, const Strided& indices,
                                 cudaStream_t stream) {
  const int64_t batch = out.numel();
  if (batch == 0) return cudaSuccess;
  gather_labels_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(
      out.ptr<int64_t>(), labels.ptr<int64_t>(), indices.ptr<int64_t>(), batch);
  return cudaGetLastError();
}

}  // namespace loom::cuda
