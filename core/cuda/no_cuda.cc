// File: core/cuda/no_cuda.cc
// The CUDA tier of a build without CUDA (--config=cpu, asan): core/ops calls
// these functions unconditionally, dispatching on the tensor's device, and no
// CUDA tensor exists in such a build, so none is reached in practice. Each
// still says what went wrong. Only what core/ops calls is here, written by
// hand: the headers' comments say what the real functions do.
#include <string>
#include <utility>

#include "core/cuda/attention.h"
#include "core/cuda/bias.h"
#include "core/cuda/capture.h"
#include "core/cuda/compare.h"
#include "core/cuda/conv_depthwise.h"
#include "core/cuda/conv_small.h"
#include "core/cuda/conv_wgrad_mma.h"
#include "core/cuda/copy.h"
#include "core/cuda/counter.h"
#include "core/cuda/elementwise.h"
#include "core/cuda/indexing.h"
#include "core/cuda/interpolate.h"
#include "core/cuda/kernel_choice.h"
#include "core/cuda/layer_norm.h"
#include "core/cuda/loss.h"
#include "core/cuda/matmul.h"
#include "core/cuda/norm.h"
#include "core/cuda/pad.h"
#include "core/cuda/pool.h"
#include "core/cuda/pool_window.h"
#include "core/cuda/random.h"
#include "core/cuda/rnn.h"
#include "core/cuda/reduce.h"
#include "core/cuda/sort.h"
#include "core/error.h"

namespace loom::cuda {
namespace {

[[noreturn]] void no_cuda(const char* function) {
  throw DeviceError(std::string("Loom was built without CUDA; cuda::") + function +
                    " needs a CUDA device. Rebuild without --config=cpu on a machine with the CUDA "
                    "toolkit");
}

}  // namespace

// Nothing is captured where there is no GPU: the honest answer, not an error.
bool is_capturing() { return false; }
void synchronize() { no_cuda("synchronize"); }

bool rnn_run_fits(RnnMode, int64_t, int64_t, DType) { no_cuda("rnn_run_fits"); }
void rnn_run_forward(const kernel::RnnRun&) { no_cuda("rnn_run_forward"); }
void rnn_run_backward(const kernel::RnnRun&) { no_cuda("rnn_run_backward"); }
void rnn_step_forward(const kernel::RnnStep&) { no_cuda("rnn_step_forward"); }
void rnn_step_backward(const kernel::RnnStep&) { no_cuda("rnn_step_backward"); }

void matmul(const Strided&, const Strided&, const Strided&, bool) { no_cuda("matmul"); }

bool is_channel_dense(const Strided&) { no_cuda("is_channel_dense"); }
void add_channel_bias(const Strided&, const Strided&) { no_cuda("add_channel_bias"); }
void channel_sum(const Strided&, const Strided&) { no_cuda("channel_sum"); }
void relu_grad_sum(const Strided&, const Strided&, const Strided&, const Strided&) { no_cuda("relu_grad_sum"); }

void compare(const Strided&, const Strided&, const Strided&, CompareOp) { no_cuda("compare"); }
void compare_scalar(const Strided&, const Strided&, double, CompareOp) { no_cuda("compare_scalar"); }
void isclose(const Strided&, const Strided&, const Strided&, double, double, bool) {
  no_cuda("isclose");
}
void where(const Strided&, const Strided&, const Strided&, const Strided&) { no_cuda("where"); }

bool conv_small_supported(const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_small_supported");
}
bool conv_small_epilogue_supported(const SmallConvEpilogue&, const Strided&) {
  no_cuda("conv_small_epilogue_supported");
}
void conv_small_forward(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&,
                        const SmallConvEpilogue&) {
  no_cuda("conv_small_forward");
}
bool conv_small_dgrad_supported(const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_small_dgrad_supported");
}
void conv_small_dgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_small_dgrad");
}
Scratch conv_small_wgrad_scratch(const Strided&, const Strided&) { no_cuda("conv_small_wgrad_scratch"); }
bool conv_small_wgrad_takes_bias(const Strided&) { no_cuda("conv_small_wgrad_takes_bias"); }
void conv_small_wgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&,
                      const Strided&, const std::optional<Strided>&) {
  no_cuda("conv_small_wgrad");
}

