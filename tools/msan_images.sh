#!/usr/bin/env bash
# MemorySanitizer check of the image decoders: builds fuzz/msan_image_check.cc
# with data/stb_guard*.cc, data/stb_image.cc and what they use, every one
# instrumented (clang -fsanitize=memory, origins tracked; fmt header-only and
# libstdc++'s string templates instantiated here, not taken from the
# uninstrumented libstdc++.so), and runs it over the image fuzzers' seed and
# regression inputs, the corpora tools/fuzz.sh grew (out/fuzz/<target>/corpus,
# where present), and MSAN_MUTATIONS mutations of each input (default 200).
# Exits non-zero at the first byte of a decoded image that is not initialised.
#
#   bash tools/msan_images.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh clang libclang-rt-14-dev
out=out/msan
mkdir -p "$out"
clang++ -std=c++20 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=memory -fsanitize-memory-track-origins=2 \
  -D_GLIBCXX_ASSERTIONS -DFMT_HEADER_ONLY -I. \
  fuzz/msan_image_check.cc fuzz/structured_input.cc fuzz/image_builders.cc \
  data/stb_guard.cc data/stb_guard_jpeg.cc data/stb_guard_bmp.cc data/stb_guard_png.cc \
  data/stb_image.cc data/file_bytes.cc core/error.cc core/utf8.cc core/input_file.cc \
  -lz -ldeflate -o "$out/msan_image_check"
inputs=()
for target in image png bmp jpeg; do
  for folder in "fuzz/corpus/$target" "fuzz/regressions/$target" "out/fuzz/$target/corpus"; do
    [ -d "$folder" ] && inputs+=("$target:$folder")
  done
done
MSAN_OPTIONS="halt_on_error=1" "$out/msan_image_check" "${MSAN_MUTATIONS:-200}" "${inputs[@]}"
