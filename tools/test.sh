#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test. GPU tests
# (tag "gpu") skip themselves where no GPU is usable; the CPU tests run a second
# time with LOOM_CPU_BACKEND=reference (both CPU backends). With LOOM_ASAN=1 (CI:
# .ci/run) the CPU tests and the fuzz-corpus replays then run again under
# ASan + UBSan (bazel --config=asan, at -Og; LOOM_ASAN_TESTS, a bazel query, narrows
# them). After the normal run, two more phases: tests/install/run.sh installs
# Loom into a temporary prefix and builds a program outside the repository
# against it (pkg-config and CMake; with LOOM_TEST_BAZEL_WORKSPACE=1 also with
# Bazel through a local_repository), and tools/doxygen.sh builds the API
# reference, failing on any warning. Ends with the line
#   N passed, N failed, N skipped
# counting doctest test cases over all test binaries of every run, plus one
# case per check of each extra phase.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1

passed=0 failed=0 skipped=0 status=0

# Adds the doctest case counts in the logs of `labels` (of the last bazel test) to the totals.
count_cases() {
  for label in "$@"; do
    log="bazel-testlogs/$(echo "${label#//}" | tr : /)/test.log"
    line=$(grep -a "^\[doctest\] test cases:" "$log" 2>/dev/null | tail -n 1)
    if [ -z "$line" ]; then  # crashed or never ran: count the binary as one failure
      echo "no doctest summary in $log"
      failed=$((failed + 1))
      continue
    fi
    read -r p f s < <(echo "$line" | sed -E 's/.*\| *([0-9]+) passed \| *([0-9]+) failed \| *([0-9]+) skipped.*/\1 \2 \3/')
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  done
}

# Every test that needs no GPU: the reference-backend and sanitizer runs below take these.
cpu_tests="tests(//...) except attr(tags, gpu, tests(//...))"

bazel test //... "$@" || status=1
count_cases $(bazel query "tests(//...)" 2>/dev/null)

# The CPU tests again on the reference kernels alone: the oneDNN tier is the
# default above, so this run keeps the oracle itself tested end to end. The
# tier's own tests (tests/core/onednn) pick their backends themselves.
reference=$(bazel query "$cpu_tests except tests(//tests/core/onednn/...)" 2>/dev/null)
bazel test --test_env=LOOM_CPU_BACKEND=reference $reference "$@" || status=1
count_cases $reference

# Adds the "PASS name" / "FAIL name" lines of a phase's output to the totals.
count_checks() {
  local output
  output=$("$@" 2>&1) || status=1
  echo "$output"
  passed=$((passed + $(echo "$output" | grep -c "^PASS ")))
  failed=$((failed + $(echo "$output" | grep -c '^FAIL ')))
}

# The same compilation mode as the run above, so the install reuses its libloom.so.
# LOOM_TEST_BAZEL_WORKSPACE=1 also builds it from a workspace of its own that uses
# this checkout as @loom (a second build of Loom: minutes, so not by default).
install_flags=()
[ "${LOOM_TEST_BAZEL_WORKSPACE:-0}" = 1 ] && install_flags+=(--bazel)
count_checks bash tests/install/run.sh "${install_flags[@]}" -c fastbuild
count_checks bash tools/doxygen.sh

if [ "${LOOM_ASAN:-0}" = 1 ]; then
  query="${LOOM_ASAN_TESTS:-$cpu_tests}"
  labels=$(bazel query "$query" 2>/dev/null)
  started=$(date +%s)
  # .bazelrc's test:asan passes this on: the system libraries' own allocations
  # suppressed, thread-local storage not scanned (tools/lsan_suppressions.txt says why),
  # and no list of the suppressions used at exit: it varies from run to run (oneDNN's and
  # the loader's allocations), and the CLI tests compare two runs' whole output.
  export LSAN_OPTIONS="use_tls=0:print_suppressions=0:suppressions=$PWD/tools/lsan_suppressions.txt"
  bazel test --config=asan $labels || status=1
  echo "sanitizer run (ASan + UBSan): $(echo $labels | wc -w) test binaries in $(( $(date +%s) - started )) s"
  count_cases $labels
fi

if [ $status -ne 0 ] && [ $failed -eq 0 ]; then
  failed=1  # a build failure leaves no failing test case behind
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ $status -eq 0 ] && [ $failed -eq 0 ]
