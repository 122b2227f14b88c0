#!/bin/sh
# Transport benchmark: hpc-rdma side by side with its references, in one run.
#   shm 8-byte half round trip   vs Open MPI shared memory (vader) ping-pong
#                                (put, send/recv, send/recv into a reused buffer),
#                                and send/recv at 64 B, 4 KiB, 64 KiB vs the same,
#                                alternating round by round (median [min-max])
#   shm 1 MiB put bandwidth      vs one-thread memcpy of 1 MiB (same process, same run)
#   tcp 1 MiB put bandwidth      vs a plain socket stream, both between two network
#                                namespaces joined by a veth pair (root only)
# Usage: benches/transport.sh [iterations] [--latency-only] [--rounds N]
#   (default 100000 latency round trips, 5 rounds; --latency-only skips the
#   bandwidth rows)
set -eu
cd "$(dirname "$0")/.."
ITERS="${1:-100000}"
[ $# -gt 0 ] && shift
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
if command -v mpicc >/dev/null 2>&1; then
    cargo build --release -q -p hpc-benches --features mpi --bin transport --bin mpi_pingpong
    MPI="--mpi-pingpong $CARGO_TARGET_DIR/release/mpi_pingpong"
else
    echo "no MPI installed: the Open MPI reference is skipped" >&2
    cargo build --release -q -p hpc-benches --bin transport
    MPI=""
fi
if [ "$(id -u)" != 0 ]; then
    echo "not root: the tcp row across network namespaces is skipped" >&2
fi
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
# shellcheck disable=SC2086
"$CARGO_TARGET_DIR/release/transport" --iters "$ITERS" $MPI "$@"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
