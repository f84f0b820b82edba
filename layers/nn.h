// File: layers/nn.h
// Every layer, container, loss and reference model in one include:
//
//   #include "layers/nn.h"
//   auto net = loom::nn::Sequential(loom::nn::Conv2d(1, 32, 3, {.padding = 1}),
//                                   loom::nn::BatchNorm2d(32), loom::nn::ReLU(), ...);
#pragma once

#include "layers/activation.h"
#include "layers/attention.h"
#include "layers/container.h"
#include "layers/conv.h"
#include "layers/conv_transpose.h"
#include "layers/distance.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/flatten.h"
#include "layers/fused.h"
#include "layers/functional.h"
#include "layers/identity.h"
#include "layers/init.h"
#include "layers/linear.h"
#include "layers/loss.h"
#include "layers/models.h"
#include "layers/module.h"
#include "layers/norm.h"
#include "layers/padding.h"
#include "layers/pooling.h"
#include "layers/rnn.h"
#include "layers/softmax.h"
#include "layers/upsample.h"
