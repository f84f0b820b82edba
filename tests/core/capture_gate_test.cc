// File: tests/core/capture_gate_test.cc
// The capture gate: shared holders exclude a capture and not each other; a
// capture excludes everyone; a capture waiting for the gate keeps new shared
// holders out until it has been in and out.
#include "core/capture_gate.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

namespace loom {
namespace {

TEST_CASE("shared holders exclude a capture and not each other") {
  CaptureGate gate;
  std::shared_lock first(gate);
  CHECK(gate.try_lock_shared());
  gate.unlock_shared();
  CHECK_FALSE(gate.try_lock());
  first.unlock();
  CHECK(gate.try_lock());
  gate.unlock();
}

TEST_CASE("a capture excludes shared holders and other captures") {
  CaptureGate gate;
  std::unique_lock capture(gate);
  CHECK_FALSE(gate.try_lock_shared());
  CHECK_FALSE(gate.try_lock());
  capture.unlock();
  CHECK(gate.try_lock_shared());
  gate.unlock_shared();
}

TEST_CASE("a shared holder that arrives after a capture started waits for it to end") {
  CaptureGate gate;
  std::unique_lock capture(gate);
  std::atomic<bool> capture_done = false;
  std::atomic<bool> saw_capture_done = false;
  std::thread builder([&] {
    std::shared_lock hold(gate);
    saw_capture_done = capture_done.load();
  });
  capture_done = true;  // the builder cannot be inside yet: the gate is held exclusively
  capture.unlock();
  builder.join();
  CHECK(saw_capture_done);
}

}  // namespace
}  // namespace loom
