#!/usr/bin/env bash
# Loom vs PyTorch on the GPU host, in one command: runs bench_train_step (Loom),
# torch_bench.py (PyTorch eager, torch.compile default and max-autotune, and
# the whole step in a CUDA graph), then compare.py, which prints the markdown
# table against the best PyTorch mode and the speed targets. Works from the bundle of
# tools/gpu_bundle.sh (binaries in bin/, libraries in lib/, this script in bench/):
#
#   bash .bundle/bench/run.sh                          # every configuration
#   bash .bundle/bench/run.sh --quick --fmnist .gpu/fmnist --out "$OUT"
#
#   --quick        only the headline configurations (lenet5 and mnist_net
#                  batch 128 tf32, resnet9 batch 512 bf16), 50 steps x 3 repeats
#   --fmnist DIR   also Fashion-MNIST time to 91% (DIR holds the IDX .gz files)
#   --out DIR      where the JSON lines and table.md go (default ./bench-out)
#   --only PART    loom, torch or compare: one part, e.g. to split a long run
#                  over several commands sharing --out
#   --profile      print Loom's per-layer profile table for each configuration
#   --models LIST  these models (any of models/registry.h, e.g. the zoo's
#                  resnet18_cifar,resnet20,vgg11_bn_cifar,mobilenet_v2_cifar,unet,vit_tiny)
#                  at batch 128 and 512, tf32 and bf16, instead of the reference set
#   --batches LIST, --precisions LIST
#                  with --models: these batches and precisions instead (e.g. 512, bf16)
# No warm-up runs side by side: both frameworks choose kernels by timing them in
# their first steps (Loom's plan builds, cuDNN's find, Inductor's autotuning, kept
# in their caches), and timings taken beside other runs choose slower ones: warmed
# seven models at a time (H200, 2026-12-01), Loom's unet batch 128 tf32 step took
# 5.38 ms against 4.31 built alone, and torch.compile's steps ran up to 1.5x their
# times compiled alone in earlier runs. Every configuration builds alone.
# Environment: LOOM_BENCH_ARGS / TORCH_BENCH_ARGS are appended to each call
# (e.g. LOOM_BENCH_ARGS="--models resnet9 --batches 512").
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
cudnn=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib  # cuDNN 9.19 (headers' version)
export LD_LIBRARY_PATH="$root/lib:$cudnn:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

quick=0 fmnist="" out="bench-out" only="" profile="" models="" batches=128,512 precisions=tf32,bf16
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --fmnist) fmnist="$2"; shift ;;
    --out) out="$2"; shift ;;
    --only) only="$2"; shift ;;
    --profile) profile="--profile" ;;
    --models) models="$2"; shift ;;
    --batches) batches="$2"; shift ;;
    --precisions) precisions="$2"; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"

# PyTorch lives in /opt/torch/.venv; compare.py needs only the standard library.
python=python3
if ! "$python" -c "import torch" 2>/dev/null; then python=/opt/torch/.venv/bin/python3; fi

# Each set: models, batches, precisions (the same for both frameworks).
if [ -n "$models" ]; then
  sets=("$models $batches $precisions")
  length=()
  [ "$quick" = 1 ] && length=(--steps 50 --repeats 3)
elif [ "$quick" = 1 ]; then
  sets=("lenet5,mnist_net 128 tf32" "resnet9 512 bf16")
  length=(--steps 50 --repeats 3)
else
  sets=("lenet5,mnist_net,resnet9 128,512 tf32,strict,bf16")
  length=()
fi

run_loom() {
  rm -f "$out/loom.jsonl"
  # Step benchmarks start from no plan files, so "first step" is the full build.
  export LOOM_CUDNN_PLAN_DIR=off
  for set in "${sets[@]}"; do
    read -r models batches precisions <<< "$set"
    "$root/bin/bench_train_step" --models "$models" --batches "$batches" --precisions "$precisions" \
      "${length[@]}" $profile --json "$out/loom.part.jsonl" ${LOOM_BENCH_ARGS:-}
    cat "$out/loom.part.jsonl" >> "$out/loom.jsonl"
  done
  if [ -n "$fmnist" ]; then
    # Twice: with an empty cuDNN plan-file folder (every plan built: "loom-cold"),
    # then with the files that run saved (plans restored: "loom").
    rm -rf "$out/plans"
    LOOM_CUDNN_PLAN_DIR="$out/plans" "$root/bin/bench_train_step" --models none --tta "$fmnist" \
      --json "$out/loom.part.jsonl"
    sed 's/"framework": "loom"/"framework": "loom-cold"/' "$out/loom.part.jsonl" >> "$out/loom.jsonl"
    LOOM_CUDNN_PLAN_DIR="$out/plans" "$root/bin/bench_train_step" --models none --tta "$fmnist" \
      --json "$out/loom.part.jsonl"
    cat "$out/loom.part.jsonl" >> "$out/loom.jsonl"
  fi
  rm -f "$out/loom.part.jsonl"
}

run_torch() {
  rm -f "$out/torch.jsonl"
  local status=0
  for set in "${sets[@]}"; do
    read -r models batches precisions <<< "$set"
    "$python" "$here/torch_bench.py" --models "$models" --batches "$batches" --precisions "$precisions" \
      "${length[@]}" --json "$out/torch.jsonl" ${TORCH_BENCH_ARGS:-} || status=1
  done
  if [ -n "$fmnist" ]; then
    "$python" "$here/torch_bench.py" --models none --tta "$fmnist" --json "$out/torch.jsonl" || status=1
  fi
  return $status
}

status=0
case "$only" in
  ""|loom) echo "=== Loom"; run_loom || status=1 ;;&
  ""|torch) echo "=== PyTorch"; run_torch || status=1 ;;&
  ""|compare) echo "=== Loom vs PyTorch"
              python3 "$here/compare.py" "$out"/loom.jsonl "$out"/torch.jsonl --out "$out/table.md" ;;
  loom|torch) ;;
  *) echo "run.sh: --only takes loom, torch or compare, got '$only'" >&2; exit 2 ;;
esac
exit $status
