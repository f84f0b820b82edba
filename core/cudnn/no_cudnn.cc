// File: core/cudnn/no_cudnn.cc
// The cuDNN tier of a build without CUDA (--config=cpu, asan): core/ops calls
// these functions unconditionally, dispatching on the tensor's device, and no
// CUDA tensor exists in such a build, so none is reached in practice. Each
// still says what went wrong. Only what core/ops calls is here, written by
// hand: the headers' comments say what the real functions do.
#include <string>

#include "core/cudnn/activation.h"
#include "core/cudnn/conv.h"
#include "core/cudnn/fused.h"
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
                         const Strided&, const Strided&, const std::optional<Strided>&) {
  no_cudnn("activation_backward");
}

bool conv2d_forward(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&, WhilePending) {
  no_cudnn("conv2d_forward");
}
bool conv2d_dgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&, WhilePending) {
  no_cudnn("conv2d_dgrad");
}
bool conv2d_wgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&, WhilePending) {
  no_cudnn("conv2d_wgrad");
}
bool conv2d_bias_relu_forward(const Strided&, const Strided&, const Strided&, const std::optional<Strided>&,
                              const kernel::ConvParams&) {
  no_cudnn("conv2d_bias_relu_forward");
}

void batch_norm_forward_training(const BatchNormTrainingArgs&) { no_cudnn("batch_norm_forward_training"); }
void batch_norm_backward(const BatchNormBackwardArgs&) { no_cudnn("batch_norm_backward"); }
void layer_norm_forward(const LayerNormArgs&) { no_cudnn("layer_norm_forward"); }
void layer_norm_backward(const LayerNormBackwardArgs&) { no_cudnn("layer_norm_backward"); }

bool pool_uses_index(const Strided&) { no_cudnn("pool_uses_index"); }
bool pool2d_forward(const Strided&, const Strided*, const Strided&, const kernel::Pool2dParams&) {
  no_cudnn("pool2d_forward");
}
bool pool2d_backward(const Strided&, const Strided&, const PoolBackwardInputs&, const kernel::Pool2dParams&) {
  no_cudnn("pool2d_backward");
}

bool batch_norm_activation_forward_training(const BatchNormTrainingArgs&, const NormActivation&,
                                            const std::optional<Strided>&) {
  no_cudnn("batch_norm_activation_forward_training");
}
bool batch_norm_activation_backward(const BatchNormActivationBackwardArgs&) {
  no_cudnn("batch_norm_activation_backward");
}
bool conv2d_dgrad_relu(const Strided&, const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cudnn("conv2d_dgrad_relu");
}
bool linear_bias_relu_forward(const Strided&, const Strided&, const Strided&, const Strided&) {
  no_cudnn("linear_bias_relu_forward");
}

EpilogueRun conv2d_epilogue_forward(const Strided&, const std::optional<Strided>&, const Strided&, const Strided&,
                                    const kernel::ConvParams&, const std::vector<EpilogueStep>&) {
  no_cudnn("conv2d_epilogue_forward");
}
EpilogueRun linear_epilogue_forward(const Strided&, const std::optional<Strided>&, const Strided&, const Strided&,
                                    const std::vector<EpilogueStep>&) {
  no_cudnn("linear_epilogue_forward");
}
std::string epilogue_derivative_why_not(const EpilogueBackwardArgs&) { no_cudnn("epilogue_derivative_why_not"); }
EpilogueRun epilogue_backward(const Strided&, const EpilogueBackwardArgs&) { no_cudnn("epilogue_backward"); }
EpilogueRun conv2d_epilogue_grads(const std::optional<Strided>&, const std::optional<Strided>&, const Strided&,
                                  const Strided&, const kernel::ConvParams&, const EpilogueBackwardArgs&) {
  no_cudnn("conv2d_epilogue_grads");
}
EpilogueRun linear_epilogue_grads(const std::optional<Strided>&, const std::optional<Strided>&, const Strided&,
                                  const Strided&, const EpilogueBackwardArgs&) {
  no_cudnn("linear_epilogue_grads");
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
