#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test. GPU tests
# (tag "gpu") skip themselves where no GPU is usable. Ends with the line
#   N passed, N failed, N skipped
# counting doctest test cases over all test binaries.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1

bazel test //... "$@"
status=$?

passed=0 failed=0 skipped=0
for label in $(bazel query "tests(//...)" 2>/dev/null); do
  log="bazel-testlogs/$(echo "${label#//}" | tr : /)/test.log"
  line=$(grep -a "^\[doctest\] test cases:" "$log" | tail -n 1)
  if [ -z "$line" ]; then  # crashed or never ran: count the binary as one failure
    echo "no doctest summary in $log"
    failed=$((failed + 1))
    continue
  fi
  read -r p f s < <(echo "$line" | sed -E 's/.*\| *([0-9]+) passed \| *([0-9]+) failed \| *([0-9]+) skipped.*/\1 \2 \3/')
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done
if [ $status -ne 0 ] && [ $failed -eq 0 ]; then
  failed=1  # a build failure leaves no failing test case behind
fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ $status -eq 0 ] && [ $failed -eq 0 ]
