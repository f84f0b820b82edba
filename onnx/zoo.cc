// File: onnx/zoo.cc
// A registry model rebuilt on the CPU with the given weights, then exported.
#include "onnx/zoo.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/checkpoint.h"
#include "core/generator.h"
#include "core/safetensors.h"
#include "models/registry.h"

namespace loom::onnx {

StateDict load_weights(const std::string& path) {
  const std::map<std::string, std::string> metadata = load_safetensors_metadata(path);
  // Training checkpoints say so in their metadata (core/checkpoint.cc's format key).
  if (metadata.count("loom.checkpoint") > 0) return load_checkpoint(path).model;
  return load_safetensors(path);
}

ZooExport export_zoo_model(const std::string& name, const StateDict& weights, const std::string& path,
                           const ZooExportOptions& options) {
  const models::ZooModel& row = models::zoo_model(name);
  LOOM_CHECK(options.batch >= 1 && options.max_image_size >= 0, ValueError,
             "[onnx] the example batch needs at least one sample and a size >= 0, got {} and {}", options.batch,
             options.max_image_size);
  ZooExport result;
  result.model = row.build(row.num_classes);
  if (!weights.empty()) result.model->load_state_dict(weights);
  result.model->eval();
  Generator generator(options.seed);
  Shape shape = row.batch_shape(options.batch);
  if (options.max_image_size > 0 && shape.size() == 4) {
    shape[2] = std::min(shape[2], options.max_image_size);
    shape[3] = std::min(shape[3], options.max_image_size);
  }
  result.input = randn(shape, {}, &generator);
  ExportOptions o = options.onnx;
  if (o.doc_string.empty()) o.doc_string = fmt::format("{}: {} (exported by Loom)", row.name, row.description);
  result.summary = export_model(*result.model, {result.input}, path, o);
  return result;
}

}  // namespace loom::onnx
