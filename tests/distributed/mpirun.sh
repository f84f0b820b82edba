#!/usr/bin/env bash
# Runs a program as N ranks on this host under Open MPI (Debian's openmpi-bin;
# on the GPU host, the bundle's unpacked copy):
#   tests/distributed/mpirun.sh N program [args...]
# A hung job is killed after LOOM_MPI_TEST_TIMEOUT seconds (default 240).
set -euo pipefail
n=$1
shift
# Debian's mpirun is an alternatives link; where Open MPI's files were unpacked
# without dpkg (the GPU host) only orterun, its real name, is there.
mpirun=$(command -v mpirun || command -v orterun || echo /usr/bin/orterun)
# More ranks than cores is fine for tests; root needs Open MPI's explicit consent.
flags=(-np "$n" --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || flags+=(--allow-run-as-root)
# The ranks get the launcher's library path, and NVLink multicast stays off
# on multi-GPU hosts (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0
for name in LD_LIBRARY_PATH NCCL_NVLS_ENABLE LOOM_DISTRIBUTED_TEST_DEVICE LOOM_TEST_DEVICE; do
  [ -z "${!name:-}" ] || flags+=(-x "$name")
done
# Shared memory between local ranks; the single-copy mechanism (CMA, ptrace)
# is refused inside most containers, so it is off.
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Under the sanitizer build (tools/test.sh with LOOM_ASAN=1) LeakSanitizer
# reports Open MPI's own allocations at exit, many from plugins it has already
# unloaded, so no suppression can name them and every rank would fail. Leak
# detection is off for the ranks; ASan's memory-error checks stay on.
if [ -n "${ASAN_OPTIONS:-}" ]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS}:detect_leaks=0"
fi
exec timeout "${LOOM_MPI_TEST_TIMEOUT:-240}" "$mpirun" "${flags[@]}" "$@"
