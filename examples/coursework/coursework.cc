// File: examples/coursework/coursework.cc
// A first Loom program, written the way the README suggests: a small
// convolutional network as a Module of its own with typed submodules and
// options in braces, a data set of its own (or Fashion-MNIST), Adam, and the
// accuracy counted with (pred == y).sum(). docs/writing_a_module.md walks
// through it; the blocks between "snippet" marks are quoted there verbatim
// (a test keeps the two in sync).
//
//   bazel run -c opt //examples/coursework -- --synthetic 2000 --epochs 3
//   bazel run -c opt //examples/coursework -- --data /usr/share/datasets/fashion-mnist
//
// Flags: --data DIR (IDX files) or --synthetic N (generated images), --epochs N,
// --device auto|cpu|cuda, --help. Usage errors print one line and exit 2;
// failures exit 1.
//
// N batch, 1 channel, 28 x 28 images, 10 classes.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

// [snippet: includes]
#include "core/generator.h"   // Generator, manual_seed
#include "core/ops/ops.h"     // Tensor, autograd and every functional op
#include "data/dataloader.h"  // DataLoader, Dataset, MapDataset
#include "data/idx.h"         // load_mnist
#include "layers/nn.h"        // nn::Module and every layer
#include "optim/adam.h"       // optim::Adam
// [end snippet]

using namespace loom;

// [snippet: net]
class Net : public nn::Module {
 public:
  Net() {
    conv1_ = register_module("conv1", nn::Conv2d(1, 8, 3, {.padding = 1}));
    conv2_ = register_module("conv2", nn::Conv2d(8, 16, 3, {.padding = 1}));
    fc_ = register_module("fc", nn::Linear(16 * 7 * 7, 10));
  }

  Tensor forward(const Tensor& x) override {           // x (N, 1, 28, 28)
    Tensor h = max_pool2d(relu(conv1_->forward(x)), 2);  // (N, 8, 14, 14)
    h = max_pool2d(relu(conv2_->forward(h)), 2);         // (N, 16, 7, 7)
    return fc_->forward(h.flatten(1));                   // (N, 10) logits
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::Linear> fc_;
};
// [end snippet]

// [snippet: dataset]
// Image i shows a bright horizontal bar at a height that encodes its class,
// over faint noise: easy to learn, but only from the pixels.
class Bars : public data::MapDataset {
 public:
  Bars(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}

  int64_t size() const override { return size_; }

  data::Example get(int64_t i) const override {
    Generator gen(seed_ + static_cast<uint64_t>(i));  // example i is the same every time
    const int64_t label = i % 10;
    Tensor image = randint(0, 60, {1, 28, 28}, {.dtype = DType::UInt8}, &gen);
    image.narrow(1, 2 + 2 * label, 3).fill_(255);  // rows 2 + 2 label .. 4 + 2 label
    return {image, label};
  }

 private:
  int64_t size_;
  uint64_t seed_;
};
// [end snippet]

// [snippet: accuracy]
double accuracy(Net& net, data::DataLoader& loader) {
  NoGradGuard no_grad;
  net.eval();
  int64_t correct = 0, total = 0;
  for (auto& [x, y] : loader) {
    Tensor pred = net(x).argmax(1);                          // (N,) int64 classes
    correct += static_cast<int64_t>((pred == y).sum().item());  // a Bool mask, counted
    total += y.size(0);
  }
  net.train();
  return static_cast<double>(correct) / static_cast<double>(total);
}
// [end snippet]

namespace {

struct Flags {
  std::string data;                 // IDX folder; empty with --synthetic
  std::optional<int64_t> synthetic;  // generated examples for training
  int64_t epochs = 2;
  std::string device = "auto";
};

// A usage error: main prints it as one line and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t parse_count(std::string_view flag, const std::string& text, int64_t max) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1 || value > max) {
    throw UsageError(std::string(flag) + " needs a whole number from 1 to " +
                     std::to_string(max) + ", got '" + text + "'");
  }
  return value;
}

Flags parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (i + 1 < argc && arg != "--help" && arg != "-h") {
      value = argv[++i];
    }
    if (arg == "--help" || arg == "-h") throw UsageError("help");
    if (value.empty()) throw UsageError(arg + " needs a value");
    if (arg == "--data") {
      flags.data = value;
    } else if (arg == "--synthetic") {
      flags.synthetic = parse_count(arg, value, 1'000'000);
    } else if (arg == "--epochs") {
      flags.epochs = parse_count(arg, value, 1000);
    } else if (arg == "--device") {
      if (value != "auto" && value != "cpu" && value != "cuda") {
        throw UsageError("--device takes auto, cpu or cuda, got '" + value + "'");
      }
      flags.device = value;
    } else {
      throw UsageError("unknown argument '" + arg + "' (try --help)");
    }
  }
  if (flags.data.empty() == !flags.synthetic) {
    throw UsageError("give exactly one of --data DIR (Fashion-MNIST IDX files) or --synthetic N");
  }
  if (flags.device == "cuda" && !cuda_available()) {
    throw UsageError("--device cuda, but no usable GPU: use --device cpu or --device auto");
  }
  return flags;
}

constexpr const char* kUsage =
    "usage: coursework (--data DIR | --synthetic N) [--epochs N] [--device auto|cpu|cuda]\n";

}  // namespace

// [snippet: train]
struct Loaders {
  data::DataLoader train, test;
};

Loaders make_loaders(const Flags& flags, Device device) {
  const data::DataLoaderOptions train_options{.batch_size = 64, .shuffle = true, .device = device,
                                              .mean = {0.2860}, .stddev = {0.3530}};
  data::DataLoaderOptions test_options = train_options;
  test_options.shuffle = false;
  if (flags.synthetic) {
    return {data::DataLoader(Bars(*flags.synthetic, 1), train_options),
            data::DataLoader(Bars(500, uint64_t{1} << 40), test_options)};
  }
  return {data::DataLoader(data::load_mnist(flags.data, data::Split::Train), train_options),
          data::DataLoader(data::load_mnist(flags.data, data::Split::Test), test_options)};
}

void train(const Flags& flags) {
  const bool gpu = flags.device == "cuda" || (flags.device == "auto" && cuda_available());
  const Device device = gpu ? Device::cuda() : Device::cpu();
  manual_seed(0);  // the initial weights
  Loaders loaders = make_loaders(flags, device);

  Net net;
  net.to(device);
  std::printf("%s\non %s\n", net.str().c_str(), device.str().c_str());
  optim::Adam opt(net.parameters(), {.lr = 1e-3});
  for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
    double loss_sum = 0;
    for (auto& [x, y] : loaders.train) {
      Tensor loss = cross_entropy(net(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      loss_sum += loss.item();
    }
    std::printf("epoch %lld: train loss %.4f, test accuracy %.4f\n",
                static_cast<long long>(epoch), loss_sum / loaders.train.size(),
                accuracy(net, loaders.test));
  }
}
// [end snippet]

int main(int argc, char** argv) {
  try {
    train(parse(argc, argv));
    return 0;
  } catch (const UsageError& e) {
    if (std::string_view(e.what()) == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "coursework: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coursework: %s\n", e.what());
    return 1;
  }
}
