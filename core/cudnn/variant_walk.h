// File: core/cudnn/variant_walk.h
// One op's variants, tried best first (batch norm + ReLU's backward: the norm
// recomputed by an inference norm op, by pointwise ops, dReLU from the saved
// output, the plain norm graph, then Loom's CUDA kernels).
// In lazy mode a variant whose best plan is still being built in the
// background, and which has no stand-in to run meanwhile, returns "no plan",
// and the op goes on to the next variant. Looking those up would queue their
// builds too, although the step never runs them once the preferred graph is
// swapped in (8 of mnist_net's 18 background builds were such variants). So,
// within one walk, once a variant is pending the plan cache builds nothing
// more: a variant it has no entry for is deferred (the op runs a tier below it
// this time) and met again, as a normal miss, when the walk no longer stops
// above it, i.e. once the preferred graph turned out unsupported. Variants
// that already have a plan still run. No CUDA here, so the rule is unit-tested.
//
//   VariantWalk walk;  // at the op's entry, around every variant it tries
//   if (run_plan(preferred, ...)) return;
//   if (run_plan(lower, ...)) return;  // deferred while `preferred` is pending
//   run_the_cuda_kernels();
#pragma once

namespace loom::cudnn {

class VariantWalk {
 public:
  // Walks nest: an op that calls another op inside its walk (a fused op's
  // unfused path) shares the outer walk, whose variants rank above the inner's.
  VariantWalk();
  ~VariantWalk();
  VariantWalk(const VariantWalk&) = delete;
  VariantWalk& operator=(const VariantWalk&) = delete;

  // The plan cache on this thread: the key just looked up is pending and has
  // nothing to run. Ignored outside a walk.
  static void note_pending();
  // Whether a key without a cache entry must be deferred rather than built: a
  // variant above it in this thread's walk is pending.
  static bool defers_misses();
};

}  // namespace loom::cudnn
