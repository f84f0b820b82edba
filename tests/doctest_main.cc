// File: tests/doctest_main.cc
// The doctest main of every single-process test binary.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
