// File: tests/core/cpu/openblas_test.cc
// OpenBLAS loaded at run time: the kernels it chose are the ones the CPU's
// features allow (so it was not loaded, and did not choose, before Loom named
// them), and it runs on one thread.
#include "core/cpu/openblas.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

namespace loom::cpu {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

}  // namespace

TEST_CASE("OpenBLAS runs the kernels the CPU's features allow, unless OPENBLAS_CORETYPE says otherwise") {
  const char* user_choice = std::getenv("OPENBLAS_CORETYPE");
  const std::string expected = user_choice != nullptr ? user_choice : openblas_core_for_cpu();
  const Openblas& blas = openblas();
  REQUIRE(static_cast<bool>(blas.sgemm));
  REQUIRE(static_cast<bool>(blas.dgemm));
  CAPTURE(blas.core);
  CAPTURE(expected);
  if (!expected.empty()) CHECK(lower(blas.core) == lower(expected));
  CHECK(&openblas() == &blas);  // loaded once
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {};
  blas.sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 19);
  CHECK(c[1] == 22);
  CHECK(c[2] == 43);
  CHECK(c[3] == 50);
}

TEST_CASE("the core type follows the CPU's features") {
  __builtin_cpu_init();
  const std::string core = openblas_core_for_cpu();
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    CHECK(core == "SkylakeX");
  } else if (__builtin_cpu_supports("avx2")) {
    CHECK((core == "Haswell" || core == "SkylakeX"));
  } else if (__builtin_cpu_supports("avx")) {
    CHECK(core == "Sandybridge");
  } else {
    CHECK(core.empty());
  }
}

}  // namespace loom::cpu
