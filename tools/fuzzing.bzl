"""Fuzz targets: each a library defining LLVMFuzzerTestOneInput, a libFuzzer
binary (clang only, so tagged manual: tools/fuzz.sh builds it with
--config=fuzz), and, in tests/fuzz, a corpus-replay test that any compiler
builds."""

def loom_fuzzer(name, srcs, deps):
    """`name`_target (the harness) and `name` (the libFuzzer binary)."""
    native.cc_library(
        name = name + "_target",
        srcs = srcs,
        deps = deps + ["//fuzz:fuzz_input"],
        alwayslink = True,
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_target"],
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
    )

def loom_fuzz_replay_test(target):
    """A doctest test that feeds every file of fuzz/corpus/`target` and
    fuzz/regressions/`target` to the harness `target`_fuzzer_target."""
    native.cc_test(
        name = target + "_replay_test",
        srcs = ["replay_test.cc"],
        local_defines = ["LOOM_FUZZ_TARGET=\\\"" + target + "\\\""],
        deps = [
            "//fuzz:" + target + "_fuzzer_target",
            "//tests:doctest_main",
            "@system_libs//:doctest",
        ],
        data = ["//fuzz:" + target + "_files"],
        size = "medium",
    )
