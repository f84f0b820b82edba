// File: tests/core/cuda/optim_gpu_test.cc
// The multi-tensor kernels of core/cuda/optim.h on their own: the SGD, Adam,
// RMSprop and Adagrad updates against a host reference written here (same operation order, in the
// tensors' dtype), the sum of squares and the scaling, the slot table's upload
// cache, empty tensors, and the launch counter.
//
// Tolerances: the kernels round each operation once (no FMA contraction), as
// the host reference does, so they should agree bit for bit; the checks allow
// float32 rtol 1e-6 and float64 rtol 1e-12.
#include <doctest/doctest.h>

#ifdef LOOM_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/cuda/optim.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

using namespace loom;

namespace {

// The GPU the tests run on (LOOM_TEST_GPU), as the kernels' device argument.
int gpu_index() { return testing::test_gpu().index; }

// Odd sizes around the kChunkSize (512) element chunks, an empty tensor, and a large one.
const std::vector<int64_t> kSizes = {1, 7, 511, 512, 513, 0, 33, 1000003, 1025};

// One tensor per size for each of param, grad and up to three states, on the GPU.
struct DeviceSet {
  std::vector<Tensor> param, grad;
  std::vector<Tensor> state[cuda::kMaxSlotStates];
};

DeviceSet random_set(DType dtype, int num_states, Generator& gen) {
  DeviceSet set;
  for (int64_t n : kSizes) {
    auto draw = [&] { return randn({n}, {.dtype = dtype}, &gen); };
    set.param.push_back(draw().to(testing::test_gpu()));
    set.grad.push_back(draw().to(testing::test_gpu()));
    for (int s = 0; s < num_states; ++s) {
      Tensor x = draw();
      set.state[s].push_back((s == 0 ? x : x * x).to(testing::test_gpu()));  // second moments >= 0
    }
  }
  return set;
}

std::vector<cuda::TensorSlot> slots_of(const DeviceSet& set, int num_states) {
  std::vector<cuda::TensorSlot> slots;
  for (size_t k = 0; k < set.param.size(); ++k) {
    cuda::TensorSlot slot;
    slot.param = set.param[k].raw_data();
    slot.grad = set.grad[k].raw_data();
    for (int s = 0; s < num_states; ++s) slot.state[s] = set.state[s][k].raw_data();
    slot.numel = set.param[k].numel();
    slots.push_back(slot);
  }
  return slots;
}

// Host copies of a device set, to run the reference on.
template <class T>
struct HostSet {
  std::vector<std::vector<T>> param, grad;
  std::vector<std::vector<T>> state[cuda::kMaxSlotStates];

