// File: layers/softmax.h
// Softmax and LogSoftmax over one dim, as modules. For a classification loss
// prefer CrossEntropyLoss on the logits (it fuses the log-softmax).
//
//   nn::LogSoftmax log_probs(1);  // (N, C) -> (N, C), rows are log-probabilities
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}  // dim may be negative
  Tensor forward(const Tensor& x) override;
  int64_t dim() const { return dim_; }
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}  // dim may be negative
  Tensor forward(const Tensor& x) override;
  int64_t dim() const { return dim_; }
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;

 private:
  int64_t dim_;
};

}  // namespace loom::nn
