// File: tests/layers/module_testing.h
// Helpers the layer tests share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/module.h"
#include "layers/rnn.h"

namespace loom::testing {

// The module's state_dict names, in order.
inline std::vector<std::string> state_dict_names(const nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.push_back(name);
  return names;
}

// The recurrent module of `mode` (RNN with its nonlinearity, LSTM or GRU) with options o.
inline std::shared_ptr<nn::RNNBase> make_recurrent(RnnMode mode, int64_t in, int64_t hidden, nn::RNNOptions o) {
  if (mode == RnnMode::Lstm) return std::make_shared<nn::LSTM>(in, hidden, o);
  if (mode == RnnMode::Gru) return std::make_shared<nn::GRU>(in, hidden, o);
  o.nonlinearity = mode == RnnMode::Relu ? nn::RNNNonlinearity::ReLU : nn::RNNNonlinearity::Tanh;
  return std::make_shared<nn::RNN>(in, hidden, o);
}

}  // namespace loom::testing
