#!/usr/bin/env bash
# Writes DIR for tools/onnx_check.py: the zoo's registry models (reference
# models included) exported by examples/onnx:export at batch 2, each with its
# example inputs and Loom's CPU outputs, then runs the ONNX checker on them
# (Debian's Python with python3-onnx; LOOM_PYTHON names another). Copy DIR to a
# host with onnxruntime and run `python3 tools/onnx_check.py DIR` there to
# compare ONNX Runtime's outputs with Loom's (docs/onnx.md).
#
# usage: bash tools/onnx_zoo.sh DIR [export flags, e.g. --max-mb 100000 --fold-bn]
#
# By default DIR stays under 40 MB: models with more than 15 MB of weights are
# skipped (each is named; --max-mb raises the limit: all of them take 1.5 GB,
# the two ImageNet VGGs 0.5 GB each), and ImageNet models are traced on 64 x 64
# images (their pools are adaptive; the file then takes 64 x 64 images).
set -euo pipefail
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
dir=$(realpath -m "$1")
shift
cd "$(dirname "$0")/.."
bazel build --config=cpu //examples/onnx:export
mkdir -p "$dir"
rm -f "$dir"/*.onnx "$dir"/*.safetensors  # a previous run's models would be checked again
bazel-bin/examples/onnx/export --zoo "$dir" --max-image-size 64 --max-mb 15 "$@"
"${LOOM_PYTHON:-/usr/bin/python3}" tools/onnx_check.py "$dir"  # Debian's, with python3-onnx
echo "onnx_zoo: $(du -sh "$dir" | cut -f1) in $dir"
