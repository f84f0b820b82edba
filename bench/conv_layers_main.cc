// File: bench/conv_layers_main.cc
// conv_layers: each distinct convolution of a zoo model timed alone (bench/conv_layers.h).
// Exits 0 when every layer was timed, 1 after an error while timing, 2 for bad flags.
#include <cstdio>
#include <optional>

#include "bench/conv_layers.h"
#include "core/error.h"

int main(int argc, char** argv) {
  std::optional<loom::bench::ConvLayersOptions> options;
  try {
    options = loom::bench::parse_conv_layers_flags(argc, argv);
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "conv_layers: bad flags: %s\n%s", e.what(), loom::bench::kConvLayersUsage);
    return 2;
  }
  try {
    loom::bench::run_conv_layers(*options);
    return 0;
  } catch (const loom::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
