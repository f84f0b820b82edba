#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for
# FUZZ_RUNS executions or FUZZ_SECONDS seconds, whichever comes first, from the
# seed corpus (fuzz/corpus) and the regression inputs (fuzz/regressions). New
# corpus entries go to out/fuzz/<target>/corpus, crashing inputs to
# out/fuzz/<target>/crashes; the last lines give executions and coverage per
# target, and the exit status is 1 if any target crashed: fix it, then add the
# input to fuzz/regressions/<target>/.
#
#   bash tools/fuzz.sh                      # every target
#   FUZZ_SECONDS=60 bash tools/fuzz.sh idx image
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh clang libclang-rt-14-dev

all_targets=(idx cifar safetensors checkpoint image png bmp jpeg flags)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
runs="${FUZZ_RUNS:-1000000}"
seconds="${FUZZ_SECONDS:-600}"
output_base="${LOOM_FUZZ_OUTPUT_BASE:-$HOME/.cache/loom-fuzz-bazel}"
fuzz_bazel() { bazel --output_base="$output_base" "$@"; }

labels=()
for t in "${targets[@]}"; do labels+=("//fuzz:${t}_fuzzer"); done
fuzz_bazel build --config=fuzz "${labels[@]}"
bin="$(fuzz_bazel info --config=fuzz bazel-bin)/fuzz"

summary=() found=0
for t in "${targets[@]}"; do
  work="out/fuzz/$t"
  mkdir -p "$work/corpus" "$work/crashes" "fuzz/regressions/$t"
  echo "== $t: up to $runs runs or $seconds s"
  # allocator_may_return_null: a huge allocation is Loom's OutOfMemoryError to
  # handle, not a fuzzer finding.
  ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$bin/${t}_fuzzer" -runs="$runs" -max_total_time="$seconds" -max_len=65536 \
      -rss_limit_mb=2560 -malloc_limit_mb=2048 -timeout=20 -print_final_stats=1 \
      -artifact_prefix="$work/crashes/" \
      "$work/corpus" "fuzz/corpus/$t" "fuzz/regressions/$t" 2>&1 | tee "$work/log" | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY|^stat::" || true
  done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$work/log" | tail -n 1 || true)
  execs=$(grep -E "^stat::number_of_executed_units" "$work/log" | awk '{print $2}' || true)
  if [ -z "$done_line" ] || grep -q "^==.*ERROR" "$work/log"; then
    summary+=("$t: FOUND A PROBLEM after ${execs:-?} executions; see $work/log and $work/crashes/")
    found=1
    continue
  fi
  summary+=("$t: ${execs} executions, $(echo "$done_line" | grep -oE 'cov: [0-9]+ ft: [0-9]+')")
done
printf '%s\n' "${summary[@]}"
exit $found
