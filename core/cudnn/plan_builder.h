// File: core/cudnn/plan_builder.h
// Makes the plan cache's plans (plan_cache.h) under a miss's build mode
// (plan_key.h's PlanRequest). On the calling thread: a restore from the plan
// files, the best plan (eager), the best precompiled plan (precompiled), or
// lazy mode's first working precompiled stand-in. On background builders:
// lazy mode's best plan, the restore of a runtime-compiled plan, and kernel
// reuse's dynamic-shape first stage (kernel_reuse.h); what they
// finish waits here until the cache swaps it in at a step boundary. Owns the
// builder threads, their exit (outstanding builds get 10 s so that their plans
// reach the plan files) and the cuDNN warm-up at each GPU's first allocation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/cudnn/plan.h"
#include "core/cudnn/plan_key.h"
#include "core/cudnn/plan_log.h"
#include "core/cudnn/plan_store.h"

namespace loom::cudnn {

class PlanBuilder {
 public:
  explicit PlanBuilder(PlanLog& log) : log_(log) {}

  // A miss's plan, made on the calling thread.
  struct Made {
    Selection selection;
    bool restored = false;  // from the plan files
    // Lazy: the background build of the best plan that queue() is to start
    // (0: none; the selection, when it has a plan, is final).
    uint64_t ticket = 0;
    RestoreTimes restore_times;
  };
  // Restores `stored` when it restores, else selects under the request's mode;
  // a stale plan file is replaced.
  Made make_now(const PlanRequest& request, const std::optional<StoredPlan>& stored);

  // A background build or restore, waiting for the cache's swap.
  struct Finished {
    PlanKey key;
    uint64_t ticket;
    std::shared_ptr<const Plan> plan;  // null: no engine works
    std::string why_none;
    double build_ms = 0;
    bool restored = false;  // the plan came from the plan files
    // A first stage (kernel_reuse.h): the key stays pending for its static plan,
    // which the same build posts next, to be swapped in at a later boundary.
    bool first_stage = false;
  };
  // A fresh id for a background build.
  uint64_t next_ticket() { return next_ticket_++; }
  // Starts the background job of `ticket`: restores the key's plan file when it
  // has one that restores, else selects the best plan (and saves it).
  void queue(PlanKey key, Graph graph, uint64_t ticket);
  // Takes what the builders finished, oldest first.
  std::vector<Finished> take_finished();
  // Returns results taken too early (a second stage), ahead of newer ones.
  void put_back(std::vector<Finished> later);
  bool any_finished() const { return any_finished_.load(); }
  // Blocks until no background build is queued or running (tests, warm-up).
  void wait_idle();
  size_t outstanding() const;
  // Forgets finished results and the structures without a stand-in; builds
  // still running post results the cache then ignores.
  void clear();

 private:
  // Lazy mode's first plan; false when the key must be built now.
  bool start_lazily(const PlanRequest& request, Made& made);
  // select_plan, with the plan reported to kernel_reuse.h.
  Selection select_static(const PlanKey& key, const Graph& graph, const SelectOptions& options);
  // The background job itself (see queue()).
  void build(const PlanKey& key, const Graph& graph, uint64_t ticket);
  using Clock = std::chrono::steady_clock;
  // Restores the key's plan file on a builder; false when there is none or it
  // is stale. The timeline counts its time from `start`, the job's.
  bool restore_in_background(const PlanKey& key, const Graph& graph, const SelectOptions& options,
                             Clock::time_point start, Finished& done);
  // kernel_reuse.h's first stage for a pending key: posts its dynamic-shape
  // plan, when there is one. Returns whether it did.
  bool build_first_stage(const PlanKey& key, const Graph& graph, uint64_t ticket,
                         const SelectOptions& options);
  void post(Finished done);

  PlanLog& log_;
  std::atomic<uint64_t> next_ticket_ = 1;
  // Lazy mode: graph structures (sizes left out) whose quick look for a
  // precompiled stand-in found none; their other sizes go straight to the tier
  // below while the background build looks properly.
  std::mutex stand_in_mutex_;
  std::unordered_set<std::string> without_stand_in_;
  // Background builders post here; never under the cache's lock, which a synchronous build holds.
  mutable std::mutex finished_mutex_;
  std::vector<Finished> finished_;
  std::atomic<bool> any_finished_ = false;
};

}  // namespace loom::cudnn
