#!/usr/bin/env bash
# Builds the GPU tests (tag "gpu"), the examples and benchmarks (bench/, when present) and
# gathers them, with the non-CUDA shared libraries they need, into .bundle/ — a
# folder that runs on a GPU host with the NVIDIA driver, CUDA runtime, cuDNN and
# cuBLAS but no Bazel. On that host: bash .bundle/run_gpu_tests.sh, and the
# benchmark against PyTorch: bash .bundle/bench/run.sh (--help for its options)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh

scope=${1:-//...}  # e.g. //tests/core/cudnn/... to bundle part of the suite
targets=$(bazel query "attr(tags, \"gpu\", tests($scope))")
bench=$(bazel query 'kind(cc_binary, //examples/... + //optim/...)'; bazel query 'kind(cc_binary, //bench/...)' 2>/dev/null || true)
bazel build -c opt --strip=always $targets $bench

rm -rf .bundle && mkdir -p .bundle/bin .bundle/lib
# Test binaries are named after their package too (tests/core/cuda:pool_gpu_test
# -> cuda_pool_gpu_test): several packages have a test of the same name.
for label in $targets $bench; do
  path="bazel-bin/$(echo "${label#//}" | tr : /)"
  package=$(basename "$(dirname "$path")")
  cp "$path" ".bundle/bin/${package}_$(basename "$path")"
done
# The benchmark's scripts: .bundle/bench/run.sh finds the binaries in ../bin and
# the libraries in ../lib (see bench/run.sh).
if [ -d bench ]; then
  mkdir -p .bundle/bench
  cp bench/*.py bench/run.sh .bundle/bench/
  cp models/torch_models.py .bundle/bench/  # the zoo's PyTorch twins, which torch_bench.py imports
fi
# Libraries the GPU host lacks: everything resolved here except the C runtime
# and the CUDA libraries (NCCL included), which the host provides in matching versions. Loom's
# own libraries are shared objects (Bazel's default for tests), so each is
# shipped once rather than linked into every binary.
skip='^(libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|ld-linux|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcudnn|libcublas|libnvrtc|libnccl|linux-vdso)'
# OpenBLAS is loaded at run time (core/cpu/openblas.h), so ldd does not list it:
# it goes along by name, with what it links.
openblas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ && !found {print $NF; found = 1}')
for binary in $(for label in $targets $bench; do echo "bazel-bin/$(echo "${label#//}" | tr : /)"; done) $openblas; do
  ldd "$binary" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    if ! echo "$name" | grep -Eq "$skip"; then cp -L -n "$path" .bundle/lib/; fi
  done
done
cp -L -n "$openblas" .bundle/lib/libopenblas.so.0
cat > .bundle/run_gpu_tests.sh <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test in this bundle and prints one summary line.
here="$(cd "$(dirname "$0")" && pwd)"
cudnn=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib  # cuDNN 9.19 (headers' version)
export LD_LIBRARY_PATH="$here/lib:$cudnn:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
runner=${LOOM_TEST_RUNNER:-}  # e.g. "compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1"
logs=${LOOM_TEST_LOGS:-}      # a folder for each test's full output (else only its tail is shown)
passed=0 failed=0 skipped=0 status=0
for test in "$here"/bin/*_gpu_test; do
  echo "=== $(basename "$test")"
  log=$($runner "$test" 2>&1); rc=$?
  [ -n "$logs" ] && mkdir -p "$logs" && echo "$log" > "$logs/$(basename "$test").log"
  echo "$log" | tail -n 40
  line=$(echo "$log" | grep -a "^\[doctest\] test cases:" | tail -n 1)
  read -r p f s < <(echo "$line" | sed -E 's/.*\| *([0-9]+) passed \| *([0-9]+) failed \| *([0-9]+) skipped.*/\1 \2 \3/')
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-1})) skipped=$((skipped + ${s:-0}))
  [ $rc -eq 0 ] || status=1
done
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $status
RUN
chmod +x .bundle/run_gpu_tests.sh
# The device tool carries at most 64 MiB; OpenBLAS alone is 36 MiB unpacked. The
# binaries link the same CUDA kernels (35 MB) each: xz -9's 64 MiB window finds the
# repeats, which -6's 8 MiB window misses (28 MB against 74 MB on 2026-11-25).
mkdir -p .gpu && tar -C .bundle -cf - . | xz -9 -T2 > .gpu/bundle.tar.xz
du -sh .bundle .gpu/bundle.tar.xz
