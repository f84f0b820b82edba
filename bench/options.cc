// File: bench/options.cc
// Flag parsing for bench/train_step: a table of setters, then one validation pass.
#include "bench/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>

#include "core/error.h"
#include "models/registry.h"

namespace loom::bench {

namespace {

const std::vector<std::string> kPrecisions = {"tf32", "strict", "bf16"};
const std::vector<std::string> kModes = {"graph", "eager", "graph-traced", "graph-unfused", "eager-unfused"};
const std::vector<std::string> kLayouts = {"auto", "nchw", "nhwc"};
const std::vector<std::string> kOptimizers = {"sgd", "adam"};
const std::vector<std::string> kPlanBuilds = {"lazy", "eager", "precompiled"};

void check_known(const std::string& flag, const std::string& value,
                 const std::vector<std::string>& known) {
  LOOM_CHECK(std::find(known.begin(), known.end(), value) != known.end(), ValueError,
             "[bench] {} got unknown value '{}' (one of: {})", flag, value, fmt::join(known, ", "));
}

Device parse_device(const std::string& value) {
  if (value == "cpu") return Device::cpu();
  LOOM_CHECK(value == "cuda", ValueError, "[bench] --device got '{}' (cpu or cuda)", value);
  return Device::cuda();
}

using Setter = std::function<void(BenchOptions&, const std::string& flag, const std::string&)>;

const std::map<std::string, Setter>& value_flags() {
  static const std::map<std::string, Setter> flags = {
      {"--models",
       [](BenchOptions& o, auto&, auto& v) {
         o.models = v == "none" ? std::vector<std::string>{} : split_list(v);
       }},
      {"--batches",
       [](BenchOptions& o, auto& f, auto& v) {
         o.batches.clear();
         for (const std::string& item : split_list(v)) o.batches.push_back(parse_count(f, item, 1));
       }},
      {"--precisions", [](BenchOptions& o, auto&, auto& v) { o.precisions = split_list(v); }},
      {"--modes", [](BenchOptions& o, auto&, auto& v) { o.modes = split_list(v); }},
      {"--layout", [](BenchOptions& o, auto&, auto& v) { o.layout = v; }},
      {"--steps", [](BenchOptions& o, auto& f, auto& v) { o.steps = parse_count(f, v, 1); }},
      {"--repeats", [](BenchOptions& o, auto& f, auto& v) { o.repeats = parse_count(f, v, 1); }},
      {"--warmup", [](BenchOptions& o, auto& f, auto& v) { o.warmup = parse_count(f, v, 0); }},
      {"--json", [](BenchOptions& o, auto&, auto& v) { o.json = v; }},
      {"--profile-steps",
       [](BenchOptions& o, auto& f, auto& v) { o.profile_steps = parse_count(f, v, 1); }},
      {"--tta", [](BenchOptions& o, auto&, auto& v) { o.tta = v; }},
      {"--device", [](BenchOptions& o, auto&, auto& v) { o.device = parse_device(v); }},
      {"--optimizer", [](BenchOptions& o, auto&, auto& v) { o.optimizer = v; }},
      {"--plan-build", [](BenchOptions& o, auto&, auto& v) { o.plan_build = v; }},
      {"--plan-timeline", [](BenchOptions& o, auto&, auto& v) { o.plan_timeline = v; }},
  };
  return flags;
}

void validate(const BenchOptions& o) {
  for (const std::string& m : o.models) check_known("--models", m, models::zoo_names());
  for (const std::string& p : o.precisions) check_known("--precisions", p, kPrecisions);
  for (const std::string& m : o.modes) check_known("--modes", m, kModes);
  check_known("--layout", o.layout, kLayouts);
  check_known("--optimizer", o.optimizer, kOptimizers);
  if (!o.plan_build.empty()) check_known("--plan-build", o.plan_build, kPlanBuilds);
  LOOM_CHECK(!o.batches.empty(), ValueError, "[bench] --batches needs at least one batch size");
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& value) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  LOOM_CHECK(used == value.size() && !value.empty(), ValueError,
             "[bench] {} needs an integer, got '{}'", flag, value);
  return n;
}

int parse_count(const std::string& flag, const std::string& value, int64_t minimum) {
  const int64_t n = parse_int(flag, value);
  LOOM_CHECK(n >= minimum && n <= 1'000'000'000, ValueError,
             "[bench] {} needs an integer >= {}, got {}", flag, minimum, n);
  return static_cast<int>(n);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

BenchOptions parse_options(const std::vector<std::string>& args) {
  BenchOptions options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help") {
      options.help = true;
    } else if (flag == "--profile") {
      options.profile = true;
    } else if (flag == "--autotune") {
      options.autotune = true;
    } else if (flag == "--distributed") {
      options.distributed = true;
    } else if (flag == "--eval-forward") {
      options.eval_forward = true;
    } else {
      auto setter = value_flags().find(flag);
      LOOM_CHECK(setter != value_flags().end(), ValueError,
                 "[bench] unknown flag '{}' (--help lists the flags)", flag);
      LOOM_CHECK(i + 1 < args.size(), ValueError, "[bench] {} needs a value", flag);
      setter->second(options, flag, args[++i]);
    }
  }
  validate(options);
  return options;
}

}  // namespace loom::bench
