// File: tests/bench/profile_test.cc
// Profile mode through nn::Module on the CPU: a row per leaf layer with its
// forward and backward time, the loss and optimizer rows, shares summing to 1;
// the rows of layers inside a module whose forward takes two tensors.
// N batch, C channels, H, W.
#include <doctest/doctest.h>

#include <vector>

#include "core/generator.h"
#include "core/ops/loss.h"
#include "core/profiler.h"
#include "layers/nn.h"
#include "optim/sgd.h"
#include "tests/testing.h"

namespace loom {
namespace {

// (N, 1, 8, 8) -> (N, 10), with a nested Residual so rows get dotted paths.
nn::Sequential tiny_model() {
  return nn::Sequential(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4),
                        nn::Residual(nn::Conv2d(4, 4, 3, {.padding = 1}), nn::ReLU()),
                        nn::Flatten(), nn::Linear(4 * 8 * 8, 10));
}

const ProfileEntry* find_row(const std::vector<ProfileEntry>& rows, const std::string& name) {
  for (const ProfileEntry& e : rows) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

struct Batch {
  Tensor x, y;  // x (N, 1, 8, 8), y (N)
};

Batch batch(uint64_t seed) {
  Generator gen(seed);
  return {randn({16, 1, 8, 8}, {}, &gen), randint(0, 10, {16}, {.dtype = DType::Int64}, &gen)};
}

TEST_CASE("two profiled CPU training steps: a row per leaf layer, loss and optimizer") {
  manual_seed(0);
  nn::Sequential net = tiny_model();
  optim::SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  Profiler::start();
  for (int step = 0; step < 2; ++step) {
    const Batch b = batch(step);
    opt.zero_grad();
    Tensor logits = net(b.x);
    Tensor loss;
    {
      ProfileScope scope("(loss)", ProfilePhase::Forward, Device::cpu());
      loss = cross_entropy(logits, b.y);
    }
    loss.backward();
    ProfileScope scope("(optimizer)", ProfilePhase::Other, Device::cpu());
    opt.step();
  }
  Profiler::stop();

  const std::vector<ProfileEntry> rows = Profiler::entries();
  double shares = 0;
  for (const ProfileEntry& e : rows) shares += e.share;
  CHECK(shares == doctest::Approx(1.0).epsilon(1e-9));
  for (const char* name :
       {"0 Conv2d", "1 BatchNorm2d", "2.a Conv2d", "2.b ReLU", "3 Flatten", "4 Linear"}) {
    const ProfileEntry* row = find_row(rows, name);
    REQUIRE_MESSAGE(row != nullptr, "no row ", name, " in\n", Profiler::report(2));
    CHECK(row->forward_calls == 2);
    CHECK(row->forward_ms > 0);
    CHECK(row->share > 0);
  }
  for (const char* name : {"0 Conv2d", "1 BatchNorm2d", "2.a Conv2d", "2.b ReLU", "4 Linear"}) {
    CHECK_MESSAGE(find_row(rows, name)->backward_ms > 0, name);
  }
  CHECK(find_row(rows, "2 Residual") == nullptr);  // containers are not timed (no double count)
  CHECK(find_row(rows, "(loss)")->backward_calls >= 2);
  CHECK(find_row(rows, "(optimizer)")->other_calls == 2);
  const std::string report = Profiler::report(2);
  CHECK(report.find("2.a Conv2d") != std::string::npos);
  CHECK(report.find("per-layer time per step over 2 profiled step(s)") != std::string::npos);
}

// A decoder step whose forward takes two tensors (as a U-Net's): called as
// up_->forward(x, skip), so it never runs through operator().
class Up : public nn::Module {
 public:
  Up() {
    conv_ = register_module("conv", nn::Conv2d(8, 4, 3, {.padding = 1}));
    block_ = register_module("block", nn::Sequential(nn::Conv2d(4, 4, 1), nn::ReLU()));
  }
  Tensor forward(const Tensor& x, const Tensor& skip) {
    return (*block_)((*conv_)(cat({x, skip}, 1)));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv_;
  std::shared_ptr<nn::Sequential> block_;
};

class TwoInputNet : public nn::Module {
 public:
  TwoInputNet() {
    stem_ = register_module("stem", nn::Conv2d(1, 4, 3, {.padding = 1}));
    up_ = register_module("up", std::make_shared<Up>());
    head_ = register_module("head", nn::Conv2d(4, 1, 1));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor s = (*stem_)(x);
    return (*head_)(up_->forward(s, s));
  }

 private:
  std::shared_ptr<nn::Conv2d> stem_, head_;
  std::shared_ptr<Up> up_;
};

TEST_CASE("layers inside a module whose forward takes two tensors keep their names") {
  manual_seed(0);
  TwoInputNet net;
  Profiler::start();
  mean(net(batch(0).x)).backward();
  Profiler::stop();
  const std::vector<ProfileEntry> rows = Profiler::entries();
  for (const char* name : {"stem Conv2d", "up.conv Conv2d", "up.block.0 Conv2d",
                           "up.block.1 ReLU", "head Conv2d"}) {
    const ProfileEntry* row = find_row(rows, name);
    REQUIRE_MESSAGE(row != nullptr, "no row ", name, " in\n", Profiler::report(1));
    CHECK(row->forward_calls == 1);
    CHECK_MESSAGE(row->backward_ms > 0, name);
  }
  CHECK(find_row(rows, "Conv2d") == nullptr);
  CHECK(find_row(rows, "0 Conv2d") == nullptr);
}

TEST_CASE("after nn::fuse, a residual's fused head keeps its row, forward and backward") {
  // The residual's add joins its last branch's fused run (nn::FusedResidual),
  // whose head is called with two tensors; its time is the head's row's, not "(other)"'s.
  manual_seed(0);
  nn::Sequential net(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU(),
                     nn::Residual(nn::Sequential(nn::Conv2d(4, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU()),
                                  nn::Sequential(nn::Conv2d(4, 4, 3, {.padding = 1}), nn::BatchNorm2d(4))),
                     nn::Flatten(), nn::Linear(4 * 8 * 8, 10));
  nn::fuse(net);
  REQUIRE(net.named_children()[3].second->type_name() == "FusedResidual");
  const Batch b = batch(0);
  Profiler::start();
  cross_entropy(net(b.x), b.y).backward();
  Profiler::stop();
  const std::vector<ProfileEntry> rows = Profiler::entries();
  for (const char* name : {"0 FusedConv2d", "3.a.0 FusedConv2d", "3.b.0 FusedConv2d", "5 Linear"}) {
    const ProfileEntry* row = find_row(rows, name);
    REQUIRE_MESSAGE(row != nullptr, "no row ", name, " in\n", Profiler::report(1));
    CHECK(row->forward_calls == 1);
    CHECK_MESSAGE(row->backward_calls > 0, name);
  }
}

TEST_CASE("profiling does not change what the model computes") {
  manual_seed(0);
  nn::Sequential net = tiny_model();
  const Batch b = batch(7);
  const Tensor plain = net(b.x);
  Profiler::start();
  const Tensor profiled = net(b.x);
  Profiler::stop();
  CHECK_CLOSE(profiled, plain, 0, 0);
  CHECK(Profiler::entries().size() == 6);  // the six leaves, forward only
}

}  // namespace
}  // namespace loom
