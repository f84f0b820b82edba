#!/usr/bin/env bash
# Builds and saves the cuDNN plan files for a model ahead of time, so that every
# later run (a class lab: build once, every student starts warm) restores its
# plans instead of building them. It runs bench/train_step in the lazy
# plan-build mode, the trainers' default, whose background builds time their
# candidates (a lazy run does not restore an eager mode's untimed plan): one
# training step per batch size and precision until every background build is
# swapped in, then one evaluation-mode forward (the test pass's plans), whose
# builds it waits for. The plans match the trainers' and the benchmark's on the
# GPU: channels-last, nn::fuse()d layers.
#
#   bazel run -c opt //tools:warm_plans -- --model mnist_net --batch 128,1000 --precision tf32,bf16
#
# Flags: --model NAMES (any of models/registry.h, e.g. lenet5, resnet20; default mnist_net),
# --batch SIZES (default 128,1000), --precision LIST (tf32, strict, bf16;
# default tf32), --layout auto|nchw|nhwc (default auto: channels-last on the
# GPU). The files go where the trainers look: LOOM_CUDNN_PLAN_DIR, else
# $XDG_CACHE_HOME/loom/cudnn-plans, else ~/.cache/loom/cudnn-plans. A batch
# size whose last training batch is smaller (60000 images in batches of 128
# end with 96) needs that size listed too.
set -euo pipefail

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
}

models=mnist_net
batches=128,1000
precisions=tf32
layout=auto
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) models="${2:?--model needs a value}"; shift 2 ;;
    --batch) batches="${2:?--batch needs a value}"; shift 2 ;;
    --precision) precisions="${2:?--precision needs a value}"; shift 2 ;;
    --layout) layout="${2:?--layout needs a value}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "warm_plans: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

bench="${RUNFILES_DIR:-$0.runfiles}/loom/bench/train_step"
[[ -x "$bench" ]] || bench="$(dirname "$0")/../bench/train_step"  # bazel-bin/tools/.. layout
[[ -x "$bench" ]] || { echo "warm_plans: cannot find bench/train_step (run through bazel run)" >&2; exit 1; }

exec "$bench" --models "$models" --batches "$batches" --precisions "$precisions" --layout "$layout" \
  --modes graph --steps 1 --repeats 1 --warmup 0 --plan-build lazy --eval-forward --device cuda
