#!/usr/bin/env bash
# Builds libloom.so with Bazel and installs it with Loom's public headers, a
# pkg-config file and a CMake package, for programs built outside Bazel:
#
#   bash tools/install.sh [--prefix DIR] [--cpu] [-c opt|fastbuild|dbg]
#   g++ -std=c++20 main.cc $(pkg-config --cflags --libs loom)   # PKG_CONFIG_PATH=DIR/lib/pkgconfig
#   find_package(Loom) + target_link_libraries(app Loom::loom)    # CMAKE_PREFIX_PATH=DIR
#
# Lays out DIR/include/loom/{core,layers,models,optim,data}/..., DIR/lib/libloom.so,
# DIR/lib/pkgconfig/loom.pc and DIR/lib/cmake/Loom/. DIR defaults to /usr/local
# as root and ~/.local otherwise. The CUDA backend is built where Bazel finds
# CUDA (as for every build); --cpu builds without it. -c defaults to opt; the
# test suite passes fastbuild to reuse the outputs of its own build.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.1.0
prefix=$([ "$(id -u)" -eq 0 ] && echo /usr/local || echo "$HOME/.local")
mode=opt
flags=()
usage() { echo "usage: tools/install.sh [--prefix DIR] [--cpu] [-c opt|fastbuild|dbg]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --cpu) flags+=(--config=cpu); shift ;;
    -c) [ $# -ge 2 ] || usage; mode=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "install: unknown argument '$1'" >&2; usage ;;
  esac
done
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
flags+=(-c "$mode")

bazel build "${flags[@]}" //packaging:loom
bin=$(bazel info "${flags[@]}" bazel-bin)
library="$bin/packaging/libloom.so"

# The headers of every library in libloom.so (the hdrs, not private srcs),
# under the include paths Loom's own code uses: #include "layers/nn.h".
headers=$(bazel cquery "${flags[@]}" 'kind("source file", labels(hdrs, kind(cc_library, deps(//packaging:loom))))' \
            2>/dev/null | sed -nE 's|^//([^:]*):([^ ]*) .*|\1/\2|p' |
            grep -E '^(core|layers|models|optim|data)/')
rm -rf "$prefix/include/loom"
for header in $headers; do
  install -D -m 644 "$header" "$prefix/include/loom/$header"
done
install -D -m 755 "$library" "$prefix/lib/libloom.so"

# What the library links (and its headers include) beyond Loom itself.
libs="-lspdlog -lfmt -ldeflate -lz -ldl -pthread"  # OpenBLAS, oneDNN, OpenMP: loaded at run time
cflags="-DSPDLOG_FMT_EXTERNAL"
cmake_defines="SPDLOG_FMT_EXTERNAL"
cmake_libs="spdlog;fmt;deflate;z;dl;-pthread"
cmake_includes=""
cuda=OFF
if readelf -d "$library" | grep -q 'NEEDED.*libcudart'; then
  cuda=ON
  cuda_path=$(sed -nE 's/^CUDA_PATH = "(.*)"/\1/p' "$(bazel info output_base)/external/local_cuda/defs.bzl")
  cuda_lib="$cuda_path/lib64"
  [ -e "$cuda_lib/libcudart.so" ] || cuda_lib="$cuda_path/lib"
  libs="$libs -L$cuda_lib -Wl,-rpath,$cuda_lib -lcudnn -lcublasLt -lcublas -lcudart"
  cflags="$cflags -DLOOM_WITH_CUDA -I$cuda_path/include"
  cmake_defines="$cmake_defines;LOOM_WITH_CUDA"
  cmake_includes=";$cuda_path/include"
  cmake_libs="$cmake_libs;$cuda_lib/libcudnn.so;$cuda_lib/libcublasLt.so;$cuda_lib/libcublas.so;$cuda_lib/libcudart.so"
fi

fill() {  # template output: replaces the @NAME@ placeholders
  mkdir -p "$(dirname "$2")"
  sed -e "s|@VERSION@|$version|g" -e "s|@CFLAGS@|$cflags|g" -e "s|@LIBS@|$libs|g" \
      -e "s|@CMAKE_INCLUDES@|$cmake_includes|g" -e "s|@CMAKE_DEFINES@|$cmake_defines|g" \
      -e "s|@CMAKE_LIBS@|$cmake_libs|g" -e "s|@CUDA@|$cuda|g" "$1" > "$2"
}
fill packaging/loom.pc.in "$prefix/lib/pkgconfig/loom.pc"
fill packaging/LoomConfig.cmake.in "$prefix/lib/cmake/Loom/LoomConfig.cmake"
fill packaging/LoomConfigVersion.cmake.in "$prefix/lib/cmake/Loom/LoomConfigVersion.cmake"

echo "install: Loom $version (CUDA backend $cuda) in $prefix:" \
     "$(echo $headers | wc -w) headers, lib/libloom.so, lib/pkgconfig/loom.pc, lib/cmake/Loom"
