// File: tools/optim_dump.cc
// Applies N steps of SGD, Adam, AdamW, RMSprop or Adagrad to parameters and per-step gradients
// read from a file, and writes the resulting parameters: the Loom half of
// tools/optim_vs_torch.py, which runs torch.optim on the same numbers.
//
//   optim_dump --optimizer adam --dtype float32 --device cuda --lr 0.01 --amsgrad in.bin out.bin
//
// Files are little-endian; "-" means stdin / stdout. The input:
//   "LOOMOPT1", int64 T (tensors), int64 S (steps),
//   per tensor: int64 ndim, int64 sizes[ndim],
//   per tensor: its numel float64 initial values (row-major),
//   per step, per tensor: its numel float64 gradient values.
// The output: per tensor, its numel float64 final values. Values are cast to
// --dtype on the way in, as torch.tensor(values, dtype=...) casts them.
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "optim/optim.h"

namespace {

using loom::IoError;
using loom::Shape;
using loom::Tensor;
using loom::ValueError;

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'O', 'P', 'T', '1'};
constexpr int64_t kMaxNumel = int64_t{1} << 28;

struct Args {
  std::string optimizer, dtype = "float32", device = "cpu", input, output;
  std::map<std::string, double> numbers;  // --lr 0.1 ...
  bool nesterov = false, amsgrad = false, centered = false, maximize = false;
};

Args parse_args(int argc, char** argv) {
  Args args;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      LOOM_CHECK(i + 1 < argc, ValueError, "[optim_dump] {} needs a value", flag);
      return argv[++i];
    };
    if (flag == "--optimizer") args.optimizer = value();
    else if (flag == "--dtype") args.dtype = value();
    else if (flag == "--device") args.device = value();
    else if (flag == "--nesterov") args.nesterov = true;
    else if (flag == "--amsgrad") args.amsgrad = true;
    else if (flag == "--centered") args.centered = true;
    else if (flag == "--maximize") args.maximize = true;
    else if (flag.starts_with("--")) args.numbers[flag.substr(2)] = std::stod(value());
    else positional.push_back(flag);
  }
  LOOM_CHECK(positional.size() == 2 && !args.optimizer.empty(), ValueError,
             "usage: optim_dump --optimizer sgd|adam|adamw|rmsprop|adagrad [--dtype float32|float64] "
             "[--device cpu|cuda] [--lr X --momentum X --dampening X --weight_decay X --beta1 X "
             "--beta2 X --eps X --alpha X --lr_decay X --initial_accumulator_value X] [--nesterov] "
             "[--amsgrad] [--centered] [--maximize] IN OUT");
  args.input = positional[0];
  args.output = positional[1];
  return args;
}

// ---- input ---------------------------------------------------------------------------

class Reader {
 public:
  Reader(std::istream& in, std::string name) : in_(in), name_(std::move(name)) {}

  void read(void* dst, size_t bytes, const char* what) {
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    LOOM_CHECK(static_cast<size_t>(in_.gcount()) == bytes, IoError,
               "[optim_dump] {}: truncated at byte {} while reading {} ({} bytes expected)", name_,
               offset_, what, bytes);
    offset_ += bytes;
  }
  int64_t int64(const char* what) {
    int64_t v = 0;
    read(&v, sizeof v, what);
    return v;
  }
  Tensor values(const Shape& sizes, loom::TensorOptions options) {
    std::vector<double> v(static_cast<size_t>(loom::numel_of(sizes)));
    read(v.data(), v.size() * sizeof(double), "tensor values");
    return loom::tensor(v, sizes, options);
  }

 private:
  std::istream& in_;
  std::string name_;
  size_t offset_ = 0;
};

std::vector<Shape> read_header(Reader& reader, int64_t& steps) {
  char magic[8];
  reader.read(magic, sizeof magic, "the magic");
  LOOM_CHECK(std::memcmp(magic, kMagic, sizeof magic) == 0, IoError,
             "[optim_dump] the input does not start with LOOMOPT1");
  const int64_t count = reader.int64("the tensor count");
  steps = reader.int64("the step count");
  LOOM_CHECK(count >= 0 && count < (1 << 20) && steps >= 0 && steps < (1 << 20), IoError,
             "[optim_dump] implausible header: {} tensors, {} steps", count, steps);
  std::vector<Shape> shapes(count);
  for (Shape& sizes : shapes) {
    const int64_t ndim = reader.int64("a tensor's ndim");
    LOOM_CHECK(ndim >= 0 && ndim <= 8, IoError, "[optim_dump] a tensor has ndim {}", ndim);
    int64_t numel = 1;  // each factor < 2^28, so the product never overflows
    for (int64_t d = 0; d < ndim; ++d) {
      sizes.push_back(reader.int64("a size"));
      const bool fits = sizes.back() >= 0 && sizes.back() < kMaxNumel &&
                        (numel *= sizes.back()) < kMaxNumel;
      LOOM_CHECK(fits, IoError, "[optim_dump] a tensor of sizes {} is negative or too large",
                 loom::shape_str(sizes));
    }
  }
  return shapes;
}