bool conv_wgrad_mma_supported(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_wgrad_mma_supported");
}
Scratch conv_wgrad_mma_scratch(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_wgrad_mma_scratch");
}
void conv_wgrad_mma(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&, const Strided&) {
  no_cuda("conv_wgrad_mma");
}

bool conv_depthwise_supported(const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_depthwise_supported");
}
void conv_depthwise_forward(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_depthwise_forward");
}
void conv_depthwise_dgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&) {
  no_cuda("conv_depthwise_dgrad");
}
Scratch conv_depthwise_wgrad_scratch(const Strided&, const Strided&) {
  no_cuda("conv_depthwise_wgrad_scratch");
}
void conv_depthwise_wgrad(const Strided&, const Strided&, const Strided&, const kernel::ConvParams&,
                          const Strided&) {
  no_cuda("conv_depthwise_wgrad");
}

void copy(const Strided&, const Strided&) { no_cuda("copy"); }

void increment(int64_t*, int64_t) { no_cuda("increment"); }
bool increment_at_capture_end(int64_t*, int64_t) { no_cuda("increment_at_capture_end"); }

void unary(const Strided&, const Strided&, UnaryOp) { no_cuda("unary"); }
void binary(const Strided&, const Strided&, const Strided&, BinaryOp) { no_cuda("binary"); }
void activation_forward(const Strided&, const Strided&, kernel::ActivationKind,
                        const kernel::ActivationParameters&) {
  no_cuda("activation_forward");
}
void activation_backward(const Strided&, const Strided&, const Strided&, kernel::ActivationKind,
                         const kernel::ActivationParameters&) {
  no_cuda("activation_backward");
}
void add_activation(const Strided&, const Strided&, const Strided&, kernel::ActivationKind,
                    const kernel::ActivationParameters&) {
  no_cuda("add_activation");
}
void binary_scalar(const Strided&, const Strided&, double, BinaryOp, bool) { no_cuda("binary_scalar"); }
void add_scaled(const Strided&, const Strided&, const Strided&, double) { no_cuda("add_scaled"); }
void clamp(const Strided&, const Strided&, double, double) { no_cuda("clamp"); }
void clamp_backward(const Strided&, const Strided&, const Strided&, double, double) {
  no_cuda("clamp_backward");
}

void gather(const Strided&, const Strided&, int64_t, const Strided&) { no_cuda("gather"); }
void scatter_add(const Strided&, int64_t, const Strided&, const Strided&) { no_cuda("scatter_add"); }
void scatter_add_sorted(const Strided&, int64_t, int64_t, const Strided&, const Strided&) {
  no_cuda("scatter_add_sorted");
}
void scatter(const Strided&, int64_t, const Strided&, const Strided&) { no_cuda("scatter"); }

void attention_forward(const Strided&, const Strided&, const Strided&, const Strided&, double, bool) {
  no_cuda("attention_forward");
}
void attention_backward(const Strided&, const Strided&, const Strided&, const Strided&, const Strided&,
                        const Strided&, const Strided&, double, bool) {
  no_cuda("attention_backward");
}

void interpolate(const Strided&, const Strided&, const kernel::InterpolateSpec&) { no_cuda("interpolate"); }
void interpolate_backward(const Strided&, const Strided&, const kernel::InterpolateSpec&) {
  no_cuda("interpolate_backward");
}

void cross_entropy_forward(const Strided&, const Strided&, const Strided&,
                           const kernel::CrossEntropyParams&, const LossOutputs&) {
  no_cuda("cross_entropy_forward");
}
void cross_entropy_backward(const Strided&, const Strided&, const Strided&, const Strided&,
                            const LossScale&, const kernel::CrossEntropyParams&) {
  no_cuda("cross_entropy_backward");
}
void nll_loss_forward(const Strided&, const Strided&, const Strided&, int64_t, const LossOutputs&) {
  no_cuda("nll_loss_forward");
}
void nll_loss_backward(const Strided&, const Strided&, const Strided&, const LossScale&, int64_t) {
  no_cuda("nll_loss_backward");
}
kernel::LossTotal read_totals(const LossTotals*, const Strided&, int64_t, int64_t, std::string_view) {
  no_cuda("read_totals");
}

