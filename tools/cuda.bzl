"""Build helpers for the optional CUDA backend."""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "CUDA_PATH")

CUDA_HEADERS = "@local_cuda//:headers"

# sm_80 and sm_90 machine code, plus sm_90 PTX for newer GPUs to JIT.
_GENCODE = [
    "-gencode arch=compute_80,code=sm_80",
    "-gencode arch=compute_90,code=sm_90",
    "-gencode arch=compute_90,code=compute_90",
]

def if_cuda(if_true, if_false = []):
    """`if_true` where the CUDA backend is built, `if_false` otherwise."""
    if not CUDA_FOUND:
        return if_false
    return select({
        "//tools:cuda_off": if_false,
        "//conditions:default": if_true,
    })

def cuda_library(name, srcs, hdrs = [], deps = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (one genrule per file)."""

    # Includes are relative to the repository's root: "." here, external/loom
    # when another workspace uses Loom as @loom (see docs/install.md).
    repo = native.repository_name().lstrip("@")
    includes = "-Iexternal/%s -I$(GENDIR)/external/%s" % (repo, repo) if repo else "-I. -I$(GENDIR)"
    objs = []
    for src in srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + [CUDA_HEADERS],
            outs = [obj],
            cmd = " ".join([
                CUDA_PATH + "/bin/nvcc",
                "-std=c++20 -O3 -Xcompiler -fPIC -Xcompiler -Wall",
                "--expt-relaxed-constexpr",
                " ".join(_GENCODE),
                "-DLOOM_WITH_CUDA",
                includes + " -I" + CUDA_PATH + "/include",
                "-c $(location %s) -o $@" % src,
            ]),
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        alwayslink = True,
        **kwargs
    )
