#!/usr/bin/env bash
# Installs Loom into a temporary prefix (tools/install.sh) and builds the
# out-of-tree program tests/install/hello_loom against it twice: with g++ and
# pkg-config, and with CMake's find_package(Loom). Runs each and checks that it
# trained: three "step N loss X" lines, the loss finite and falling.
# Prints one "PASS name" or "FAIL name" line per check (tools/test.sh counts
# them) and exits 1 if any failed. Extra arguments go to tools/install.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
source_dir="$PWD/tests/install/hello_loom"
failures=0

report() {  # name, then the command that passes
  local name=$1
  shift
  if "$@" > "$work/$name.log" 2>&1; then
    echo "PASS $name"
  else
    echo "FAIL $name"
    tail -n 30 "$work/$name.log"
    failures=$((failures + 1))
  fi
}

# hello_loom's output: 3 steps, each loss finite and below the one before.
trained() {
  "$1" | tee /dev/stderr | awk '
    $1 == "step" && $3 == "loss" && $4 + 0 == $4 && $4 < 1e30 {
      if (n > 0 && $4 >= last) bad = 1
      last = $4; n++
    }
    END { exit (n == 3 && !bad) ? 0 : 1 }'
}

with_pkg_config() {
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  pkg-config --exists loom &&
  g++ -std=c++20 -O1 "$source_dir/main.cc" -o "$work/hello_pc" $(pkg-config --cflags --libs loom) &&
  trained "$work/hello_pc"
}

with_cmake() {
  cmake -S "$source_dir" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$work/cmake" &&
  trained "$work/cmake/hello_loom"
}

if bash tools/install.sh --prefix "$prefix" "$@" > "$work/install.log" 2>&1; then
  echo "PASS install"
  report pkg_config with_pkg_config
  report cmake with_cmake
else
  echo "FAIL install"
  tail -n 30 "$work/install.log"
  failures=$((failures + 1))
fi
[ $failures -eq 0 ]
