// File: models/registry.h
// The model zoo's one registry: a row per model with its name, its builder
// (taking the number of classes), the input it takes, the data set it trains
// on, and its PyTorch twin of the same name in models/torch_models.py. The
// trainers' --model, bench/train_step --models, the fusion lab and
// tools/model_interop.py all read it, so a new model costs its builder, its
// row and its twin (then `python3 tools/zoo_golden.py` regenerates the golden
// state_dict list the tests compare against).
//
//   const models::ZooModel& row = models::zoo_model("resnet18_cifar");
//   std::shared_ptr<nn::Module> net = row.build(row.num_classes);
//   Tensor logits = (*net)(randn(row.batch_shape(8)));  // (8, 10)
//
// N batch, C channels, H, W.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/shape.h"
#include "layers/module.h"

namespace loom::models {

struct ZooModel {
  std::string name;         // "resnet18_cifar", also the twin's name
  std::string description;  // one line: the architecture and where its names come from
  // "mnist" (28x28 grey, Fashion-MNIST), "cifar10" (32x32 colour), "imagenet"
  // (224x224 colour) or "segmentation" (an image and a mask of class indices).
  std::string dataset;
  Shape input;              // one sample (C, H, W)
  int64_t num_classes = 10;
  bool per_pixel = false;   // targets are (N, H, W) class indices (segmentation), else (N)
  std::function<std::shared_ptr<nn::Module>(int64_t num_classes)> build;

  Shape batch_shape(int64_t batch) const;         // (batch, C, H, W)
  Shape target_shape(int64_t batch) const;        // (batch) or (batch, H, W)
};

// Every row: the reference models (lenet5, mnist_net, resnet9), then the zoo.
const std::vector<ZooModel>& zoo();
// The row named `name`; ValueError listing every name when there is none.
const ZooModel& zoo_model(std::string_view name);
std::vector<std::string> zoo_names();
// "lenet5, mnist_net, ...": for usage texts and error messages.
std::string zoo_names_text();

}  // namespace loom::models