  HostSet(const DeviceSet& set, int num_states) {
    for (size_t k = 0; k < set.param.size(); ++k) {
      param.push_back(set.param[k].to_vector<T>());
      grad.push_back(set.grad[k].to_vector<T>());
      for (int s = 0; s < num_states; ++s) state[s].push_back(set.state[s][k].to_vector<T>());
    }
  }
};

template <class T>
void check_equal(const std::vector<Tensor>& device, const std::vector<std::vector<T>>& host) {
  const double rtol = std::is_same_v<T, float> ? 1e-6 : 1e-12;
  const double atol = std::is_same_v<T, float> ? 1e-7 : 1e-14;
  for (size_t k = 0; k < device.size(); ++k) {
    CAPTURE(k);
    const Shape sizes = {static_cast<int64_t>(host[k].size())};
    Tensor expected = from_host(host[k].data(), dtype_of<T>(), sizes, {.dtype = dtype_of<T>()});
    CHECK_CLOSE(device[k].cpu(), expected, rtol, atol);
  }
}

// ---- host references: torch.optim's rules, one rounding per operation -------------

template <class T>
void sgd_reference(const cuda::SgdScalars& s, std::vector<T>& p, const std::vector<T>& grad,
                   std::vector<T>& buf) {
  for (size_t i = 0; i < p.size(); ++i) {
    T g = s.maximize ? -grad[i] : grad[i];
    if (s.weight_decay != 0.0) g = g + T(s.weight_decay) * p[i];
    if (s.momentum != 0.0) {
      buf[i] = s.first_step ? g : buf[i] * T(s.momentum) + T(1.0 - s.dampening) * g;
      g = s.nesterov ? g + T(s.momentum) * buf[i] : buf[i];
    }
    p[i] = p[i] - T(s.lr) * g;
  }
}

template <class T>
void adam_reference(const cuda::AdamScalars& s, HostSet<T>& h, size_t k) {
  std::vector<T>& p = h.param[k];
  for (size_t i = 0; i < p.size(); ++i) {
    T g = s.maximize ? -h.grad[k][i] : h.grad[k][i];
    if (s.weight_decay != 0.0 && s.decoupled_weight_decay) p[i] = p[i] * T(1.0 - s.lr * s.weight_decay);
    if (s.weight_decay != 0.0 && !s.decoupled_weight_decay) g = g + T(s.weight_decay) * p[i];
    T& m = h.state[0][k][i];
    T& v = h.state[1][k][i];
    m = m + T(1.0 - s.beta1) * (g - m);
    v = v * T(s.beta2) + T(1.0 - s.beta2) * (g * g);
    T v_hat = v;
    if (s.amsgrad) v_hat = h.state[2][k][i] = std::max(h.state[2][k][i], v);
    p[i] = p[i] - T(s.step_size) * (m / (std::sqrt(v_hat) / T(s.bias_correction2_sqrt) + T(s.eps)));
  }
}

// torch.optim.RMSprop's foreach rule; states: square_avg, momentum_buffer, grad_avg.
template <class T>
void rmsprop_reference(const cuda::RmspropScalars& s, HostSet<T>& h, size_t k) {
  std::vector<T>& p = h.param[k];
  const T one_minus_alpha = T(1.0 - s.alpha);
  for (size_t i = 0; i < p.size(); ++i) {
    T g = s.maximize ? -h.grad[k][i] : h.grad[k][i];
    if (s.weight_decay != 0.0) g = g + T(s.weight_decay) * p[i];
    T& v = h.state[0][k][i];
    v = v * T(s.alpha) + one_minus_alpha * (g * g);
    T variance = v;
    if (s.centered) {
      T& m = h.state[2][k][i];
      m = m + one_minus_alpha * (g - m);
      variance = v - m * m;
    }
    const T step = g / (std::sqrt(variance) + T(s.eps));
    if (s.momentum > 0.0) {
      T& b = h.state[1][k][i];
      b = b * T(s.momentum) + step;
      p[i] = p[i] - T(s.lr) * b;
    } else {
      p[i] = p[i] - T(s.lr) * step;
    }
  }
}

// torch.optim.Adagrad's foreach rule (lr already decayed); state: sum.
template <class T>
void adagrad_reference(const cuda::AdagradScalars& s, HostSet<T>& h, size_t k) {
  std::vector<T>& p = h.param[k];
  for (size_t i = 0; i < p.size(); ++i) {
    T g = s.maximize ? -h.grad[k][i] : h.grad[k][i];
    if (s.weight_decay != 0.0) g = g + T(s.weight_decay) * p[i];
    T& sum = h.state[0][k][i];
    sum = sum + g * g;
    p[i] = p[i] + (g * T(-s.lr)) / (std::sqrt(sum) + T(s.eps));
  }
}

const cuda::AdagradScalars kAdagradCases[] = {
    {.lr = 0.01},
    {.lr = 0.05, .weight_decay = 0.1, .eps = 1e-3, .maximize = true},
};

const cuda::SgdScalars kSgdCases[] = {
    {.lr = 0.1},
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01, .first_step = true},
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.8, .nesterov = true, .maximize = true},
};

const cuda::AdamScalars kAdamCases[] = {
    {.lr = 0.01, .step_size = 0.1, .bias_correction2_sqrt = 0.0447},
    {.lr = 0.01, .weight_decay = 0.1, .step_size = 0.02, .bias_correction2_sqrt = 0.5,
     .amsgrad = true},
    {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-3, .weight_decay = 0.1,
     .step_size = 0.03, .bias_correction2_sqrt = 0.9, .amsgrad = true, .maximize = true,
     .decoupled_weight_decay = true},
};

const cuda::RmspropScalars kRmspropCases[] = {
    {.lr = 0.01},
    {.lr = 0.01, .alpha = 0.9, .eps = 1e-4, .weight_decay = 0.1, .momentum = 0.9},
    {.lr = 0.02, .alpha = 0.95, .momentum = 0.5, .centered = true, .maximize = true},
    {.lr = 0.02, .weight_decay = 0.05, .centered = true},
};

