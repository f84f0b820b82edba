// File: tests/core/view_test.cc
// Views: sizes, strides and offsets of every view op, storage sharing, writes
// through views, argument errors, and gradients through each view (gradcheck).
// N batch, C channels, H, W.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/gradcheck.h"
#include "core/ops/elementwise.h"
#include "core/tensor.h"
#include "tests/testing.h"

namespace loom {
namespace {

const TensorOptions kF64 = {.dtype = DType::Float64};

Tensor iota(const Shape& sizes) {
  return arange(0.0, static_cast<double>(numel_of(sizes)), 1.0, kF64).view(sizes);
}

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

// gradcheck of a view op applied to one random float64 input of `sizes`.
void check_view_grad(const Shape& sizes, const std::function<Tensor(const Tensor&)>& op,
                     uint64_t seed) {
  Generator gen(seed);
  const Tensor x = randn(sizes, {.dtype = DType::Float64, .requires_grad = true}, &gen);
  GradcheckResult r = gradcheck([&](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK(r.kinks == 0);
}

// Runs `fn` in a child process, so a crash fails one check instead of ending
// the whole test binary. fn returns false for a wrong result.
std::string outcome_in_child(const std::function<bool()>& fn) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);  // not doctest's
    int code = 1;
    try {
      code = fn() ? 0 : 1;
    } catch (const IndexError&) {
      code = 2;
    } catch (const Error&) {
      code = 3;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  const char* outcomes[] = {"returned", "returned a wrong result", "IndexError", "another loom::Error"};
  int code = WEXITSTATUS(status);
  return code < 4 ? outcomes[code] : "exit " + std::to_string(code);
}

// --- view / reshape ------------------------------------------------------------------

TEST_CASE("view: new sizes over the same storage, with -1 inferred") {
  const Tensor x = iota({2, 3, 4});
  const Tensor v = x.view({6, 4});
  CHECK(v.sizes() == Shape{6, 4});
  CHECK(v.strides() == Shape{4, 1});
  CHECK(shares_storage(v, x));
  CHECK(x.view({-1, 4}).sizes() == Shape{6, 4});
  CHECK(x.view({4, -1, 2}).sizes() == Shape{4, 3, 2});
  CHECK(x.view({-1}).sizes() == Shape{24});
  CHECK(full({}, 1.0).view({1, 1}).sizes() == Shape{1, 1});
  CHECK(iota({1}).view({}).dim() == 0);
  CHECK(v.to_vector<double>() == x.to_vector<double>());
}

TEST_CASE("view of a row slice merges contiguous rows; of a column slice it cannot") {
  const Tensor x = iota({4, 6});
  const Tensor rows = x.slice(0, 1, 3);  // (2, 6) strides (6, 1), offset 6
  const Tensor flat = rows.view({12});
  CHECK(flat.storage_offset() == 6);
  CHECK(flat.at({0}) == 6);
  CHECK(flat.at({11}) == 17);
  CHECK(x.t().view({2, 3, 4}).strides() == Shape{3, 1, 6});  // splitting a dim is fine
  CHECK_THROWS_WITH_FRAGMENT(x.slice(1, 0, 3).view({12}), ShapeError, "without copying");
}

TEST_CASE("view errors: transposed tensor, wrong numel, two -1") {
  const Tensor x = iota({3, 4});
  CHECK_THROWS_WITH_FRAGMENT(x.t().view({12}), ShapeError,
                             "[view] cannot view a tensor of shape (4, 3) and strides (1, 4) as (12,) without copying");
  CHECK_THROWS_WITH_FRAGMENT(x.view({5, 5}), ShapeError, "[view] shape (5, 5) is invalid for input of shape (3, 4) (12 elements)");
  CHECK_THROWS_WITH_FRAGMENT(x.view({-1, 5}), ShapeError, "[view] shape (-1, 5) is invalid");
  CHECK_THROWS_WITH_FRAGMENT(x.view({-1, -1}), ValueError, "[view] only one size may be -1");
  CHECK_THROWS_WITH_FRAGMENT(x.view({-2, 6}), ValueError, "[view] invalid size -2");
}

TEST_CASE("view of strided sources: whenever it succeeds it keeps row-major order") {
  // Property check of the stride computation: every successful view reads the
  // source's elements in the same row-major order, over the same storage.
  const std::vector<Tensor> sources = {
      iota({2, 3, 4}),
      iota({2, 3, 4}).permute({1, 0, 2}),
      iota({2, 3, 4}).transpose(1, 2),
      iota({2, 3, 4}).permute({2, 1, 0}),
      iota({2, 3, 8}).slice(2, 0, 8, 2),
      iota({4, 3, 4}).slice(0, 1, 3),
      iota({2, 3, 1, 4}).permute({2, 0, 1, 3}).squeeze(0),
      iota({1, 3, 4}).expand({2, 3, 4}),
      iota({2, 4, 3}).contiguous(MemoryFormat::Contiguous).view({2, 4, 3, 1}).permute({0, 2, 3, 1}).squeeze(2),
  };
  const std::vector<Shape> targets = {{24},      {2, 12},   {12, 2},      {6, 4},   {4, 6},
                                      {2, 3, 4}, {4, 3, 2}, {3, 8},       {2, 2, 6}, {1, 24, 1},
                                      {2, 2, 2, 3}, {2, 3, 2, 2}, {6, 2, 2}};
  int successes = 0, failures = 0;
  for (size_t s = 0; s < sources.size(); ++s) {
    const std::vector<double> expected = sources[s].to_vector<double>();
    for (const Shape& target : targets) {
      CAPTURE(s);
      CAPTURE(shape_str(target));
      Tensor v;
      try {
        v = sources[s].view(target);
      } catch (const ShapeError&) {
        ++failures;
        CHECK_FALSE(shares_storage(sources[s].reshape(target), sources[s]));
        CHECK(sources[s].reshape(target).to_vector<double>() == expected);
        continue;
      }
      ++successes;
      CHECK(v.sizes() == target);
      CHECK(shares_storage(v, sources[s]));
      CHECK(v.to_vector<double>() == expected);
    }
  }
  CHECK(successes > 30);
  CHECK(failures > 30);
}

TEST_CASE("reshape: a view where strides allow it, else a copy") {
  const Tensor x = iota({3, 4});
  const Tensor same = x.reshape({2, 6});
  CHECK(shares_storage(same, x));
  const Tensor t = x.t();
  const Tensor copied = t.reshape({12});
  CHECK_FALSE(shares_storage(copied, x));
  CHECK(copied.to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(shares_storage(t.reshape({4, 3, 1}), x));  // adding a size-1 dim needs no copy
  CHECK(x.reshape({-1}).sizes() == Shape{12});
  CHECK_THROWS_WITH_FRAGMENT(x.reshape({7}), ShapeError, "[reshape] shape (7,) is invalid for input of shape (3, 4)");
}

// --- permute / transpose / t ---------------------------------------------------------

TEST_CASE("permute / transpose / t reorder sizes and strides") {
  const Tensor x = iota({2, 3, 4});
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.at({3, 1, 2}) == x.at({1, 2, 3}));
  CHECK(shares_storage(p, x));
  CHECK(x.permute({-1, 0, 1}).sizes() == Shape{4, 2, 3});
  const Tensor tr = x.transpose(0, -1);
  CHECK(tr.sizes() == Shape{4, 3, 2});
  CHECK(tr.at({3, 2, 1}) == x.at({1, 2, 3}));
  const Tensor m = iota({2, 5});
  CHECK(m.t().sizes() == Shape{5, 2});
  CHECK(m.t().strides() == Shape{1, 5});
  const Tensor v = iota({3});
  CHECK(v.t().is_same(v));  // t() of a 1-D tensor is the tensor itself
}

TEST_CASE("permute / t reject bad dims") {
  const Tensor x = iota({2, 3, 4});
  CHECK_THROWS_WITH_FRAGMENT(x.permute({0, 0, 1}), ValueError, "[permute] dim 0 repeats in (0, 0, 1)");
  CHECK_THROWS_WITH_FRAGMENT(x.permute({1, 0}), ValueError, "[permute] got 2 dims (1, 0) for a tensor of shape (2, 3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(x.permute({0, 1, 3}), IndexError, "[permute] dim 3 is out of range");
  CHECK_THROWS_WITH_FRAGMENT(x.t(), ShapeError, "[t] expects a tensor with at most 2 dims, got shape (2, 3, 4)");
  CHECK_THROWS_WITH_FRAGMENT(x.transpose(0, 5), IndexError, "[transpose] dim 5");
}

// --- slice / narrow / select ---------------------------------------------------------

TEST_CASE("slice: negative bounds, steps, clipping and empty results") {
  const Tensor x = iota({10});
  CHECK(x.slice(0, 2, 5).to_vector<double>() == std::vector<double>{2, 3, 4});
  CHECK(x.slice(0, -3, 10).to_vector<double>() == std::vector<double>{7, 8, 9});
  CHECK(x.slice(0, 1, -1, 3).to_vector<double>() == std::vector<double>{1, 4, 7});
  CHECK(x.slice(0, 0, 10, 4).to_vector<double>() == std::vector<double>{0, 4, 8});
  CHECK(x.slice(0, -100, 100).numel() == 10);  // bounds clip to the dim
  CHECK(x.slice(0, 6, 3).numel() == 0);
  const Tensor stepped = x.slice(0, 1, 8, 2);
  CHECK(stepped.strides() == Shape{2});
  CHECK(stepped.storage_offset() == 1);
  CHECK(shares_storage(stepped, x));
  const Tensor m = iota({3, 4});
  const Tensor cols = m.slice(-1, 1, 4, 2);  // columns 1 and 3
  CHECK(cols.sizes() == Shape{3, 2});
  CHECK(cols.to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11});
  CHECK_THROWS_WITH_FRAGMENT(x.slice(0, 0, 5, 0), ValueError, "[slice] step must be positive, got 0");
  CHECK_THROWS_WITH_FRAGMENT(x.slice(0, 0, 5, -1), ValueError, "got -1");
  CHECK_THROWS_WITH_FRAGMENT(x.slice(1, 0, 1), IndexError, "[slice] dim 1 is out of range for a 1-D tensor");
}

TEST_CASE("narrow and select, with negative start / index") {
  const Tensor m = iota({3, 4});
  CHECK(m.narrow(1, 1, 2).to_vector<double>() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(m.narrow(0, -1, 1).to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  CHECK(m.narrow(0, 1, 0).numel() == 0);
  CHECK_THROWS_WITH_FRAGMENT(m.narrow(0, 2, 2), IndexError, "[narrow] start 2 and length 2 do not fit in dim 0 of size 3 (shape (3, 4))");
  const Tensor row = m.select(0, -1);
  CHECK(row.sizes() == Shape{4});
  CHECK(row.storage_offset() == 8);
  CHECK(row.to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  const Tensor col = m.select(1, 2);
  CHECK(col.strides() == Shape{4});
  CHECK(col.to_vector<double>() == std::vector<double>{2, 6, 10});
  CHECK(iota({3}).select(0, 1).dim() == 0);
  CHECK_THROWS_WITH_FRAGMENT(m.select(0, 3), IndexError, "[select] index 3 is out of range for dim 0 of size 3 (shape (3, 4))");
  CHECK_THROWS_WITH_FRAGMENT(m.select(1, -5), IndexError, "index -5");
}

TEST_CASE("dim-taking calls on a 0-d tensor throw IndexError instead of reading past the sizes") {
  // normalize_dim accepts dim 0 / -1 for a 0-d tensor (as reductions need), so
  // callers that then read sizes()[d] must reject 0-d themselves.
  const Tensor s = full({}, 3.0, kF64);
  CHECK(outcome_in_child([&] { return s.size(0) == 1; }) == "IndexError");
  CHECK(outcome_in_child([&] { return s.stride(-1) == 1; }) == "IndexError");
  CHECK(outcome_in_child([&] { return s.select(0, 0).dim() == 0; }) == "IndexError");
  CHECK(outcome_in_child([&] { return s.slice(0, 0, 1).dim() == 0; }) == "IndexError");
  CHECK(outcome_in_child([&] { return s.narrow(0, 0, 1).dim() == 0; }) == "IndexError");
}

TEST_CASE("squeeze(0) and transpose(0, -1) of a 0-d tensor return it unchanged, as in PyTorch") {
  const Tensor s = full({}, 3.0, kF64);
  CHECK(outcome_in_child([&] { return s.squeeze(0).dim() == 0 && s.squeeze(0).item() == 3; }) == "returned");
  CHECK(outcome_in_child([&] { return s.transpose(0, -1).dim() == 0; }) == "returned");
}

// --- expand / squeeze / unsqueeze / flatten -------------------------------------------

TEST_CASE("expand: stride 0 on expanded and new leading dims, -1 keeps a size") {
  const Tensor x = iota({3, 1});
  const Tensor e = x.expand({2, 3, 4});
  CHECK(e.sizes() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(shares_storage(e, x));
  CHECK(e.at({1, 2, 3}) == 2);
  CHECK(x.expand({-1, 5}).sizes() == Shape{3, 5});
  CHECK(x.expand({3, 1}).is_same(x));
  CHECK(full({}, 7.0).expand({2, 2}).to_vector<double>() == std::vector<double>(4, 7.0));
  CHECK_THROWS_WITH_FRAGMENT(x.expand({4, 4}), ShapeError,
                             "[expand] shape (3, 1) cannot be expanded to (4, 4): dim 0 has size 3");
  CHECK_THROWS_WITH_FRAGMENT(x.expand({3}), ShapeError, "[expand] cannot expand shape (3, 1) to (3,) with fewer dims");
  CHECK_THROWS_WITH_FRAGMENT(x.expand({-1, 3, 1}), ShapeError, "[expand] invalid size -1");
}

TEST_CASE("squeeze / unsqueeze / flatten") {
  const Tensor x = iota({1, 3, 1, 2});
  CHECK(x.squeeze().sizes() == Shape{3, 2});
  CHECK(x.squeeze(0).sizes() == Shape{3, 1, 2});
  CHECK(x.squeeze(-2).sizes() == Shape{1, 3, 2});
  CHECK(x.squeeze(1).is_same(x));  // size 3: nothing to squeeze
  CHECK(shares_storage(x.squeeze(), x));
  const Tensor m = iota({3, 4});
  CHECK(m.unsqueeze(0).sizes() == Shape{1, 3, 4});
  CHECK(m.unsqueeze(-1).sizes() == Shape{3, 4, 1});
  CHECK(m.unsqueeze(-1).strides() == Shape{4, 1, 1});
  CHECK(m.unsqueeze(1).strides() == Shape{4, 4, 1});
  CHECK(m.t().unsqueeze(1).strides() == Shape{1, 12, 4});
  CHECK(full({}, 2.0).unsqueeze(0).sizes() == Shape{1});
  CHECK_THROWS_WITH_FRAGMENT(m.unsqueeze(3), IndexError, "[unsqueeze] dim 3 is out of range for a 3-D tensor");
  const Tensor c = iota({2, 3, 4, 5});
  CHECK(c.flatten().sizes() == Shape{120});
  CHECK(c.flatten(1).sizes() == Shape{2, 60});
  CHECK(c.flatten(1, 2).sizes() == Shape{2, 12, 5});
  CHECK(c.flatten(-2, -1).sizes() == Shape{2, 3, 20});
  CHECK(shares_storage(c.flatten(1), c));
  CHECK(full({}, 3.0).flatten().sizes() == Shape{1});
  CHECK(full({}, 3.0).flatten(-1, 0).sizes() == Shape{1});
  CHECK_THROWS_WITH_FRAGMENT(full({}, 3.0).flatten(1), IndexError, "[flatten] dim 1 is out of range for a 0-D tensor");
  CHECK_THROWS_WITH_FRAGMENT(c.flatten(2, 1), ValueError, "[flatten] start_dim 2 comes after end_dim 1");
  // Flattening a channels-last tensor's C, H, W must copy (they are not row-major).
  const Tensor cl = c.contiguous(MemoryFormat::ChannelsLast);
  CHECK_FALSE(shares_storage(cl.flatten(1), cl));
  CHECK_CLOSE(cl.flatten(1), c.flatten(1), 0, 0);
}

// --- writes through views -------------------------------------------------------------

TEST_CASE("writes through views are visible in the base") {
  Tensor x = iota({3, 4});
  x.select(0, 1).fill_(-1);
  x.t().set({3, 2}, 100);  // base (2, 3)
  x.slice(1, 0, 4, 2).select(0, 0).fill_(50);  // base (0, 0) and (0, 2)
  x.view({12}).set({3}, 7);  // base (0, 3)
  x.unsqueeze(0).permute({2, 1, 0}).set({1, 0, 0}, 9);  // base (0, 1)
  CHECK(x.to_vector<double>() == std::vector<double>{50, 9, 50, 7, -1, -1, -1, -1, 8, 9, 10, 100});
  x.narrow(0, 2, 1).copy_(tensor({1, 2, 3, 4}, {4}, kF64));
  CHECK(x.select(0, 2).to_vector<double>() == std::vector<double>{1, 2, 3, 4});
  Tensor base = zeros({2, 3});
  base.unsqueeze(1).expand({2, 4, 3}).select(1, 3).copy_(full({3}, 5.0));  // writes row by row
  CHECK(base.to_vector<double>() == std::vector<double>(6, 5.0));
}

TEST_CASE("views of a tensor that requires grad carry history; under NoGradGuard they do not") {
  const Tensor x = randn({2, 3}, {.dtype = DType::Float64, .requires_grad = true});
  const Tensor v = x.t();
  CHECK(v.requires_grad());
  CHECK(v.grad_fn() != nullptr);
  CHECK(v.grad_fn()->name() == "permute");
  CHECK(x.slice(0, 0, 1).grad_fn()->name() == "slice");
  CHECK(x.view({6}).grad_fn()->name() == "view");
  NoGradGuard guard;
  CHECK_FALSE(x.t().requires_grad());
  CHECK(x.t().grad_fn() == nullptr);
}

// --- gradients through views ----------------------------------------------------------

TEST_CASE("gradcheck: view, reshape (view and copy paths), flatten") {
  check_view_grad({2, 3, 4}, [](const Tensor& x) { return x.view({4, -1}); }, 1);
  check_view_grad({2, 3, 4}, [](const Tensor& x) { return x.reshape({6, 4}); }, 2);
  check_view_grad({3, 4}, [](const Tensor& x) { return x.t().reshape({12}); }, 3);
  check_view_grad({2, 3, 4}, [](const Tensor& x) { return x.flatten(1); }, 4);
  check_view_grad({2, 3, 2, 2}, [](const Tensor& x) {
    return x.contiguous(MemoryFormat::ChannelsLast).flatten(1);
  }, 5);
}

TEST_CASE("gradcheck: permute, transpose, t") {
  check_view_grad({2, 3, 4}, [](const Tensor& x) { return x.permute({2, 0, 1}); }, 6);
  check_view_grad({2, 3, 4}, [](const Tensor& x) { return x.transpose(-1, 0); }, 7);
  check_view_grad({3, 5}, [](const Tensor& x) { return x.t(); }, 8);
}

TEST_CASE("gradcheck: slice (negative bounds, step), narrow, select") {
  check_view_grad({7, 3}, [](const Tensor& x) { return x.slice(0, 1, -1, 2); }, 9);
  check_view_grad({4, 6}, [](const Tensor& x) { return x.slice(-1, -4, 6, 3); }, 10);
  check_view_grad({4, 5}, [](const Tensor& x) { return x.narrow(1, -3, 2); }, 11);
  check_view_grad({3, 4}, [](const Tensor& x) { return x.select(1, -1); }, 12);
  check_view_grad({2, 3, 4}, [](const Tensor& x) { return x.select(0, 1).select(1, 2); }, 13);
}

TEST_CASE("gradcheck: expand sums the gradient over expanded dims") {
  check_view_grad({3, 1}, [](const Tensor& x) { return x.expand({2, 3, 4}); }, 14);
  check_view_grad({1, 4}, [](const Tensor& x) { return x.expand({3, -1}); }, 15);
  check_view_grad({}, [](const Tensor& x) { return x.expand({2, 2}); }, 16);
  // Hand check: every expanded copy sends its gradient home.
  const Tensor x = tensor({1, 2}, {2, 1}, {.dtype = DType::Float64, .requires_grad = true});
  x.expand({3, 2, 5}).backward(ones({3, 2, 5}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{15, 15});
}

TEST_CASE("gradcheck: squeeze, unsqueeze, clone, contiguous, chains of views") {
  check_view_grad({1, 3, 1, 2}, [](const Tensor& x) { return x.squeeze(); }, 17);
  check_view_grad({1, 3, 1, 2}, [](const Tensor& x) { return x.squeeze(2); }, 18);
  check_view_grad({3, 2}, [](const Tensor& x) { return x.unsqueeze(1); }, 19);
  check_view_grad({3, 2}, [](const Tensor& x) { return x.t().contiguous(); }, 20);
  check_view_grad({2, 3, 2, 2}, [](const Tensor& x) { return x.clone(MemoryFormat::ChannelsLast); }, 21);
  check_view_grad({4, 3, 2}, [](const Tensor& x) {
    return x.permute({2, 0, 1}).slice(1, 0, 4, 2).reshape({-1}).unsqueeze(0).expand({2, -1});
  }, 22);
}

TEST_CASE("the gradient of a slice of a channels-last tensor is channels-last") {
  Generator gen(14);
  Tensor x = randn({2, 4, 6, 6}, {.dtype = DType::Float64}, &gen).contiguous(MemoryFormat::ChannelsLast);
  x.requires_grad_();
  const Tensor y = x.slice(2, 0, 6, 2).slice(3, 1, 6, 2);
  Tensor dy = randn(y.sizes(), {.dtype = DType::Float64}, &gen);
  y.backward(dy);
  CHECK(x.grad().is_contiguous(MemoryFormat::ChannelsLast));
  // Every picked element gets its dy, every other element zero.
  const Tensor expected = zeros({2, 4, 6, 6}, {.dtype = DType::Float64});
  expected.slice(2, 0, 6, 2).slice(3, 1, 6, 2).copy_(dy);
  CHECK_CLOSE(x.grad(), expected, 0, 0);
}

TEST_CASE("a view feeding a product: gradient lands on the right elements") {
  // y = sum(x[:, 1] * w): dy/dx is w in column 1 and 0 elsewhere.
  const Tensor x = iota({3, 2}).detach().requires_grad_();
  const Tensor w = tensor({10, 20, 30}, {3}, kF64);
  const Tensor y = mul(x.select(1, 1), w).view({1, 3}).t().reshape({3});
  y.backward(ones({3}, kF64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 10, 0, 20, 0, 30});
}

}  // namespace
}  // namespace loom
