// File: onnx/zoo.cc
// A registry model rebuilt on the CPU with the given weights, then exported.
#include "onnx/zoo.h"

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

ZooExport export_zoo_model(const std::string& name, const StateDict& weights, const std::string& path, int64_t batch,
                           const ExportOptions& options, uint64_t seed) {
  const models::ZooModel& row = models::zoo_model(name);
  LOOM_CHECK(batch >= 1, ValueError, "[onnx] the example batch must have at least one sample, got {}", batch);
  ZooExport result;
  result.model = row.build(row.num_classes);
  if (!weights.empty()) result.model->load_state_dict(weights);
  result.model->eval();
  Generator generator(seed);
  result.input = randn(row.batch_shape(batch), {}, &generator);
  ExportOptions o = options;
  if (o.doc_string.empty()) o.doc_string = fmt::format("{}: {} (exported by Loom)", row.name, row.description);
  result.summary = export_model(*result.model, {result.input}, path, o);
  return result;
}

}  // namespace loom::onnx
