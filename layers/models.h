// File: layers/models.h
// The reference models of bench/torch_bench.py, layer for layer, so
// their state_dict names and shapes are PyTorch's and weights move both ways.
//
//   auto net = nn::mnist_net();  // (N, 1, 28, 28) -> (N, 10) logits
#pragma once

#include "layers/container.h"

namespace loom::nn {

// Two conv-BN-ReLU-pool stages and a two-layer classifier, 421,834 parameters.
// (N, 1, 28, 28) -> (N, 10).
Sequential mnist_net();

// LeNet-5 with ReLU and max pooling, 61,706 parameters. (N, 1, 28, 28) -> (N, 10).
Sequential lenet5();

// The DAWNBench-style ResNet-9 for CIFAR-10, 6,573,130 parameters.
// (N, 3, 32, 32) -> (N, 10).
Sequential resnet9();

}  // namespace loom::nn
