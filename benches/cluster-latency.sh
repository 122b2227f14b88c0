#!/bin/sh
# Send/recv half round trip across two nodes of the Docker cluster
# (containers/cluster/cluster.sh): hpc perftest send_lat over our tcp backend and over
# the ofi backend (libfabric's tcp;ofi_rxm), against Open MPI's ping-pong
# (mpi_pingpong under the same srun --mpi=pmix), over the same network, in one run.
# The three alternate, ROUNDS rounds per size; each figure is the median half round
# trip of one run (perftest's t_typical, mpi_pingpong's median), and the table gives
# the median of the rounds with the ratio to Open MPI's.
#
# Usage: benches/cluster-latency.sh [rounds]   (default 3)
# Needs Docker, mmdebstrap (first run) and release binaries built with MPI and
# libfabric: cargo build --release -p hpc-cli --features mpi,ofi
#            cargo build --release -p hpc-benches --features mpi --bin mpi_pingpong
# Brings the cluster up with two compute nodes (HPC_CLUSTER_NAME, default
# hpc-bench-lat) and takes it down at the end.
set -eu
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
: "${CARGO_TARGET_DIR:=target}"
BIN="$CARGO_TARGET_DIR/release"
: "${HPC_CLUSTER_NAME:=hpc-bench-lat}"
export HPC_CLUSTER_NAME
for b in hpc mpi_pingpong; do
    [ -x "$BIN/$b" ] || { echo "no $BIN/$b: see the build commands at the top of $0" >&2; exit 1; }
done
C="bash containers/cluster/cluster.sh"
$C up --nodes 2 --bin "$BIN" >&2
trap '$C down >&2' EXIT
iters() { case "$1" in 8) echo 20000 ;; 65536) echo 2000 ;; 1048576) echo 300 ;; *) echo 30 ;; esac; }

ours() { # backend size -> median half round trip (us)
    $C exec env HPC_TRANSPORT="$1" HPC_OFI_PROVIDER="tcp;ofi_rxm" \
        srun --mpi=pmix -N 2 -n 2 hpc perftest send_lat --backend "$1" -s "$2" -n "$(iters "$2")" \
        2>/dev/null | awk -v s="$2" '$1 == s { print $5 }'
}
ompi() { # size -> median half round trip (us)
    $C exec srun --mpi=pmix -N 2 -n 2 mpi_pingpong "$1" "$(iters "$1")" 2>/dev/null |
        awk '$1 == "mpi_half_rtt_us" { print $2 }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else print v[int((NR + 1) / 2)] }'; }

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); 2 nodes of the Docker cluster, $ROUNDS rounds"
printf '%-9s %12s %12s %14s %9s %9s\n' size "tcp (us)" "ofi (us)" "Open MPI (us)" tcp/MPI ofi/MPI
for size in 8 65536 1048576 16777216; do
    t="" o="" m=""
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        t="$t $(ours tcp "$size")"
        o="$o $(ours ofi "$size")"
        m="$m $(ompi "$size")"
        r=$((r + 1))
    done
    tm=$(echo "$t" | tr ' ' '\n' | grep . | median)
    om=$(echo "$o" | tr ' ' '\n' | grep . | median)
    mm=$(echo "$m" | tr ' ' '\n' | grep . | median)
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "-" }'; }
    printf '%-9s %12s %12s %14s %9s %9s\n' "$size" "$tm" "$om" "$mm" "$(ratio "$tm" "$mm")" "$(ratio "$om" "$mm")"
done