// ---- the optimizer -----------------------------------------------------------------------

std::unique_ptr<loom::optim::Optimizer> make_optimizer(const Args& a, std::vector<Tensor> params) {
  auto number = [&](const char* name, double fallback) {
    auto it = a.numbers.find(name);
    return it == a.numbers.end() ? fallback : it->second;
  };
  namespace optim = loom::optim;
  if (a.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        params, optim::SgdOptions{.lr = number("lr", 1e-3),
                                  .momentum = number("momentum", 0.0),
                                  .dampening = number("dampening", 0.0),
                                  .nesterov = a.nesterov,
                                  .weight_decay = number("weight_decay", 0.0),
                                  .maximize = a.maximize});
  }
  if (a.optimizer == "rmsprop") {
    return std::make_unique<optim::RMSprop>(params, optim::RmspropOptions{.lr = number("lr", 1e-2),
                                                                          .alpha = number("alpha", 0.99),
                                                                          .eps = number("eps", 1e-8),
                                                                          .weight_decay = number("weight_decay", 0.0),
                                                                          .momentum = number("momentum", 0.0),
                                                                          .centered = a.centered,
                                                                          .maximize = a.maximize});
  }
  if (a.optimizer == "adagrad") {
    return std::make_unique<optim::Adagrad>(
        params, optim::AdagradOptions{.lr = number("lr", 1e-2),
                                      .lr_decay = number("lr_decay", 0.0),
                                      .weight_decay = number("weight_decay", 0.0),
                                      .initial_accumulator_value = number("initial_accumulator_value", 0.0),
                                      .eps = number("eps", 1e-10),
                                      .maximize = a.maximize});
  }
  const bool adamw = a.optimizer == "adamw";
  LOOM_CHECK(adamw || a.optimizer == "adam", ValueError,
             "[optim_dump] unknown optimizer '{}'; expected sgd, adam, adamw, rmsprop or adagrad", a.optimizer);
  const optim::AdamOptions o{.lr = number("lr", 1e-3),
                             .betas = {number("beta1", 0.9), number("beta2", 0.999)},
                             .eps = number("eps", 1e-8),
                             .weight_decay = number("weight_decay", adamw ? 1e-2 : 0.0),
                             .amsgrad = a.amsgrad,
                             .maximize = a.maximize};
  if (!adamw) return std::make_unique<optim::Adam>(params, o);
  return std::make_unique<optim::AdamW>(
      params, optim::AdamWOptions{.lr = o.lr,
                                  .betas = o.betas,
                                  .eps = o.eps,
                                  .weight_decay = o.weight_decay,
                                  .amsgrad = o.amsgrad,
                                  .maximize = o.maximize});
}

void run(const Args& args, std::istream& in, std::ostream& out) {
  LOOM_CHECK(args.dtype == "float32" || args.dtype == "float64", ValueError,
             "[optim_dump] --dtype must be float32 or float64, got '{}'", args.dtype);
  LOOM_CHECK(args.device == "cpu" || args.device == "cuda", ValueError,
             "[optim_dump] --device must be cpu or cuda, got '{}'", args.device);
  const loom::TensorOptions options{
      .dtype = args.dtype == "float32" ? loom::DType::Float32 : loom::DType::Float64,
      .device = args.device == "cuda" ? loom::Device::cuda() : loom::Device::cpu()};
  Reader reader(in, args.input);
  int64_t steps = 0;
  const std::vector<Shape> shapes = read_header(reader, steps);
  std::vector<Tensor> params;
  for (const Shape& sizes : shapes) {
    params.push_back(reader.values(sizes, options).requires_grad_());
  }
  auto opt = make_optimizer(args, params);
  for (int64_t s = 0; s < steps; ++s) {
    for (Tensor& p : params) p.set_grad(reader.values(p.sizes(), options));
    opt->step();
  }
  for (const Tensor& p : params) {
    const std::vector<double> v = p.to_vector<double>();
    out.write(reinterpret_cast<const char*>(v.data()),
              static_cast<std::streamsize>(v.size() * sizeof(double)));
  }
  LOOM_CHECK(out.flush(), IoError, "[optim_dump] could not write {}", args.output);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    std::ifstream file_in;
    std::ofstream file_out;
    if (args.input != "-") file_in.open(args.input, std::ios::binary);
    if (args.output != "-") file_out.open(args.output, std::ios::binary | std::ios::trunc);
    LOOM_CHECK(args.input == "-" || file_in, IoError, "[optim_dump] cannot open {}", args.input);
    LOOM_CHECK(args.output == "-" || file_out, IoError, "[optim_dump] cannot create {}",
               args.output);
    run(args, args.input == "-" ? std::cin : file_in, args.output == "-" ? std::cout : file_out);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
