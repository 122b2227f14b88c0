#!/usr/bin/env bash
# Two ranks on two nodes of the Docker cluster (`hpc cluster`): the tcp
# backend and the ofi backend (tcp;ofi_rxm) of `hpc perftest send_lat` beside Open
# MPI's ping-pong over TCP between the same two containers, at 8 B, 64 KiB, 1 MiB and
# 16 MiB. Each size alternates the three ROUNDS times and prints the best round of
# each (median half round trip in microseconds; MB/s = size / half round trip), with
# the ratio to Open MPI over the same network: its TCP BTL for the tcp backend, its
# OFI MTL on the same provider (tcp;ofi_rxm) for the ofi backend. Every rank is started by `srun --mpi=pmix -N 2 -n 2`.
#
# Usage: benches/cluster-latency.sh [rounds]        (default 3)
#   KEEP=1   leaves the cluster up afterwards (it is taken down otherwise)
#
# The nodes are containers on one host, joined by a Docker bridge (veth pairs), so
# this measures the software path across a real network stack and two network
# namespaces, not a physical wire.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
: "${CARGO_TARGET_DIR:=target}"
BIN="$(readlink -f "$CARGO_TARGET_DIR")/release"
cargo build --release -q -p hpc-cli --features mpi,ofi
cargo build --release -q -p hpc-benches --features mpi --bin mpi_pingpong
export HPC_CACHE_DIR=${HPC_CACHE_DIR:-$(readlink -f "$CARGO_TARGET_DIR")/cluster-cache}
cluster() { "$BIN/hpc" cluster "$@"; }
if [ "${KEEP:-0}" != 1 ]; then trap 'cluster down >/dev/null 2>&1 || true' EXIT; fi
cluster up --nodes 2 --bin "$BIN" >&2

iters() { case "$1" in 8) echo 20000 ;; 65536) echo 2000 ;; 1048576) echo 200 ;; *) echo 30 ;; esac; }
ours() { # backend size -> median half round trip
    cluster exec env HPC_OFI_PROVIDER="tcp;ofi_rxm" srun --mpi=pmix -N 2 -n 2 \
        hpc perftest send_lat --backend "$1" -s "$2" -n "$(iters "$2")" 2>/dev/null |
        awk -v s="$2" '$1 == s && NF >= 8 { print $5 }'
}
ompi() { # size -> median half round trip (TCP BTL on the cluster network only)
    cluster exec env OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=eth0 \
        OMPI_MCA_pml=ob1 srun --mpi=pmix -N 2 -n 2 \
        mpi_pingpong "$1" "$(iters "$1")" 2>/dev/null | awk '/^mpi_half_rtt_us/ { print $2 }'
}
ompi_ofi() { # size -> median half round trip (Open MPI's OFI MTL on tcp;ofi_rxm)
    cluster exec env OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include="tcp;ofi_rxm" \
        FI_PROVIDER="tcp;ofi_rxm" srun --mpi=pmix -N 2 -n 2 \
        mpi_pingpong "$1" "$(iters "$1")" 2>/dev/null | awk '/^mpi_half_rtt_us/ { print $2 }'
}
min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a + 0 <= b + 0) print a; else print b }'; }
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r); 2 nodes, 1 rank each, rounds $ROUNDS"
printf '%9s %12s %12s %12s %12s %10s %10s\n' size "tcp" "ofi" "MPI tcp" "MPI ofi" "tcp/MPI" "ofi/MPI"
for size in 8 65536 1048576 16777216; do
    t=""; o=""; m=""; f=""; r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        t=$(min "$t" "$(ours tcp "$size")")
        o=$(min "$o" "$(ours ofi "$size")")
        m=$(min "$m" "$(ompi "$size")")
        f=$(min "$f" "$(ompi_ofi "$size")")
        r=$((r + 1))
    done
    awk -v s="$size" -v t="$t" -v o="$o" -v m="$m" -v f="$f" '
        function us(x) { return x == "" ? "      n/a   " : sprintf("%9.2f us", x) }
        function ratio(a, b) { return (a == "" || b == "") ? "         -" : sprintf("%10.2f", a / b) }
        function bw(x) { return x == "" ? "     n/a   " : sprintf("%6.0f MB/s", s / x / 1.048576) }
        BEGIN {
            printf "%9d %s %s %s %s %s %s\n", s, us(t), us(o), us(m), us(f), ratio(t, m), ratio(o, f)
            if (s >= 1048576) printf "%9s    %s  %s  %s  %s\n", "", bw(t), bw(o), bw(m), bw(f)
        }'
done
