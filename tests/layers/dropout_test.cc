// File: tests/layers/dropout_test.cc
// Dropout and Dropout2d: the training flag decides, masks come from the given
// generator, survivors are scaled by 1 / (1 - p); errors and printing; Identity.
#include "layers/dropout.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/generator.h"
#include "core/ops/ops.h"
#include "layers/nn.h"
#include "tests/testing.h"

namespace loom {
namespace {

TEST_CASE("Dropout in training zeroes about p and scales the rest by 1 / (1 - p)") {
  Generator gen(1);
  nn::Dropout drop(0.25, &gen);
  const std::vector<double> y = drop(ones({20000})).to_vector<double>();
  int64_t zeros_seen = 0;
  for (double v : y) {
    if (v == 0) {
      ++zeros_seen;
    } else {
      CHECK(v == doctest::Approx(1 / 0.75));
    }
  }
  // 20000 draws with p = 0.25: standard deviation about 61.
  CHECK(std::abs(static_cast<double>(zeros_seen) - 5000) < 300);
}

TEST_CASE("Dropout in eval mode returns its input") {
  nn::Dropout drop(0.5);
  drop.eval();
  const Tensor x = ones({10});
  CHECK(drop(x).is_same(x));
  drop.train();
  CHECK_FALSE(drop(x).is_same(x));
  CHECK(nn::Dropout(0.0)(x).is_same(x));
}

TEST_CASE("Dropout masks come from its generator, as the functional op's") {
  Generator a(7), b(7), c(7);
  nn::Dropout da(0.5, &a), db(0.5, &b);
  const Tensor x = ones({64});
  const Tensor ya = da(x);
  CHECK_CLOSE(ya, db(x), 0, 0);
  CHECK_CLOSE(ya, dropout(x, 0.5, true, &c), 0, 0);
  CHECK(da(x).to_vector<double>() != ya.to_vector<double>());  // the generator moved on
}

TEST_CASE("Dropout errors and printing") {
  CHECK_THROWS_WITH_FRAGMENT(nn::Dropout(1.5), ValueError,
                             "[Dropout] probability p must be in [0, 1], got 1.5");
  CHECK(nn::Dropout(0.25).repr() == "Dropout(p=0.25, inplace=False)");
  CHECK(nn::Dropout().repr() == "Dropout(p=0.5, inplace=False)");
  CHECK(nn::Dropout(1).repr() == "Dropout(p=1.0, inplace=False)");
  CHECK(nn::Dropout(0.3).p() == 0.3);
}

TEST_CASE("Dropout2d drops whole channels in training, passes through in eval, prints as PyTorch") {
  Generator a(3), b(3);
  nn::Dropout2d drop(0.5, &a);
  const Tensor x = ones({4, 8, 3, 3});
  CHECK_CLOSE(drop(x), dropout2d(x, 0.5, true, &b), 0, 0);
  drop.eval();
  CHECK(drop(x).is_same(x));
  CHECK(drop.repr() == "Dropout2d(p=0.5, inplace=False)");
  CHECK(nn::Dropout2d(0.1).p() == 0.1);
  CHECK_THROWS_WITH_FRAGMENT(nn::Dropout2d(-1), ValueError,
                             "[Dropout2d] probability p must be in [0, 1], got -1");
}

TEST_CASE("Identity returns its input and holds nothing") {
  nn::Identity identity;
  const Tensor x = ones({2, 3});
  CHECK(identity(x).is_same(x));
  CHECK(identity.repr() == "Identity()");
  CHECK(identity.parameters().empty());
  nn::Sequential net(nn::Linear(3, 2), nn::Identity());
  CHECK(net.repr().find("(1): Identity()") != std::string::npos);
}

}  // namespace
}  // namespace loom
