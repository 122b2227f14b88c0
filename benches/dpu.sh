#!/bin/sh
# The Proxy engine placed as on a DPU against its host placement: 8 ranks,
# ialltoall and iallreduce at 4 KiB, 64 KiB and 1 MiB per block (collcost:
# zero-copy `scope` + `i<collective>` + `wait`, back to back), the two
# placements alternated (host dpu dpu-reg, then the other way round) so that
# the machine's drift weighs on all. dpu-reg: DPU placement with the buffers
# from Comm::registered_buf (collcost --registered), which the proxy gets and
# puts in place; dpu: ordinary buffers, staged through registered memory. Every collective goes to the proxy in both placements
# (HPC_PROXY_MIN=0; by default host placement keeps blocks under 512 KiB on the
# ranks of a node without a core for the proxy).
# Usage: benches/dpu.sh [rounds] [ranks]   (defaults: 2 rounds, 8 ranks;
#   BATCH, BATCHES: collcost's --batch and --batches, default 5 and 6)
# Needs: cargo build --release -p hpc-benches --bin collcost, and an `hpc`
#   launcher (HPC=path, else target/release/hpc, else target/debug/hpc: the
#   launcher's build does not matter, the ranks and the proxy are collcost).
set -eu
R="${1:-2}"
N="${2:-8}"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T="${CARGO_TARGET_DIR:-$ROOT/target}"
C="$T/release/collcost"
[ -x "$C" ] || { echo "no $C: cargo build --release -p hpc-benches --bin collcost" >&2; exit 2; }
if [ -z "${HPC:-}" ]; then
    HPC="$T/release/hpc"
    [ -x "$HPC" ] || HPC="$T/debug/hpc"
fi
[ -x "$HPC" ] || { echo "no hpc launcher: cargo build -p hpc-cli" >&2; exit 2; }
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r); $C"
# placement ROUND P: one round of placement P.
placement() {
    p=$2
    echo "# round $1, placement $p"
    reg=""
    place=$p
    if [ "$p" = dpu-reg ]; then reg="--registered"; place=dpu; fi
    # shellcheck disable=SC2086
    HPC_COLL_PROXY_PLACEMENT=$place HPC_PROXY_MIN=0 HPC_TIMEOUT=120 \
        "$HPC" run -n "$N" -- "$C" --engine proxy \
        --colls alltoall,allreduce --sizes 4096,65536,1048576 \
        --batch "${BATCH:-5}" --batches "${BATCHES:-6}" $reg | sed "s/^/$p /"
}
. "$ROOT/benches/abba.sh"
abba "$R" placement host dpu dpu-reg