void batch_norm_running_stats(const Strided&, const Strided&, const Strided&, const Strided&, double) {
  no_cuda("batch_norm_running_stats");
}
void batch_norm_forward(const Strided&, const Strided&, const Strided&, const Strided&,
                        const std::optional<Strided>&, const std::optional<Strided>&) {
  no_cuda("batch_norm_forward");
}
void batch_norm_backward(const std::optional<Strided>&, const std::optional<Strided>&,
                         const std::optional<Strided>&, const Strided&, const Strided&, const Strided&,
                         const Strided&, const std::optional<Strided>&, bool) {
  no_cuda("batch_norm_backward");
}

void layer_norm_forward(const Strided&, const Strided&, const Strided&, const Strided&, const std::optional<Strided>&,
                        const std::optional<Strided>&, double) {
  no_cuda("layer_norm_forward");
}
void layer_norm_backward(const Strided&, const std::optional<Strided>&, const std::optional<Strided>&,
                         const Strided&, const Strided&, const Strided&, const Strided&,
                         const std::optional<Strided>&) {
  no_cuda("layer_norm_backward");
}

void pad(const Strided&, const Strided&, const kernel::PadSpec&) { no_cuda("pad"); }
void pad_backward(const Strided&, const Strided&, const kernel::PadSpec&) { no_cuda("pad_backward"); }

void max_pool2d_forward(const Strided&, const Strided&, const Strided&, const kernel::Pool2dParams&) {
  no_cuda("max_pool2d_forward");
}
void max_pool2d_backward(const Strided&, const Strided&, const Strided&, const kernel::Pool2dParams&) {
  no_cuda("max_pool2d_backward");
}
void avg_pool2d_forward(const Strided&, const Strided&, const kernel::Pool2dParams&) {
  no_cuda("avg_pool2d_forward");
}
void avg_pool2d_backward(const Strided&, const Strided&, const kernel::Pool2dParams&) {
  no_cuda("avg_pool2d_backward");
}

bool max_pool2d_window_supported(const kernel::Pool2dParams&) { no_cuda("max_pool2d_window_supported"); }
void max_pool2d_window_forward(const Strided&, const Strided&, const Strided&, const kernel::Pool2dParams&) {
  no_cuda("max_pool2d_window_forward");
}
void max_pool2d_window_backward(const Strided&, const Strided&, const Strided&, const kernel::Pool2dParams&,
                                const Strided*) {
  no_cuda("max_pool2d_window_backward");
}

// Making a choice needs no device (ops keep theirs in statics); choosing times kernels.
KernelChoice::KernelChoice(std::string env_var) : env_var_(std::move(env_var)) {}
std::string KernelChoice::choose(const std::string&, const std::vector<std::string>&,
                                 const std::function<CandidateRuns()>&) {
  no_cuda("KernelChoice::choose");
}

PhiloxArgs philox_draw(Generator&, uint64_t) { no_cuda("philox_draw"); }
void dropout_apply(const Strided&, const Strided&, double, const PhiloxArgs&) { no_cuda("dropout_apply"); }

void reduce(const Strided&, const Strided&, ReduceOp) { no_cuda("reduce"); }
void max_along(const Strided&, const Strided&, const Strided&, int64_t) { no_cuda("max_along"); }
void scatter_add_along(const Strided&, const Strided&, const Strided&, int64_t) {
  no_cuda("scatter_add_along");
}

void sort_rows(const Strided&, const Strided&, bool) { no_cuda("sort_rows"); }
void scan_along(const Strided&, const Strided&, int64_t, kernel::ScanOp, bool) { no_cuda("scan_along"); }

}  // namespace loom::cuda
