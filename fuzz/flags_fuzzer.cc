// File: fuzz/flags_fuzzer.cc
// The trainers' flag parser and path checks: the input is argv, one argument
// per line.
#include <string>
#include <vector>

#include "core/error.h"
#include "training/flags.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  try {
    loom::training::ParsedFlags flags = loom::training::parse_flags(args, {});
    loom::training::resolve_user_paths(flags.config, "/fuzz/work");
    loom::training::check_paths(flags.config);
  } catch (const loom::Error&) {
  }
  return 0;
}
