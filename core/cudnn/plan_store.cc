// File: core/cudnn/plan_store.cc
// A plan file: "loom-cudnn-plan 3", a "key" line (policy, device, the graph's
// canonical form), "engine", "numerical", "behavior" and "timed" lines, then
// "json" and the JSON to the end. Older files are ignored and replaced: version
// 1 was keyed by a graph-kind enum, and version 2 did not say whether its plan
// was timed (PlanNotes::timed).
#include "core/cudnn/plan_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/cuda/runtime.h"
#include "core/cudnn/context.h"
#include "core/error.h"
#include "core/input_file.h"

namespace loom::cudnn {

namespace {

constexpr const char* kMagic = "loom-cudnn-plan 3";
// Far above any plan's serialized engine configuration.
constexpr uint64_t kMaxPlanBytes = uint64_t{64} << 20;

std::string root_directory() {
  if (const char* dir = std::getenv("LOOM_CUDNN_PLAN_DIR")) {
    return std::string(dir) == "off" ? "" : dir;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/loom/cudnn-plans";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/loom/cudnn-plans";
  }
  return "";
}

// "cudnn91900-sm90-NVIDIA_H100_80GB_HBM3": a plan only restores where it was made.
std::string device_folder() {
  cudaDeviceProp props{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&props, cuda::current_device()));
  std::string name = props.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return fmt::format("cudnn{}-sm{}{}-{}", loaded_version(), props.major, props.minor, name);
}

std::string key_line(const PlanKey& key) {
  const NumericsPolicy& policy = key.policy();
  return fmt::format("key {} {} {} {} {} {}", static_cast<int>(policy.precision),
                     policy.deterministic ? 1 : 0, policy.autotune ? 1 : 0, key.device(),
                     key.values().size(), fmt::join(key.values(), " "));
}

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

// The value of a "<label> <value>" line, or nullopt when the line is not that.
std::optional<std::string> field(std::istream& in, const std::string& label) {
  std::string line;
  if (!std::getline(in, line) || line.rfind(label, 0) != 0) return std::nullopt;
  return line.size() > label.size() ? line.substr(label.size() + 1) : "";
}

}  // namespace

PlanStore::PlanStore() : directory_(root_directory()) {}

// Never destroyed: builders still running during exit save into it
// (plan_cache.cc waits for them there), and the first allocation starts the
// builders before the store is first used, so a static store could be
// destroyed first.
PlanStore& PlanStore::global() {
  static PlanStore* const store = new PlanStore();
  return *store;
}

std::string PlanStore::directory() const {
  if (!enabled()) return "";
  static const std::string* const folder = new std::string(device_folder());  // as global()'s
  return directory_ + "/" + *folder;
}

std::string PlanStore::path_of(const PlanKey& key) const {
  return fmt::format("{}/plan-{:016x}.plan", directory(), static_cast<uint64_t>(key.hash()));
}

std::optional<StoredPlan> PlanStore::load(const PlanKey& key) const {
  if (!enabled()) return std::nullopt;
  // A regular file only (a FIFO put there would block the plan builder), read
  // whole; a plan that cannot be read is rebuilt, as a missing one is.
  const std::string path = path_of(key);
  std::string text;
  try {
    if (path_type(path, "cudnn plan store") == std::filesystem::file_type::not_found) {
      return std::nullopt;
    }
    const std::vector<uint8_t> bytes = read_regular_file(path, "cudnn plan store", kMaxPlanBytes);
    text.assign(bytes.begin(), bytes.end());
  } catch (const IoError&) {
    return std::nullopt;
  }
  std::istringstream in(text);
  std::string magic;
  if (!in || !std::getline(in, magic) || magic != kMagic) return std::nullopt;
  std::string line;
  if (!std::getline(in, line) || line != key_line(key)) return std::nullopt;
  std::optional<std::string> engine = field(in, "engine"), numerical = field(in, "numerical"),
                             behavior = field(in, "behavior"), timed = field(in, "timed"),
                             json_label = field(in, "json");
  if (!engine || !numerical || !behavior || !timed || !json_label) return std::nullopt;
  if (*timed != "0" && *timed != "1") return std::nullopt;
  StoredPlan stored;
  try {
    stored.notes.engine_id = std::stoll(*engine);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  stored.notes.numerical = split_names(*numerical);
  stored.notes.behavior = split_names(*behavior);
  stored.notes.timed = *timed == "1";
  std::stringstream json;
  json << in.rdbuf();
  stored.json = json.str();
  if (stored.json.empty()) return std::nullopt;
  return stored;
}

void PlanStore::save(const PlanKey& key, const Plan& plan) const {
  if (!enabled()) return;
  std::error_code error;
  std::filesystem::create_directories(directory(), error);
  if (error) return;
  std::string json;
  try {
    json = plan.json();
  } catch (const Error&) {
    return;  // an engine cuDNN cannot serialize: it is rebuilt next time
  }
  const std::string path = path_of(key);
  const std::string temporary = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kMagic << "\n" << key_line(key) << "\n";
    out << "engine " << plan.notes().engine_id << "\n";
    out << "numerical " << fmt::format("{}", fmt::join(plan.notes().numerical, ",")) << "\n";
    out << "behavior " << fmt::format("{}", fmt::join(plan.notes().behavior, ",")) << "\n";
    out << "timed " << (plan.notes().timed ? 1 : 0) << "\n";
    out << "json\n" << json;
    if (!out) {
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (error) std::filesystem::remove(temporary, error);
}

}  // namespace loom::cudnn
