// File: examples/tiny/two_layer.cc
// Trains a two-layer perceptron on generated data (three interleaved spirals)
// with plain SGD (on the GPU when there is one, as --device auto), printing the
// loss as it falls. The smallest end-to-
// end use of Loom's tensors, autograd and functional ops.
//
//   bazel run -c opt //examples/tiny:two_layer -- [--steps N] [--seed S]
//       [--device auto|cpu|cuda] [--explain] [--help]
//
// Usage errors print one line and exit 2; failures exit 1.
//
// --explain prints the cuDNN plan cache after training (GPU builds): every
// cached plan with its engine, notes, workspace, build time and hit count.
//
// N samples, D = 2 input features, H hidden units, K = 3 classes.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <numbers>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/ops/activation.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/loss.h"
#include "core/ops/reduction.h"
#include "core/step_boundary.h"
#include "core/tensor.h"

namespace {

constexpr int64_t kPerClass = 200, kClasses = 3, kHidden = 64;

struct Flags {
  int steps = 1000;
  uint64_t seed = 0;
  loom::Device device = loom::cuda_available() ? loom::Device::cuda() : loom::Device::cpu();
  bool explain = false;
  bool help = false;
};

constexpr const char* kUsage =
    "usage: two_layer [--steps N] [--seed S] [--device auto|cpu|cuda] [--explain] [--help]\n"
    "  (--flag=value works as well as --flag value)\n";

// A mistake on the command line: main prints it on one line and exits 2.
class UsageError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The whole of `text` as an integer in [min, max]: "abc", "12x" and "-1" are
// usage errors, not an exception that aborts or a number it is not.
template <class Int>
Int parse_integer(const std::string& flag, const std::string& text, Int min, Int max) {
  Int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || value < min ||
      value > max) {
    throw UsageError(flag + " needs a whole number from " + std::to_string(min) + " to " +
                     std::to_string(max) + ", got '" + text + "'");
  }
  return value;
}

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> inline_value;  // from --flag=value
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    auto value = [&]() {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return std::string(argv[++i]);
    };
    auto no_value = [&]() {
      if (inline_value) throw UsageError(arg + " takes no value, got '" + argv[i] + "'");
    };
    if (arg == "--help" || arg == "-h") {
      no_value();
      flags.help = true;
      return flags;
    } else if (arg == "--steps") {
      flags.steps = parse_integer<int>(arg, value(), 1, 100'000'000);
    } else if (arg == "--seed") {
      flags.seed = parse_integer<uint64_t>(arg, value(), 0, std::numeric_limits<uint64_t>::max());
    } else if (arg == "--explain") {
      no_value();
      flags.explain = true;
    } else if (arg == "--device") {
      std::string d = value();
      if (d == "cpu") {
        flags.device = loom::Device::cpu();
      } else if (d == "cuda") {
        // Checked here so that the answer names the flag to change.
        if (!loom::cuda_available()) {
          throw UsageError("--device cuda: no usable GPU: use --device cpu or --device auto");
        }
        flags.device = loom::Device::cuda();
      } else if (d == "auto") {
        flags.device = loom::cuda_available() ? loom::Device::cuda() : loom::Device::cpu();
      } else {
        throw UsageError("--device: unknown device '" + d + "' (auto, cpu or cuda)");
      }
    } else {
      throw UsageError("unknown argument '" + arg + "'");
    }
  }
  return flags;
}

struct Dataset {
  loom::Tensor x;  // (N, 2)
  loom::Tensor y;  // (N,) int64 class indices
};

// Three spiral arms with noise: not linearly separable, so the hidden layer matters.
Dataset make_spirals(loom::Generator& gen) {
  const int64_t n = kPerClass * kClasses;
  std::vector<double> points, labels;
  std::vector<double> noise = loom::randn({n}, {.dtype = loom::DType::Float64}, &gen).to_vector<double>();
  for (int64_t k = 0; k < kClasses; ++k) {
    for (int64_t i = 0; i < kPerClass; ++i) {
      double r = static_cast<double>(i) / kPerClass;
      double angle = 4.0 * r + 2.0 * std::numbers::pi * k / kClasses + 0.2 * noise[k * kPerClass + i];
      points.push_back(r * std::cos(angle));
      points.push_back(r * std::sin(angle));
      labels.push_back(static_cast<double>(k));
    }
  }
  return {loom::tensor(points, {n, 2}), loom::tensor(labels, {n}, {.dtype = loom::DType::Int64})};
}

// Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch's nn.Linear initialises.
loom::Tensor init_param(const loom::Shape& sizes, int64_t fan_in, loom::Generator& gen,
                        loom::Device device) {
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  loom::Tensor u = loom::rand(sizes, {}, &gen);
  loom::Tensor p = loom::sub(loom::mul(u, 2.0 * bound), bound).to(device).detach();
  return p.requires_grad_(true);
}

double accuracy(const loom::Tensor& logits, const loom::Tensor& y) {
  std::vector<int64_t> predicted = loom::argmax(logits, 1).to_vector<int64_t>();
  std::vector<int64_t> truth = y.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
  return static_cast<double>(correct) / truth.size();
}

int train(const Flags& flags) {
  const int steps = flags.steps;
  const loom::Device device = flags.device;
  loom::Generator gen(flags.seed);
  Dataset data = make_spirals(gen);
  data.x = data.x.to(device);
  data.y = data.y.to(device);
  loom::Tensor w1 = init_param({kHidden, 2}, 2, gen, device);
  loom::Tensor b1 = init_param({kHidden}, 2, gen, device);
  loom::Tensor w2 = init_param({kClasses, kHidden}, kHidden, gen, device);
  loom::Tensor b2 = init_param({kClasses}, kHidden, gen, device);
  const double lr = 0.5;
  std::printf("two-layer perceptron on %s, %lld samples, %lld hidden units, SGD lr %.2f\n",
              device.str().c_str(), static_cast<long long>(data.x.size(0)),
              static_cast<long long>(kHidden), lr);
  for (int step = 0; step <= steps; ++step) {
    loom::Tensor logits = loom::linear(loom::relu(loom::linear(data.x, w1, b1)), w2, b2);
    loom::Tensor loss = loom::cross_entropy(logits, data.y);
    if (step % (steps / 10 == 0 ? 1 : steps / 10) == 0) {
      std::printf("step %5d  loss %.4f  accuracy %.3f\n", step, loss.item(), accuracy(logits, data.y));
    }
    for (loom::Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(loom::Tensor());
    loss.backward();
    loom::NoGradGuard no_grad;
    for (loom::Tensor* p : {&w1, &b1, &w2, &b2}) loom::sub_(*p, p->grad(), lr);
  }
  if (flags.explain) {
    std::printf("%s", loom::plan_report().c_str());
  }
  return 0;
}

}  // namespace

// Nothing escapes main: an uncaught exception would abort (exit 134) and lose
// the buffered output of a redirected run.
int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = parse_flags(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "two_layer: %s (--help lists the flags)\n", e.what());
    return 2;
  }
  if (flags.help) {
    std::printf("%s", kUsage);
    return 0;
  }
  try {
    return train(flags);
  } catch (const loom::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "two_layer: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "two_layer: out of memory (std::bad_alloc)\n");
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "two_layer: internal error: %s (a bug in Loom: please report it)\n", e.what());
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "two_layer: internal error: an exception that is not a std::exception\n");
  }
  return 1;
}
