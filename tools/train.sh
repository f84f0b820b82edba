#!/usr/bin/env bash
# Installs what is missing, then runs Loom's main job: the MNIST-format trainer
# (mnist_net on Fashion-MNIST, Adam 1e-3, batch 128, 5 epochs; on the GPU when
# one is usable, else on the CPU). Extra arguments go to the trainer (--help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel run -c opt //examples/mnist:train -- "$@"
