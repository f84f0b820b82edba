#!/usr/bin/env bash
# Installs what is missing, then runs Loom's main example job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel run -c opt //examples/tiny:two_layer -- "$@"