template <class T>
void check_sgd_cases() {
  Generator gen(41);
  for (const cuda::SgdScalars& s : kSgdCases) {
    CAPTURE(s.momentum);
    CAPTURE(s.first_step);
    DeviceSet set = random_set(dtype_of<T>(), 1, gen);
    HostSet<T> host(set, 1);
    cuda::SlotTable table;
    cuda::update_step(table, slots_of(set, 1), dtype_of<T>(), gpu_index(), s);
    for (size_t k = 0; k < kSizes.size(); ++k) {
      sgd_reference(s, host.param[k], host.grad[k], host.state[0][k]);
    }
    check_equal(set.param, host.param);
    if (s.momentum != 0.0) check_equal(set.state[0], host.state[0]);
  }
}

template <class T>
void check_adam_cases() {
  Generator gen(42);
  for (const cuda::AdamScalars& s : kAdamCases) {
    CAPTURE(s.amsgrad);
    CAPTURE(s.decoupled_weight_decay);
    DeviceSet set = random_set(dtype_of<T>(), 3, gen);
    HostSet<T> host(set, 3);
    cuda::SlotTable table;
    cuda::update_step(table, slots_of(set, s.amsgrad ? 3 : 2), dtype_of<T>(), gpu_index(), s);
    for (size_t k = 0; k < kSizes.size(); ++k) adam_reference(s, host, k);
    check_equal(set.param, host.param);
    check_equal(set.state[0], host.state[0]);
    check_equal(set.state[1], host.state[1]);
    check_equal(set.state[2], host.state[2]);  // untouched without amsgrad
  }
}

template <class T>
void check_rmsprop_cases() {
  Generator gen(45);
  for (const cuda::RmspropScalars& s : kRmspropCases) {
    CAPTURE(s.momentum);
    CAPTURE(s.centered);
    DeviceSet set = random_set(dtype_of<T>(), 3, gen);
    // square_avg a square plus 0.5, momentum_buffer a plain draw, grad_avg a tenth of it:
    // square_avg - grad_avg^2 stays above 0.49 - grad_avg^2, positive short of a 7-sigma draw.
    for (size_t k = 0; k < kSizes.size(); ++k) set.state[2][k] = mul(set.state[0][k], 0.1);
    std::swap(set.state[0], set.state[1]);
    for (Tensor& v : set.state[0]) add_(v, 0.5);
    HostSet<T> host(set, 3);
    cuda::SlotTable table;
    std::vector<cuda::TensorSlot> slots = slots_of(set, 3);
    for (cuda::TensorSlot& slot : slots) {
      if (s.momentum == 0.0) slot.state[1] = nullptr;
      if (!s.centered) slot.state[2] = nullptr;
    }
    cuda::update_step(table, slots, dtype_of<T>(), gpu_index(), s);
    for (size_t k = 0; k < kSizes.size(); ++k) rmsprop_reference(s, host, k);
    for (int state = 0; state < 3; ++state) check_equal(set.state[state], host.state[state]);
    check_equal(set.param, host.param);
  }
}

template <class T>
void check_adagrad_cases() {
  Generator gen(47);
  for (const cuda::AdagradScalars& s : kAdagradCases) {
    CAPTURE(s.weight_decay);
    // random_set's second state is a square: the sum of squares.
    DeviceSet set = random_set(dtype_of<T>(), 2, gen);
    std::swap(set.state[0], set.state[1]);
    HostSet<T> host(set, 1);
    cuda::SlotTable table;
    cuda::update_step(table, slots_of(set, 1), dtype_of<T>(), gpu_index(), s);
    for (size_t k = 0; k < kSizes.size(); ++k) adagrad_reference(s, host, k);
    check_equal(set.state[0], host.state[0]);
    check_equal(set.param, host.param);
  }
}

}  // namespace

LOOM_GPU_TEST_CASE("the fused SGD kernel matches a host reference in float32 and float64") {
  check_sgd_cases<float>();
  check_sgd_cases<double>();
}

LOOM_GPU_TEST_CASE("the fused Adam kernel matches a host reference in float32 and float64") {
  check_adam_cases<float>();
  check_adam_cases<double>();
}

LOOM_GPU_TEST_CASE("the fused RMSprop kernel matches a host reference in float32 and float64") {
  check_rmsprop_cases<float>();
  check_rmsprop_cases<double>();
}

LOOM_GPU_TEST_CASE("the fused Adagrad kernel matches a host reference in float32 and float64") {
  check_adagrad_cases<float>();
  check_adagrad_cases<double>();
}

