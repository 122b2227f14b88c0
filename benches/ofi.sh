#!/bin/sh
# The transport's libfabric backend beside libfabric's own ping-pong and Open MPI over
# the same provider, in one run: for each provider (shm, tcp;ofi_rxm) and size (8 B,
# 64 KiB, 1 MiB) the three are run one after the other, ROUNDS times, and the best
# round of each is printed.
#   ours     hpc run -n 2 -- hpc perftest send_lat --backend ofi  (median; mean)
#   libfabric fi_pingpong -e rdm -m tagged -p PROVIDER              (mean, usec/xfer)
#   Open MPI mpirun --mca pml cm --mca mtl ofi                      (median; where the
#            OFI MTL initialises with the provider)
# All are half round trips in microseconds. fabtests' fi_rma_bw is not packaged by
# Debian, so there is no RMA reference.
# Usage: benches/ofi.sh [rounds]   (default 3)
set -eu
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
BIN="$CARGO_TARGET_DIR/release"
cargo build --release -q -p hpc-cli --features ofi
command -v fi_pingpong >/dev/null || { echo "fi_pingpong missing: apt-get install libfabric-bin" >&2; exit 1; }
MPIRUN=""
if command -v mpirun.openmpi >/dev/null 2>&1; then
    cargo build --release -q -p hpc-benches --features mpi --bin mpi_pingpong
    MPIRUN=mpirun.openmpi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
iters() { case "$1" in 8) echo 20000 ;; 65536) echo 2000 ;; *) echo 300 ;; esac; }

ours() { # provider size -> "median mean"
    HPC_TRANSPORT=ofi HPC_OFI_PROVIDER="$1" "$BIN/hpc" run -n 2 -- "$BIN/hpc" perftest send_lat \
        --backend ofi -s "$2" -n "$(iters "$2")" 2>/dev/null |
        awk -v s="$2" '$1 == "[0]" && $2 == s { print $6, $7 }'
}
fabric() { # provider size -> mean usec/xfer
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
    timeout 120 fi_pingpong -p "$1" -e rdm -m tagged -B "$port" -S "$2" -I "$(iters "$2")" \
        >/dev/null 2>&1 &
    srv=$!
    sleep 0.3
    timeout 120 fi_pingpong -p "$1" -e rdm -m tagged -P "$port" -S "$2" -I "$(iters "$2")" \
        127.0.0.1 2>/dev/null | awk '$1 == "bytes" { getline; print $7 }'
    wait "$srv" || true
}
ompi() { # provider size -> median
    [ -n "$MPIRUN" ] || return 0
    timeout 120 "$MPIRUN" --oversubscribe -np 2 --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include "$1" "$BIN/mpi_pingpong" "$2" "$(iters "$2")" 2>/dev/null |
        awk '/^mpi_half_rtt_us/ { print $2 }'
}
min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r), $(fi_info --version | head -1)"
printf '%-12s %8s %16s %16s %14s %14s\n' provider size "ours median" "ours mean" "fi_pingpong" "Open MPI"
for prov in shm "tcp;ofi_rxm"; do
    for size in 8 65536 1048576; do
        om=""; oa=""; fp=""; mp=""
        r=0
        while [ "$r" -lt "$ROUNDS" ]; do
            set -- $(ours "$prov" "$size")
            om=$(min "$om" "${1:-}"); oa=$(min "$oa" "${2:-}")
            fp=$(min "$fp" "$(fabric "$prov" "$size")")
            mp=$(min "$mp" "$(ompi "$prov" "$size")")
            r=$((r + 1))
        done
        printf '%-12s %8s %13s us %13s us %11s us %11s us\n' "$prov" "$size" \
            "${om:-n/a}" "${oa:-n/a}" "${fp:-n/a}" "${mp:-n/a}"
    done
done
