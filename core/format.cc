// File: core/format.cc
// operator<< for tensors, in PyTorch's spirit: values (summarized past 1000
// elements), then shape, dtype, device and autograd state.
#include <fmt/format.h>

#include <cmath>
#include <ostream>
#include <string>

#include "core/autograd.h"
#include "core/tensor.h"

namespace loom {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Style {
  bool integral = false;
  bool boolean = false;
  bool scientific = false;
};

Style choose_style(DType dtype, const std::vector<double>& values) {
  Style style;
  style.boolean = dtype == DType::Bool;
  style.integral = !is_floating(dtype) && !style.boolean;
  double max_abs = 0, min_abs = INFINITY;
  for (double v : values) {
    if (!std::isfinite(v) || v == 0) continue;
    max_abs = std::max(max_abs, std::fabs(v));
    min_abs = std::min(min_abs, std::fabs(v));
  }
  style.scientific = max_abs >= 1e5 || (min_abs < 1e-4 && min_abs > 0);
  return style;
}

std::string format_value(double v, const Style& style) {
  if (style.boolean) return v != 0 ? "true" : "false";
  if (style.integral) return fmt::format("{}", static_cast<int64_t>(v));
  return style.scientific ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
}

class Printer {
 public:
  Printer(const Tensor& t, std::ostream& out)
      : sizes_(t.sizes()), values_(t.to_vector<double>()), out_(out),
        style_(choose_style(t.dtype(), values_)), summarize_(t.numel() > kSummarizeAbove) {}

  void print(size_t dim, int64_t offset, int indent) {
    if (dim == sizes_.size()) {
      out_ << format_value(values_[offset], style_);
      return;
    }
    int64_t inner = numel_of(Shape(sizes_.begin() + dim + 1, sizes_.end()));
    out_ << "[";
    for (int64_t i = 0; i < sizes_[dim]; ++i) {
      if (summarize_ && sizes_[dim] > 2 * kEdgeItems && i == kEdgeItems) {
        out_ << "...";
        i = sizes_[dim] - kEdgeItems - 1;
      } else {
        print(dim + 1, offset + i * inner, indent + 1);
      }
      if (i + 1 < sizes_[dim]) {
        out_ << (dim + 1 == sizes_.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
      }
    }
    out_ << "]";
  }

 private:
  Shape sizes_;
  std::vector<double> values_;
  std::ostream& out_;
  Style style_;
  bool summarize_;
};

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "tensor(undefined)";
  out << "tensor(";
  Printer(t, out).print(0, 0, static_cast<int>(std::string("tensor(").size()));
  out << ", shape=" << shape_str(t.sizes()) << ", dtype=" << dtype_name(t.dtype())
      << ", device=" << t.device().str();
  if (t.suggest_memory_format() == MemoryFormat::ChannelsLast) out << ", channels_last";
  if (t.grad_fn()) {
    out << ", grad_fn=" << t.grad_fn()->name();
  } else if (t.requires_grad()) {
    out << ", requires_grad=true";
  }
  return out << ")";
}

}  // namespace loom