LOOM_GPU_TEST_CASE("a launch without staged scalars is an error, not an update with stale ones") {
  Generator gen(46);
  DeviceSet set = random_set(DType::Float32, 0, gen);
  cuda::SlotTable table;
  CHECK(!table.staged().has_value());
  CHECK_THROWS_AS(cuda::launch_staged(table, slots_of(set, 0), DType::Float32, gpu_index()), ValueError);
  table.stage(kRmspropCases[0], gpu_index());
  CHECK(std::holds_alternative<cuda::RmspropScalars>(*table.staged()));
}

LOOM_GPU_TEST_CASE("sum_of_squares is the double sum, the same bits every call; scale multiplies") {
  Generator gen(43);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    CAPTURE(dtype_name(dtype));
    DeviceSet set = random_set(dtype, 0, gen);
    double expected = 0.0;
    for (const Tensor& t : set.param) {
      for (double x : t.to_vector<double>()) expected += x * x;
    }
    cuda::SlotTable table;
    const double sum = cuda::sum_of_squares(table, slots_of(set, 0), dtype, gpu_index());
    CHECK(sum == doctest::Approx(expected).epsilon(1e-12));
    CHECK(cuda::sum_of_squares(table, slots_of(set, 0), dtype, gpu_index()) == sum);
    std::vector<Tensor> before;
    for (const Tensor& t : set.param) before.push_back(t.cpu());
    cuda::scale(table, slots_of(set, 0), dtype, gpu_index(), 0.375);  // exact in binary: x * 0.375 rounds once
    for (size_t k = 0; k < before.size(); ++k) {
      CAPTURE(k);
      std::vector<double> v = before[k].to_vector<double>();
      for (double& x : v) x *= 0.375;
      CHECK_CLOSE(set.param[k].cpu(), tensor(v, before[k].sizes(), {.dtype = dtype}), 0, 0);
    }
  }
}

LOOM_GPU_TEST_CASE("a slot table uploads only when its slots change, and drops empty tensors") {
  Tensor a = zeros({1}, {.device = testing::test_gpu()});
  Tensor b = zeros({cuda::kChunkSize + 1}, {.device = testing::test_gpu()});
  Tensor c = zeros({cuda::kChunkSize}, {.device = testing::test_gpu()});
  auto slot = [](const Tensor& t) {
    cuda::TensorSlot s;
    s.param = t.raw_data();
    s.numel = t.numel();
    return s;
  };
  cuda::TensorSlot empty_slot;  // numel 0
  cuda::SlotTable table;
  table.upload({slot(a), empty_slot, slot(b), slot(c)}, gpu_index());
  CHECK(table.uploads() == 1);
  CHECK(table.size() == 3);
  CHECK(table.num_chunks() == 1 + 2 + 1);
  table.upload({slot(a), empty_slot, slot(b), slot(c)}, gpu_index());
  CHECK(table.uploads() == 1);
  table.upload({slot(a), slot(c), slot(b)}, gpu_index());
  CHECK(table.uploads() == 2);
  table.upload({empty_slot}, gpu_index());
  CHECK(table.size() == 0);
  CHECK(table.num_chunks() == 0);
}

LOOM_GPU_TEST_CASE("each fused call is one launch (sum_of_squares two), and nothing for no work") {
  Generator gen(44);
  DeviceSet set = random_set(DType::Float32, 3, gen);
  cuda::SlotTable table;
  int64_t before = cuda::multi_tensor_launches();
  cuda::update_step(table, slots_of(set, 2), DType::Float32, gpu_index(), kAdamCases[0]);
  CHECK(cuda::multi_tensor_launches() - before == 1);
  before = cuda::multi_tensor_launches();
  cuda::update_step(table, slots_of(set, 1), DType::Float32, gpu_index(), kSgdCases[1]);
  CHECK(cuda::multi_tensor_launches() - before == 1);
  before = cuda::multi_tensor_launches();
  cuda::sum_of_squares(table, slots_of(set, 0), DType::Float32, gpu_index());
  CHECK(cuda::multi_tensor_launches() - before == 2);
  before = cuda::multi_tensor_launches();
  cuda::update_step(table, {}, DType::Float32, gpu_index(), kSgdCases[0]);
  CHECK(cuda::sum_of_squares(table, {}, DType::Float32, gpu_index()) == 0.0);
  CHECK(cuda::multi_tensor_launches() == before);
}

#endif  // LOOM_WITH_CUDA
