#!/usr/bin/env bash
# What offload buys, across nodes: benches/offload.sh's two tables (the rank CPU
# per collective of every engine, benches/offload-cpu.sh, and the time per
# distributed 3-D FFT, benches/fft3d.sh) on 2 and 4 nodes of the Docker cluster
# (`hpc cluster`), every run started by `srun --mpi=pmix`, one
# rank per node by default. Each node's proxy carries its rank's steps to the
# other nodes' proxies (tcp between the containers); Open MPI's MPI_I* run on the
# same nodes.
#
# Every "node" is a container on this one machine: all of them share its cores
# (2 on the development machine), so a node's proxy never has a core of its own
# and the ranks of the other nodes compete with it. Say so beside the numbers.
#
# Usage: benches/offload-cluster.sh [--nodes "2 4"] [--per-node 1]
#            [--iters 20] [--sizes BYTES,...] [--fft-n 64] [--fft-reps 5]
#   ROUNDS (default 1) as in the two scripts; KEEP=1 leaves the cluster up
#   afterwards, and uses one of that name that is up already.
#   HPC_CLUSTER_NAME / HPC_CLUSTER_DIR: the cluster's name and work directory
#   (default hpc-offload-bench, <target>/cluster-offload-bench).
#   NO_BUILD=1 uses the release binaries already built (they need `--features
#   mpi`: the tasks find each other through PMIx).
set -euo pipefail
cd "$(dirname "$0")/.."
nodes="2 4" per_node=1 iters=20 sizes="4096,65536,1048576,4194304" fft_n=64 fft_reps=5
# A flag given last without its value is named (it was "$2: unbound variable").
need() { [ $# -ge 2 ] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) need "$@"; nodes=$2; shift 2 ;;
        --per-node) need "$@"; per_node=$2; shift 2 ;;
        --iters) need "$@"; iters=$2; shift 2 ;;
        --sizes) need "$@"; sizes=$2; shift 2 ;;
        --fft-n) need "$@"; fft_n=$2; shift 2 ;;
        --fft-reps) need "$@"; fft_reps=$2; shift 2 ;;
        -h|--help) sed -n "2,20p" "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# shellcheck source=benches/cluster-bench.sh
. benches/cluster-bench.sh  # (the working directory is the repository root)
check_nodes "$nodes" 1

: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
bin="$(readlink -f "$CARGO_TARGET_DIR")/release"
if [ "${NO_BUILD:-0}" != 1 ]; then
    cargo build --release -q -p hpc-cli -p hpc-benches -p hpc-example-fft3d \
        --features hpc-benches/mpi,hpc-example-fft3d/mpi
fi
bench_cluster offload reuse

export NO_BUILD=1 BIN=/opt/hpc/bin ROUNDS="${ROUNDS:-1}"
for n in $nodes; do
    ranks=$((n * per_node))
    export LAUNCH="$bin/hpc cluster exec srun --mpi=pmix -N $n -n $ranks"
    echo "## $n nodes ($HPC_CLUSTER_NAME, containers on one host of $(nproc) cores), $ranks ranks"
    echo "### Rank CPU per collective (benches/offload-cpu.sh)"
    EXTRA="--sizes $sizes" benches/offload-cpu.sh "$iters" "$ranks"
    echo
    echo "### Time per 3-D FFT (benches/fft3d.sh)"
    benches/fft3d.sh "$fft_n" "$ranks" "$fft_reps"
    echo
done
