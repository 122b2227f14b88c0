#!/bin/sh
# Overlap of non-blocking collectives with computation (OSU's method, the figure of
# MVAPICH2-DPU): hpc-collectives' Inline, Thread and Proxy engines through `hpc run`,
# then the MPI library's own MPI_I* collectives (Debian Open MPI) through mpirun, in
# one run on the same machine.
# Usage: benches/overlap.sh [iterations] [ranks]   (defaults: 100, 2)
set -eu
cd "$(dirname "$0")/.."
ITERS="${1:-100}"
N="${2:-2}"
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
BIN="$CARGO_TARGET_DIR/release"
if command -v mpirun.openmpi >/dev/null 2>&1; then
    cargo build --release -q -p hpc-benches --features mpi --bin overlap
    cargo build --release -q -p hpc-cli
    MPI=1
else
    echo "no Open MPI installed: the MPI_I* reference is skipped" >&2
    cargo build --release -q -p hpc-benches --bin overlap
    cargo build --release -q -p hpc-cli
    MPI=0
fi
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
"$BIN/hpc" run -n "$N" -- "$BIN/overlap" --iters "$ITERS"
if [ "$MPI" = 1 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun.openmpi --oversubscribe --bind-to none -n "$N" \
        "$BIN/overlap" --engine mpi --iters "$ITERS" | grep -v '^# overlap\|^engine'
fi
