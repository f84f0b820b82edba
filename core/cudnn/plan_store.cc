// File: core/cudnn/plan_store.cc
// A plan file: "loom-cudnn-plan 3", a "key" line (policy, device, the graph's
// canonical form), "engine", "numerical", "behavior" and "kernel" lines (the
// kernel's source: static, compiled or reused; plan.h), then "json" and the
// JSON to the end. Version 2 files, which have no "kernel" line, still load
// (their kernels were compiled for their dims alone) and are rewritten as
// version 3 when their key is built again; version 1 files (keyed by a
// graph-kind enum) are ignored.
//
// A kernel-cache file: "loom-cudnn-kernels 1", a "key" line (policy, device,
// the structure form), "chosen" (the chosen kernels' names, ';' between them),
// "bytes N", then the N bytes cuDNN serialized.
#include "core/cudnn/plan_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/cuda/runtime.h"
#include "core/cudnn/context.h"
#include "core/error.h"

namespace loom::cudnn {

namespace {

constexpr const char* kMagic = "loom-cudnn-plan 3";
constexpr const char* kMagicWithoutKernel = "loom-cudnn-plan 2";
constexpr const char* kKernelsMagic = "loom-cudnn-kernels 1";

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
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp props{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  std::string name = props.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return fmt::format("cudnn{}-sm{}{}-{}", loaded_version(), props.major, props.minor, name);
}

std::string key_line(const NumericsPolicy& policy, int device, const std::vector<int64_t>& values) {
  return fmt::format("key {} {} {} {} {} {}", static_cast<int>(policy.precision),
                     policy.deterministic ? 1 : 0, policy.autotune ? 1 : 0, device, values.size(),
                     fmt::join(values, " "));
}

std::string key_line(const PlanKey& key) { return key_line(key.policy(), key.device(), key.values()); }
std::string key_line(const StructureKey& key) { return key_line(key.policy(), key.device(), key.values()); }

std::vector<std::string> split_names(const std::string& list, char separator = ',') {
  std::vector<std::string> names;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, separator);) {
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

std::string PlanStore::path_of(const StructureKey& key) const {
  return fmt::format("{}/kernels-{:016x}.kernels", directory(), static_cast<uint64_t>(key.hash()));
}

std::optional<StoredPlan> PlanStore::load(const PlanKey& key) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path_of(key));
  std::string magic;
  if (!in || !std::getline(in, magic) || (magic != kMagic && magic != kMagicWithoutKernel)) {
    return std::nullopt;
  }
  std::string line;
  if (!std::getline(in, line) || line != key_line(key)) return std::nullopt;
  std::optional<std::string> engine = field(in, "engine"), numerical = field(in, "numerical"),
                             behavior = field(in, "behavior");
  // Version 2 files kept only kernels compiled for their dims alone.
  const std::optional<std::string> source =
      magic == kMagic ? field(in, "kernel") : std::string(kernel_source_name(KernelSource::Static));
  const std::optional<KernelSource> kernel = source ? parse_kernel_source(*source) : std::nullopt;
  std::optional<std::string> json_label = field(in, "json");
  if (!engine || !numerical || !behavior || !kernel || !json_label) return std::nullopt;
  StoredPlan stored;
  stored.notes.kernel = *kernel;
  try {
    stored.notes.engine_id = std::stoll(*engine);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  stored.notes.numerical = split_names(*numerical);
  stored.notes.behavior = split_names(*behavior);
  std::stringstream json;
  json << in.rdbuf();
  stored.json = json.str();
  if (stored.json.empty()) return std::nullopt;
  return stored;
}

void PlanStore::write_atomically(const std::string& path, const std::string& text) const {
  std::error_code error;
  std::filesystem::create_directories(directory(), error);
  if (error) return;
  // Builders on several threads may write one kernel-cache file at once.
  const std::string temporary =
      fmt::format("{}.{}.{:x}.tmp", path, getpid(), std::hash<std::thread::id>{}(std::this_thread::get_id()));
  {
    std::ofstream out(temporary, std::ios::trunc | std::ios::binary);
    out << text;
    if (!out) {
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (error) std::filesystem::remove(temporary, error);
}

void PlanStore::save(const PlanKey& key, const Plan& plan) const {
  if (!enabled()) return;
  std::string json;
  try {
    json = plan.json();
  } catch (const Error&) {
    return;  // an engine cuDNN cannot serialize: it is rebuilt next time
  }
  const PlanNotes& notes = plan.notes();
  write_atomically(path_of(key),
                   fmt::format("{}\n{}\nengine {}\nnumerical {}\nbehavior {}\nkernel {}\njson\n{}", kMagic,
                               key_line(key), notes.engine_id, fmt::join(notes.numerical, ","),
                               fmt::join(notes.behavior, ","), kernel_source_name(notes.kernel), json));
}

std::optional<StoredKernels> PlanStore::load_kernels(const StructureKey& key) const {
  if (!enabled()) return std::nullopt;
  std::ifstream in(path_of(key), std::ios::binary);
  std::string magic, line;
  if (!in || !std::getline(in, magic) || magic != kKernelsMagic) return std::nullopt;
  if (!std::getline(in, line) || line != key_line(key)) return std::nullopt;
  std::optional<std::string> chosen = field(in, "chosen"), bytes = field(in, "bytes");
  if (!chosen || !bytes) return std::nullopt;
  size_t size = 0;
  try {
    size = static_cast<size_t>(std::stoull(*bytes));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  StoredKernels stored{std::string(size, '\0'), split_names(*chosen, ';')};
  if (size == 0 || !in.read(stored.contents.data(), static_cast<std::streamsize>(size))) return std::nullopt;
  return stored;
}

void PlanStore::save_kernels(const StructureKey& key, const StoredKernels& kernels) const {
  if (!enabled() || kernels.contents.empty()) return;
  write_atomically(path_of(key), fmt::format("{}\n{}\nchosen {}\nbytes {}\n", kKernelsMagic, key_line(key),
                                             fmt::join(kernels.chosen, ";"), kernels.contents.size()) +
                                     kernels.contents);
}

}  // namespace loom::cudnn
