"""Finds the CUDA toolkit (CUDA_PATH, else /usr/local/cuda) and exposes it as @local_cuda.

@local_cuda//:defs.bzl says whether it was found; where it was not (or LOOM_CUDA=0),
the targets exist but are empty, so the build is a clean CPU-only build.
"""

def _find_cuda(ctx):
    if ctx.os.environ.get("LOOM_CUDA", "") == "0":
        return None
    path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    for needed in ["bin/nvcc", "include/cuda_runtime.h", "include/cudnn.h"]:
        if not ctx.path(path + "/" + needed).exists:
            return None
    return path

def _libdir(ctx, path):
    for candidate in ["lib64", "lib"]:
        if ctx.path(path + "/" + candidate + "/libcudart.so").exists:
            return path + "/" + candidate
    fail("CUDA at %s has no lib64/libcudart.so or lib/libcudart.so" % path)

def _lib(name, libdir, libs):
    return """
cc_library(
    name = "{name}",
    deps = [":headers"],
    linkopts = ["-L{libdir}", "-Wl,-rpath,{libdir}", {libs}],
)
""".format(name = name, libdir = libdir, libs = ", ".join(['"-l%s"' % l for l in libs]))

def _cuda_configure_impl(ctx):
    path = _find_cuda(ctx)
    build = 'package(default_visibility = ["//visibility:public"])\n'
    if path == None:
        build += 'cc_library(name = "headers")\n'
        for name in ["cudart", "cudnn", "cublas", "nvrtc", "nccl"]:
            build += 'cc_library(name = "%s")\n' % name
        ctx.file("defs.bzl", "CUDA_FOUND = False\nCUDA_PATH = \"\"\n")
    else:
        libdir = _libdir(ctx, path)
        ctx.symlink(path + "/include", "include")
        build += """
cc_library(
    name = "headers",
    hdrs = glob(["include/**"]),
    includes = ["include", "include/cccl"],
)
"""
        build += _lib("cudart", libdir, ["cudart"])
        build += _lib("cudnn", libdir, ["cudnn"])
        build += _lib("cublas", libdir, ["cublasLt", "cublas"])
        build += _lib("nvrtc", libdir, ["nvrtc"])
        # NCCL ships with the toolkit here; on hosts where it lives elsewhere
        # (/lib/x86_64-linux-gnu), the loader finds libnccl.so.2 there at run time.
        if ctx.path(libdir + "/libnccl.so").exists:
            build += _lib("nccl", libdir, ["nccl"])
        else:
            build += 'cc_library(name = "nccl", linkopts = ["-lnccl"], deps = [":headers"])\n'
        ctx.file("defs.bzl", "CUDA_FOUND = True\nCUDA_PATH = \"%s\"\n" % path)
    ctx.file("BUILD", build)

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "LOOM_CUDA"],
    local = True,
)
