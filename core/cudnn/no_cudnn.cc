// File: core/cudnn/no_cudnn.cc
// The cuDNN tier of a build without CUDA (--config=cpu, asan): core/ops calls
// these functions unconditionally, dispatching on the tensor's device, and no
// CUDA tensor exists in such a build, so none is reached in practice. Each
// still says what went wrong. Only what core/ops calls is here, written by
// hand: the headers' comments say what the real functions do.
#include <string>

#include "core/cudnn/activation.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/norm.h"
#include "core/cudnn/pool.h"
#include "core/cudnn/softmax.h"
#include "core/error.h"

namespace loom::cudnn {
namespace {

[[noreturn]] void no_cudnn(const char* function) {
  throw DeviceError(std::string("Loom was built without CUDA; cudnn::") + function +
                    " needs a CUDA device. Rebuild without --config=cpu on a machine with the CUDA "
                    "toolkit");
}

}  // namespace

bool activation_forward(kernel::ActivationKind, const kernel::ActivationParameters&, const Strided&,
                        const Strided&) {
  no_cudnn("activation_forward");
}
bool activation_backward(kernel::ActivationKind, const kernel::ActivationParameters&, const Strided&,
                         const Strided&, const Strided&) {
  no_cudnn("activation_backward");
}

void conv2d_forward(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cudnn("conv2d_forward");
}
void conv2d_dgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cudnn("conv2d_dgrad");
}
void conv2d_wgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cudnn("conv2d_wgrad");
}
bool conv2d_bias_relu_forward(const Strided&, const Strided&, const Strided&, const std::optional<Strided>&,
                              const kernel::ConvParams&) {
  no_cudnn("conv2d_bias_relu_forward");
}

void batch_norm_forward_training(const BatchNormTrainingArgs&) { no_cudnn("batch_norm_forward_training"); }
void batch_norm_backward(const BatchNormBackwardArgs&) { no_cudnn("batch_norm_backward"); }
bool layer_norm_forward(const LayerNormArgs&) { no_cudnn("layer_norm_forward"); }
bool layer_norm_backward(const LayerNormBackwardArgs&) { no_cudnn("layer_norm_backward"); }

bool pool_uses_index(const Strided&) { no_cudnn("pool_uses_index"); }
bool pool2d_forward(const Strided&, const Strided*, const Strided&, const kernel::Pool2dParams&) {
  no_cudnn("pool2d_forward");
}
bool pool2d_backward(const Strided&, const Strided&, const PoolBackwardInputs&, const kernel::Pool2dParams&) {
  no_cudnn("pool2d_backward");
}

void softmax_forward(const Strided&, const Strided&, int64_t) { no_cudnn("softmax_forward"); }
void softmax_backward(const Strided&, const Strided&, const Strided&, int64_t) {
  no_cudnn("softmax_backward");
}
void log_softmax_forward(const Strided&, const Strided&, int64_t) { no_cudnn("log_softmax_forward"); }
void log_softmax_backward(const Strided&, const Strided&, const Strided&, int64_t) {
  no_cudnn("log_softmax_backward");
}

}  // namespace loom::cudnn
