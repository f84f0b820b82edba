#!/usr/bin/env bash
# Builds the GPU tests (tag "gpu"), the examples and benchmarks (bench/, when present) and
# gathers them, with the non-CUDA shared libraries they need, into .bundle/ — a
# folder that runs on a GPU host with the NVIDIA driver, CUDA runtime, cuDNN and
# cuBLAS but no Bazel. On that host: bash .bundle/run_gpu_tests.sh, the
# benchmark against PyTorch: bash .bundle/bench/run.sh (--help for its options),
# and on a host with several GPUs the data-parallel tests and scaling runs:
# bash .bundle/run_multi_gpu.sh (it unpacks the bundle's Open MPI first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh

scope=${1:-//...}  # e.g. //tests/core/cudnn/... to bundle part of the suite
targets=$(bazel query "attr(tags, \"gpu\", tests($scope))")
bench=$(bazel query 'kind(cc_binary, //examples/... + //tools/...)'; bazel query 'kind(cc_binary, //bench/...)' 2>/dev/null || true)
# The MPI suite and the dead-rank worker: run as ranks on a multi-GPU host.
ranks="//tests/distributed:mpi_suite //tests/distributed:dead_rank_worker"
# LOOM_BUNDLE_ONLY="labels": exactly these GPU tests and binaries (and the MPI
# programs), for a quick bundle of what a change touched.
if [ -n "${LOOM_BUNDLE_ONLY:-}" ]; then
  targets=$(for label in $LOOM_BUNDLE_ONLY; do bazel query "attr(tags, \"gpu\", tests($label))"; done)
  bench=$(for label in $LOOM_BUNDLE_ONLY; do bazel query "kind(cc_binary, $label)"; done)
fi
# Every binary links Loom's libraries as shared objects, as the tests do, so the
# CUDA kernels (55 MB) go once, in lib/: statically linked, each example and
# benchmark held its own copy and the packed bundle outgrew the 64 MiB a GPU
# host is sent (68 MB for the tests, the benchmarks and MPI alone, 2026-12-04).
bazel build -c opt --strip=always --dynamic_mode=fully $targets $bench $ranks

rm -rf .bundle && mkdir -p .bundle/bin .bundle/lib
# Test binaries are named after their package too (tests/core/cuda:pool_gpu_test
# -> cuda_pool_gpu_test): several packages have a test of the same name.
for label in $targets $bench $ranks; do
  path="bazel-bin/$(echo "${label#//}" | tr : /)"
  package=$(basename "$(dirname "$path")")
  cp "$path" ".bundle/bin/${package}_$(basename "$path")"
done
cp tests/distributed/mpirun.sh .bundle/bin/mpirun.sh
# Open MPI for the multi-GPU runs: the files of Debian's packages (the GPU host
# has no MPI), unpacked there by env.sh without overwriting the host's own files.
mpi_packages=(openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libhwloc-plugins
              libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1
              librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1)
dpkg -L "${mpi_packages[@]}" | grep -Ev '^/usr/share/(doc|man|lintian)/' |
  while read -r f; do if [ -L "$f" ] || [ -f "$f" ]; then echo "${f#/}"; fi; done |
  sort -u > .bundle/mpi.files
tar -cf .bundle/mpi.tar -C / -T .bundle/mpi.files
# The benchmark's scripts: .bundle/bench/run.sh finds the binaries in ../bin and
# the libraries in ../lib (see bench/run.sh).
if [ -d bench ]; then
  mkdir -p .bundle/bench
  cp bench/*.py bench/run.sh .bundle/bench/
  cp models/torch_models.py .bundle/bench/  # the zoo's PyTorch twins, which torch_bench.py imports
  cp tools/saved_memory_torch.py .bundle/bench/  # PyTorch's saved tensors, beside bin/tools_saved_memory
fi
# The ONNX Runtime comparison: python3 .bundle/tools/onnx_check.py DIR, DIR
# written by tools/onnx_zoo.sh here or by .bundle/bin/onnx_export --zoo there.
mkdir -p .bundle/tools
cp tools/onnx_check.py .bundle/tools/
# Libraries the GPU host lacks: everything resolved here except the C runtime
# and the CUDA libraries (NCCL included), which the host provides in matching versions. Loom's
# own libraries are shared objects (Bazel's default for tests), so each is
# shipped once rather than linked into every binary.
skip='^(libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|ld-linux|libstdc\+\+|libgcc_s|libcuda\.so|libcudart|libcudnn|libcublas|libnvrtc|libnccl|linux-vdso)'
# OpenBLAS and oneDNN are loaded at run time (core/cpu/openblas.h,
# core/onednn/library.h), so ldd does not list them: they go along by name, with
# what they link (oneDNN: GNU OpenMP, which Loom's CPU thread pool loads too,
# and the OpenCL loader).
openblas=$(ldconfig -p | awk '/libopenblas\.so\.0 .*x86-64/ && !found {print $NF; found = 1}')
dnnl=$(ldconfig -p | awk '/libdnnl\.so\.2 .*x86-64/ && !found {print $NF; found = 1}')
for binary in $(for label in $targets $bench $ranks; do echo "bazel-bin/$(echo "${label#//}" | tr : /)"; done) $openblas $dnnl; do
  ldd "$binary" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    if ! echo "$name" | grep -Eq "$skip"; then cp -L -n "$path" .bundle/lib/; fi
  done
done
cp -L -n "$openblas" .bundle/lib/libopenblas.so.0
cp -L -n "$dnnl" .bundle/lib/libdnnl.so.2
cat > .bundle/env.sh <<'ENV'
# Sourced by the bundle's scripts: the libraries (cuDNN 9.19 and NCCL 2.28 of
# the host's PyTorch environment, the bundle's own), Open MPI unpacked once
# without overwriting the host's files, and the programs of the MPI jobs.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
site=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="$here/lib:$site/cudnn/lib:$site/nccl/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ ! -x /usr/bin/orterun ] && [ -f "$here/mpi.tar" ]; then
  tar --skip-old-files -C / -xf "$here/mpi.tar" && ldconfig
fi
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on shared multi-GPU hosts
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export LOOM_MPIRUN_SH="$here/bin/mpirun.sh" LOOM_DEAD_RANK_WORKER="$here/bin/distributed_dead_rank_worker"
ENV
cat > .bundle/run_multi_gpu.sh <<'RUN'
#!/usr/bin/env bash
# The multi-GPU checks, on a host with two or more GPUs: the two-device test in
# one process on cuda:1 and cuda:0, the MPI suite as one rank per GPU over NCCL
# (DDP eager and in captured bf16 TrainSteps, SyncBatchNorm, the trainers'
# --distributed with resume across GPU counts), the dead-rank jobs, and the
# scaling benchmark (resnet9 bf16 512/GPU, mnist_net tf32 128/GPU: one GPU
# without DDP, then every GPU). Usage: run_multi_gpu.sh [tests|bench|all] [N]
source "$(cd "$(dirname "$0")" && pwd)/env.sh"
what=${1:-all}
n=${2:-$(nvidia-smi -L | wc -l)}
status=0
if [ "$what" != bench ]; then
  for test in multi_gpu_gpu_test dead_rank_gpu_test; do
    echo "=== optim/distributed $test"
    "$here"/bin/*_"$test" || status=1
  done
  echo "=== distributed_mpi_suite on $n GPUs"
  LOOM_DISTRIBUTED_TEST_DEVICE=cuda "$here/bin/mpirun.sh" "$n" "$here/bin/distributed_mpi_suite" || status=1
fi
if [ "$what" != tests ]; then
  # LOOM_SCALING_CONFIGS: "model batch precision" triples separated by commas.
  IFS=, read -ra configs <<< "${LOOM_SCALING_CONFIGS:-resnet9 512 bf16,mnist_net 128 tf32}"
  for config in "${configs[@]}"; do
    read -r model batch precision <<< "$config"
    flags=(--models "$model" --batches "$batch" --precisions "$precision" --modes graph
           --steps 50 --repeats 3)
    echo "=== scaling: $model $batch/GPU $precision, 1 GPU"
    "$here/bin/bench_train_step" "${flags[@]}" || status=1
    echo "=== scaling: $model $batch/GPU $precision, $n GPUs"
    "$here/bin/mpirun.sh" "$n" "$here/bin/bench_train_step" "${flags[@]}" --distributed || status=1
  done
fi
exit $status
RUN
chmod +x .bundle/run_multi_gpu.sh
cat > .bundle/run_gpu_tests.sh <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test in this bundle and prints one summary line.
source "$(cd "$(dirname "$0")" && pwd)/env.sh"
runner=${LOOM_TEST_RUNNER:-}  # e.g. "compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1"
logs=${LOOM_TEST_LOGS:-}      # a folder for each test's full output (else only its tail is shown)
jobs=${LOOM_TEST_JOBS:-1}     # tests at once (4 take a third of the serial time on one H200)
work=$(mktemp -d)
# One test: its output's tail printed whole as it ends (in the order tests end),
# its exit status kept for the summary.
# Its wall time goes in the header line, to see which tests hold up the end of a run.
run_one() {
  local test=$1 name log rc start=$SECONDS
  name=$(basename "$test")
  log="$work/$name.log"
  $runner "$test" > "$log" 2>&1; rc=$?
  echo $rc > "$work/$name.rc"
  [ -n "$logs" ] && mkdir -p "$logs" && cp "$log" "$logs/$name.log"
  { flock 9; echo "=== $name ($((SECONDS - start)) s)"; tail -n 40 "$log"; } 9> "$work/lock"
}
export -f run_one
export runner logs work
tests=("$here"/bin/*_gpu_test)
# The allocator's test fills half the driver's free memory, which another test
# may take meanwhile: it runs alone, first.
alone="$here/bin/cuda_allocator_gpu_test"
[ -x "$alone" ] && run_one "$alone"
for test in "${tests[@]}"; do [ "$test" != "$alone" ] && printf '%s\0' "$test"; done |
  xargs -0 -r -P "$jobs" -I{} bash -c 'run_one "$1"' _ {}
passed=0 failed=0 skipped=0 status=0
for test in "${tests[@]}"; do
  name=$(basename "$test")
  line=$(grep -a "^\[doctest\] test cases:" "$work/$name.log" 2>/dev/null | tail -n 1)
  read -r p f s < <(echo "$line" | sed -E 's/.*\| *([0-9]+) passed \| *([0-9]+) failed \| *([0-9]+) skipped.*/\1 \2 \3/')
  passed=$((passed + ${p:-0})) failed=$((failed + ${f:-1})) skipped=$((skipped + ${s:-0}))
  [ "$(cat "$work/$name.rc" 2>/dev/null)" = 0 ] || { status=1; echo "FAILED: $name"; }
done
rm -rf "$work"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $status
RUN
chmod +x .bundle/run_gpu_tests.sh
# The device tool carries at most 64 MiB; OpenBLAS alone is 36 MiB unpacked, oneDNN
# 40 MiB (7 MB packed).
mkdir -p .gpu && tar -C .bundle -cf - . | xz -9 -T2 > .gpu/bundle.tar.xz
du -sh .bundle .gpu/bundle.tar.xz
