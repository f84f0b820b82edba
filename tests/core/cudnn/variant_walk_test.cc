// File: tests/core/cudnn/variant_walk_test.cc
// The lazy-mode variant rule without a GPU: within one op's walk, once a
// variant is pending, keys without a cache entry are deferred; nothing is
// deferred outside a walk, in the next walk, or on another thread.
#include "core/cudnn/variant_walk.h"

#include <doctest/doctest.h>

#include <thread>

namespace loom::cudnn {
namespace {

TEST_CASE("a walk defers misses only after one of its variants is pending") {
  VariantWalk walk;
  CHECK_FALSE(VariantWalk::defers_misses());  // the preferred variant is looked up normally
  VariantWalk::note_pending();
  CHECK(VariantWalk::defers_misses());  // the lower variants are not built meanwhile
}

TEST_CASE("the next walk starts without deferring") {
  {
    VariantWalk walk;
    VariantWalk::note_pending();
    REQUIRE(VariantWalk::defers_misses());
  }
  CHECK_FALSE(VariantWalk::defers_misses());
  VariantWalk next;
  CHECK_FALSE(VariantWalk::defers_misses());
}

TEST_CASE("a pending key outside any walk defers nothing") {
  VariantWalk::note_pending();
  CHECK_FALSE(VariantWalk::defers_misses());
  VariantWalk walk;
  CHECK_FALSE(VariantWalk::defers_misses());
}

TEST_CASE("an inner walk shares the outer one: a pending outer variant defers the inner op") {
  VariantWalk outer;
  VariantWalk::note_pending();
  {
    VariantWalk inner;  // the fused op's unfused path calls the plain op
    CHECK(VariantWalk::defers_misses());
  }
  CHECK(VariantWalk::defers_misses());  // closing the inner walk ends nothing
}

TEST_CASE("a pending variant inside an inner walk defers the rest of the outer walk") {
  VariantWalk outer;
  {
    VariantWalk inner;
    VariantWalk::note_pending();
  }
  CHECK(VariantWalk::defers_misses());
}

TEST_CASE("each thread walks on its own") {
  VariantWalk walk;
  VariantWalk::note_pending();
  bool other_defers = true;
  std::thread other([&other_defers] {
    VariantWalk own;
    other_defers = VariantWalk::defers_misses();
  });
  other.join();
  CHECK_FALSE(other_defers);
  CHECK(VariantWalk::defers_misses());
}

}  // namespace
}  // namespace loom::cudnn
