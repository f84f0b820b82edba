// File: bench/summary.cc
// Medians and the JSON lines of bench results.
#include "bench/summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace loom::bench {

namespace {

// A JSON string literal; names and reasons are plain text, but a reason may
// quote something.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number_list(const std::vector<double>& values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
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
      "\"first_step_s\": {}, \"peak_bytes\": {}, \"peak_mib\": {}, \"repeat_ms\": {}, "
      "\"fallback_reason\": {}, \"plan_build\": {}, \"plans_built\": {}, \"plans_restored\": {}, "
      "\"plans_lazy\": {}, \"plans_specialized\": {}}}",
      quoted(r.model), r.batch, quoted(r.precision), quoted(r.mode), quoted(r.layout),
      quoted(r.device), r.steps, r.repeats, r.warmup, r.ms_per_step(), r.images_per_second(),
      r.first_step_s, r.peak_bytes, static_cast<double>(r.peak_bytes) / kMiB,
      number_list(r.repeat_ms), quoted(r.fallback_reason), quoted(r.plan_build), r.plans_built,
      r.plans_restored, r.plans_lazy, r.plans_specialized);
}

std::string to_json(const TtaResult& r) {
  const double accuracy = r.accuracies.empty() ? 0.0 : r.accuracies.back();
  return fmt::format(
      "{{\"framework\": \"loom\", \"kind\": \"tta\", \"target\": {}, \"reached\": {}, "
      "\"epochs\": {}, \"seconds\": {}, \"wall_seconds\": {}, \"accuracy\": {}, "
      "\"accuracies\": {}}}",
      r.target, r.reached ? "true" : "false", r.epochs, r.seconds, r.wall_seconds, accuracy,
      number_list(r.accuracies));
}

}  // namespace loom::bench
