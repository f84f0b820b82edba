// File: core/cudnn/plan_store.h
// The plan cache's files: plans cuDNN can serialize, kept per (cuDNN version,
// GPU), so that a later process restores a plan in milliseconds instead of
// running heuristics and runtime compilation again (0.15 to 1 s for each BN,
// pooling or fused plan on an H100).
//
// Directory: LOOM_CUDNN_PLAN_DIR, else $XDG_CACHE_HOME/loom/cudnn-plans, else
// $HOME/.cache/loom/cudnn-plans; LOOM_CUDNN_PLAN_DIR=off turns it off. Inside,
// one folder per cuDNN version and GPU, one file per plan key holding the key,
// the plan's notes and its JSON. Files are written atomically (temporary file,
// then rename); one that does not parse, or whose key differs, is ignored and
// replaced. Problems writing are never errors: the cache is only a shortcut.
#pragma once

#include <optional>
#include <string>

#include "core/cudnn/plan.h"
#include "core/cudnn/plan_key.h"

namespace loom::cudnn {

struct StoredPlan {
  std::string json;
  PlanNotes notes;
};

class PlanStore {
 public:
  static PlanStore& global();

  bool enabled() const { return !directory_.empty(); }
  // The folder for the current cuDNN version and GPU ("" when off).
  std::string directory() const;

  std::optional<StoredPlan> load(const PlanKey& key) const;
  void save(const PlanKey& key, const Plan& plan) const;

 private:
  PlanStore();
  std::string path_of(const PlanKey& key) const;

  std::string directory_;  // the root, "" when off
};

}  // namespace loom::cudnn
