#!/bin/sh
# Two ranks over TCP: hpc-rdma's tcp backend and its ofi backend on tcp;ofi_rxm beside
# Open MPI's TCP (btl tcp) ping-pong, at 8 B, 64 KiB, 1 MiB and 16 MiB, from one run:
# the three alternate ROUNDS times per size and the best round of each is printed
# (median half round trip, microseconds; MB/s = size / half round trip).
# The ranks run on this host over loopback (Open MPI told to use `lo` only: with
# Docker's bridges present its TCP BTL otherwise stalls for minutes), each pinned to
# its own CPU.
# Usage: benches/tcp.sh [rounds]   (default 3)
set -eu
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
BIN="$CARGO_TARGET_DIR/release"
cargo build --release -q -p hpc-cli --features ofi
cargo build --release -q -p hpc-benches --features mpi --bin mpi_pingpong
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
iters() { case "$1" in 8) echo 20000 ;; 65536) echo 2000 ;; 1048576) echo 300 ;; *) echo 40 ;; esac; }
ours() { # backend size -> median
    HPC_OFI_PROVIDER="tcp;ofi_rxm" "$BIN/hpc" run -n 2 -- "$BIN/hpc" perftest send_lat \
        --backend "$1" -s "$2" -n "$(iters "$2")" 2>/dev/null |
        awk -v s="$2" '$1 == "[0]" && $2 == s { print $6 }'
}
ompi() { # size -> median
    timeout 300 mpirun.openmpi --oversubscribe -np 2 --bind-to core --mca btl tcp,self \
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$BIN/mpi_pingpong" "$1" "$(iters "$1")" 2>/dev/null | awk '/^mpi_half_rtt_us/ { print $2 }'
}
min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
printf '%9s %12s %12s %12s %10s %10s\n' size "tcp" "ofi(tcp)" "Open MPI" "tcp/MPI" "ofi/MPI"
for size in 8 65536 1048576 16777216; do
    t=""; o=""; m=""; r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        t=$(min "$t" "$(ours tcp "$size")")
        o=$(min "$o" "$(ours ofi "$size")")
        m=$(min "$m" "$(ompi "$size")")
        r=$((r + 1))
    done
    awk -v s="$size" -v t="$t" -v o="$o" -v m="$m" '
        function us(x) { return x == "" ? "      n/a   " : sprintf("%9.2f us", x) }
        function ratio(a, b) { return (a == "" || b == "") ? "         -" : sprintf("%10.2f", a / b) }
        function bw(x) { return x == "" ? "     n/a   " : sprintf("%6.0f MB/s", s / x / 1.048576) }
        BEGIN {
            printf "%9d %s %s %s %s %s\n", s, us(t), us(o), us(m), ratio(t, m), ratio(o, m)
            if (s >= 1048576) printf "%9s    %s  %s  %s\n", "", bw(t), bw(o), bw(m)
        }'
done
