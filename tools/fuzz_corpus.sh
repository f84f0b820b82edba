#!/usr/bin/env bash
# Writes the fuzzers' seed corpus (small valid files of every kind) into
# fuzz/corpus/<target>/, replacing what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
rm -rf fuzz/corpus
bazel run --config=cpu //fuzz:make_corpus -- "$PWD/fuzz/corpus"
