// File: bench/summary.cc
// Medians and the JSON lines of bench results.
#include "bench/summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "core/json.h"

namespace loom::bench {

namespace {

std::string number_list(const std::vector<double>& values) {
  std::vector<std::string> numbers;
  for (double value : values) numbers.push_back(json_number(value));
  return fmt::format("[{}]", fmt::join(numbers, ", "));
}

}  // namespace

double median(std::vector<double> values) {
  LOOM_CHECK(!values.empty(), ValueError, "[bench] the median of no values is undefined");
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string to_json(const StepResult& r) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "{{\"framework\": \"loom\", \"kind\": \"step\", \"model\": {}, \"batch\": {}, "
      "\"precision\": {}, \"mode\": {}, \"layout\": {}, \"device\": {}, \"steps\": {}, "
      "\"repeats\": {}, \"warmup\": {}, \"ms_per_step\": {}, \"img_per_s\": {}, "
      "\"first_step_s\": {}, \"model_ready_s\": {}, \"inputs_ready_s\": {}, \"peak_bytes\": {}, "
      "\"peak_mib\": {}, \"steady_peak_bytes\": {}, \"steady_peak_mib\": {}, \"repeat_ms\": {}, "
      "\"fallback_reason\": {}, \"captures\": {}, \"planned_captures\": {}, \"missed_plans\": {}, "
      "\"plans_settled\": {}, "
      "\"plan_build\": {}, \"plans_built\": {}, \"plans_restored\": {}, "
      "\"plans_lazy\": {}, \"plans_specialized\": {}, \"ranks\": {}, \"backward_ms\": {}, "
      "\"allreduce_done_ms\": {}, \"bucket_start_ms\": {}, \"bucket_end_ms\": {}}}",
      json_string(r.model), r.batch, json_string(r.precision), json_string(r.mode),
      json_string(r.layout), json_string(r.device), r.steps, r.repeats, r.warmup,
      json_number(r.ms_per_step()), json_number(r.images_per_second()),
      json_number(r.first_step_s), json_number(r.model_ready_s), json_number(r.inputs_ready_s),
      r.peak_bytes,
      json_number(static_cast<double>(r.peak_bytes) / kMiB), r.steady_peak_bytes,
      json_number(static_cast<double>(r.steady_peak_bytes) / kMiB), number_list(r.repeat_ms),
      json_string(r.fallback_reason), r.captures, r.planned_captures, r.missed_plans, r.plans_settled,
      json_string(r.plan_build), r.plans_built,
      r.plans_restored, r.plans_lazy, r.plans_specialized, r.ranks, json_number(r.backward_ms),
      json_number(r.allreduce_done_ms), number_list(r.bucket_start_ms),
      number_list(r.bucket_end_ms));
}

std::string to_json(const TtaResult& r) {
  const double accuracy = r.accuracies.empty() ? 0.0 : r.accuracies.back();
  return fmt::format(
      "{{\"framework\": \"loom\", \"kind\": \"tta\", \"target\": {}, \"reached\": {}, "
      "\"epochs\": {}, \"seconds\": {}, \"wall_seconds\": {}, \"accuracy\": {}, "
      "\"accuracies\": {}}}",
      json_number(r.target), r.reached ? "true" : "false", r.epochs, json_number(r.seconds),
      json_number(r.wall_seconds), json_number(accuracy),
      number_list(r.accuracies));
}

}  // namespace loom::bench
