#!/usr/bin/env bash
# Installs Loom into a temporary prefix (tools/install.sh) and builds the
# out-of-tree program tests/install/hello_loom against it twice: with g++ and
# pkg-config, and with CMake's find_package(Loom). Runs each and checks that it
# trained: three "step N loss X" lines, the loss finite and falling.
# With --bazel (first), also builds it with Bazel in a workspace of its own that
# uses this checkout as a local_repository (tests/install/bazel_workspace): a
# second, CPU-only build of Loom, so several minutes; tools/test.sh passes it
# when LOOM_TEST_BAZEL_WORKSPACE=1.
# Prints one "PASS name" or "FAIL name" line per check (tools/test.sh counts
# them) and exits 1 if any failed. Other arguments go to tools/install.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

bazel_workspace=0
if [ "${1:-}" = --bazel ]; then
  bazel_workspace=1
  shift
fi
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

# The workspace's Bazel server gets an output base in $work, stopped afterwards.
with_local_repository() {
  local ws="$work/workspace"
  cp -r tests/install/bazel_workspace "$ws"
  sed "s|@LOOM@|$PWD|g" "$ws/WORKSPACE.in" > "$ws/WORKSPACE"
  sed "s|@LOOM@|$PWD|g" "$ws/bazelrc.in" > "$ws/.bazelrc"
  mv "$ws/app/BUILD.in" "$ws/app/BUILD"
  cp "$source_dir/main.cc" "$ws/app/main.cc"
  (cd "$ws" && bazel --output_base="$work/output_base" build --config=cpu //app:hello &&
   trained "$(bazel --output_base="$work/output_base" info --config=cpu bazel-bin)/app/hello")
  local result=$?
  (cd "$ws" && bazel --output_base="$work/output_base" shutdown)
  chmod -R u+w "$work/output_base"
  return $result
}

if [ $bazel_workspace -eq 1 ]; then
  report local_repository with_local_repository
fi
[ $failures -eq 0 ]
