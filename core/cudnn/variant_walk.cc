// File: core/cudnn/variant_walk.cc
// A variant walk's per-thread state: once a variant is pending, later misses defer.
#include "core/cudnn/variant_walk.h"

namespace loom::cudnn {

namespace {

struct WalkState {
  int depth = 0;         // walks open on this thread
  bool deferring = false;  // a variant of the outermost open walk is pending
};

WalkState& walk_state() {
  thread_local WalkState state;
  return state;
}

}  // namespace

VariantWalk::VariantWalk() {
  WalkState& s = walk_state();
  if (s.depth++ == 0) s.deferring = false;
}

VariantWalk::~VariantWalk() {
  WalkState& s = walk_state();
  if (--s.depth == 0) s.deferring = false;
}

void VariantWalk::note_pending() {
  WalkState& s = walk_state();
  if (s.depth > 0) s.deferring = true;
}

bool VariantWalk::defers_misses() { return walk_state().deferring; }

}  // namespace loom::cudnn
