"""One cc_test per *_test.cc file; *_gpu_test.cc files are tagged "gpu"."""

def loom_tests(deps, data = []):
    for src in native.glob(["*_test.cc"]):
        name = src[:-len(".cc")]
        tags = ["gpu"] if src.endswith("_gpu_test.cc") else []
        native.cc_test(
            name = name,
            srcs = [src],
            deps = deps + ["//tests:doctest_main", "//tests:testing"],
            data = data,
            tags = tags,
            size = "medium",
        )
