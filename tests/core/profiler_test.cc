// File: tests/core/profiler_test.cc
// The profiler on its own: scopes, rows, autograd attribution of backward
// time to the forward scope a node was recorded in, and the report table.
// (A whole model profiled through nn::Module: tests/bench/profile_test.cc.)
#include "core/profiler.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tests/testing.h"

namespace loom {
namespace {

const Device kCpu = Device::cpu();  // where ProfileScope's work runs

Tensor leaf() {
  Generator gen(3);
  Tensor x = randn({128, 128}, {.dtype = DType::Float64}, &gen);
  x.requires_grad_(true);
  return x;
}

const ProfileEntry* find_row(const std::vector<ProfileEntry>& rows, const std::string& name) {
  for (const ProfileEntry& e : rows) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

// Stops profiling when a test ends, so one failing CHECK cannot leave it on.
struct Profiling {
  Profiling() { Profiler::start(); }
  ~Profiling() { Profiler::stop(); }
};

TEST_CASE("disabled: scopes record nothing and autograd nodes carry no row") {
  Profiler::start();
  Profiler::stop();
  CHECK_FALSE(Profiler::enabled());
  const Tensor x = leaf();
  Tensor y;
  {
    ProfileScope scope("layer", ProfilePhase::Forward, kCpu);
    y = mul(x, x);
    CHECK_FALSE(Profiler::current_row().has_value());
  }
  sum(y).backward();
  CHECK_FALSE(y.grad_fn()->profile_row.has_value());
  CHECK(Profiler::entries().empty());
}

TEST_CASE("a forward scope's nodes are timed backward in its row; others go to (other)") {
  Profiling profiling;
  const Tensor x = leaf();
  Tensor y;
  {
    ProfileScope scope("layer", ProfilePhase::Forward, kCpu);
    y = exp(mul(x, x));
  }
  const Tensor loss = sum(y);  // outside any scope
  REQUIRE(y.grad_fn()->profile_row.has_value());
  CHECK(*y.grad_fn()->profile_row == Profiler::row("layer"));
  CHECK_FALSE(loss.grad_fn()->profile_row.has_value());
  loss.backward();

  const std::vector<ProfileEntry> rows = Profiler::entries();
  const ProfileEntry* layer = find_row(rows, "layer");
  const ProfileEntry* other = find_row(rows, "(other)");
  REQUIRE(layer != nullptr);
  REQUIRE(other != nullptr);
  CHECK(layer->forward_calls == 1);
  CHECK(layer->backward_calls == 2);  // mul and exp
  CHECK(layer->forward_ms > 0);
  CHECK(layer->backward_ms > 0);
  CHECK(other->forward_calls == 0);
  CHECK(other->backward_calls == 2);  // sum and x's gradient accumulation
  CHECK(layer->share + other->share == doctest::Approx(1.0));
  CHECK(layer->share ==
        doctest::Approx(layer->total_ms() / (layer->total_ms() + other->total_ms())));
}

TEST_CASE("nested forward scopes restore the outer row when the inner one closes") {
  Profiling profiling;
  const Tensor x = leaf();
  Tensor inner_y, outer_y;
  {
    ProfileScope outer("outer", ProfilePhase::Forward, kCpu);
    {
      ProfileScope inner("inner", ProfilePhase::Forward, kCpu);
      inner_y = mul(x, 2.0);
    }
    outer_y = mul(inner_y, 3.0);
  }
  CHECK(*inner_y.grad_fn()->profile_row == Profiler::row("inner"));
  CHECK(*outer_y.grad_fn()->profile_row == Profiler::row("outer"));
  CHECK_FALSE(Profiler::current_row().has_value());
}

TEST_CASE("report: per-step times, shares and a total; start() forgets earlier rows") {
  Profiling profiling;
  {
    ProfileScope scope("(optimizer)", ProfilePhase::Other, kCpu);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    ProfileScope scope("fc", ProfilePhase::Forward, kCpu);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::vector<ProfileEntry> rows = Profiler::entries();
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].name == "(optimizer)");  // rows keep their first-use order
  CHECK(rows[0].other_calls == 1);
  CHECK(rows[0].other_ms >= 20);
  CHECK(rows[0].forward_ms == 0);
  CHECK(rows[1].forward_ms >= 5);

  const std::string report = Profiler::report(2);
  CHECK_MESSAGE(report.find(fmt::format("{:.3f}", rows[0].other_ms * 0.5)) != std::string::npos,
                report);  // divided by the 2 steps
  CHECK(report.find("fc") != std::string::npos);
  CHECK(report.find("total") != std::string::npos);
  CHECK(report.find(fmt::format("{:.1f}%", 100 * rows[1].share)) != std::string::npos);

  Profiler::start();
  CHECK(Profiler::entries().empty());
}

}  // namespace
}  // namespace loom
