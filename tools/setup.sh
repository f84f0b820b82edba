#!/usr/bin/env bash
# Installs the Debian packages Loom builds with, if any is missing (needs root or sudo).
# Usage: tools/setup.sh [extra-package ...]
set -euo pipefail

packages=(g++ bazel-bootstrap bazel-rules-java libfmt-dev libspdlog-dev doctest-dev libstb-dev
          zlib1g-dev libdeflate-dev libopenblas-dev libdnnl-dev dataset-fashion-mnist
          openmpi-bin libopenmpi-dev python3-matplotlib python3-onnx cmake pkg-config doxygen "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
$sudo_cmd apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
