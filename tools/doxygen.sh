#!/usr/bin/env bash
# Builds the API reference (Doxyfile) into build/doxygen/html/ and fails if
# Doxygen warns about any public header. Prints "PASS api_reference" or
# "FAIL api_reference" with the warnings (tools/test.sh counts the line).
set -uo pipefail
cd "$(dirname "$0")/.."
command -v doxygen > /dev/null || bash tools/setup.sh || exit 1

rm -rf build/doxygen
mkdir -p build/doxygen
if doxygen Doxyfile > build/doxygen/warnings.log 2>&1 && [ ! -s build/doxygen/warnings.log ]; then
  echo "PASS api_reference ($(ls build/doxygen/html/*.html | wc -l) pages in build/doxygen/html)"
else
  echo "FAIL api_reference: Doxygen's warnings (build/doxygen/warnings.log):"
  head -n 50 build/doxygen/warnings.log
  exit 1
fi
