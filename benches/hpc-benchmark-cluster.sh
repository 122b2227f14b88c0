#!/usr/bin/env bash
# Weak scaling of NEST's hpc_benchmark on 1, 2, 3, 4 nodes of the Docker cluster
# (`hpc cluster`; one rank per node, one thread per rank, started by
# `srun --mpi=pmix`): the network grows with the ranks, scale = S x n on n nodes
# (S x 11,250 neurons per rank, each with 11,250 inputs whatever the scale, so the
# synapses per rank stay fixed), beside the book's memory and volume model
# (book/src/plasticity.md, "Weak scaling"):
#
#   B(n)   = bytes a rank receives per exchange; the allgather's prediction is
#            4 bytes per spike of the whole network, i.e. of the one-node run
#            at the same total scale (every rank receives every spike),
#   M(n)   = peak memory per rank, flat in n where nothing per rank grows with
#            the whole network's N.
#
# For each n > 1 the same total scale also runs as one rank on one node: the spike
# files (spikes.spk, by SHA-256) and the E->E weight digests must be identical, or
# the script exits 1 after the table.
#
# Per run: wall time per biological second of the simulate phase (T), the update
# (simulate minus exchange) and the exchange time per biological second (max over
# ranks), all with the warm-up included; the bytes received per rank per exchange
# (max over ranks) and the prediction; the peak resident memory (max over ranks).
#
# Every "node" is a container on this one machine: all of them share its cores, so
# the update time per rank does not stay flat as it would on real nodes; the
# volume B(n) and the memory per rank are what this run checks.
#
# Usage: benches/hpc-benchmark-cluster.sh [--nodes "1 2 3 4"] [--scale 0.1]
#            [--t-sim 100] [--t-presim 20] [--seed 1]
#   --scale is per node (per rank): n nodes run scale n x S.
#   KEEP=1 leaves the cluster up afterwards (it is taken down otherwise).
#   HPC_CLUSTER_NAME / HPC_CLUSTER_DIR: the cluster's name and work directory
#   (default hpc-hb-bench, <target>/cluster-hb-bench: beside the tests' clusters).
set -euo pipefail
cd "$(dirname "$0")/.."
nodes="1 2 3 4" scale=0.1 t_sim=100 t_presim=20 seed=1
# A flag given last without its value is named (it was "$2: unbound variable").
need() { [ $# -ge 2 ] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) need "$@"; nodes=$2; shift 2 ;;
        --scale) need "$@"; scale=$2; shift 2 ;;
        --t-sim) need "$@"; t_sim=$2; shift 2 ;;
        --t-presim) need "$@"; t_presim=$2; shift 2 ;;
        --seed) need "$@"; seed=$2; shift 2 ;;
        -h|--help) sed -n "2,33p" "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# shellcheck source=benches/cluster-bench.sh
. benches/cluster-bench.sh  # (the working directory is the repository root)
check_nodes "$nodes" 1
for v in "--scale $scale" "--t-sim $t_sim" "--t-presim $t_presim"; do
    awk -v x="${v#* }" 'BEGIN { exit !(x + 0 == x && x > 0) }' ||
        { echo "${v% *}: ${v#* } is not a positive number" >&2; exit 2; }
done

: "${CARGO_TARGET_DIR:=target}"
bin="$(readlink -f "$CARGO_TARGET_DIR")/release"
cargo build --release -q -p hpc-example-hpc-benchmark -p hpc-cli \
    --features hpc-example-hpc-benchmark/mpi,hpc-cli/mpi,hpc-cli/ofi
bench_cluster hb

run_once() { # nodes scale dir
    rm -rf "${shared:?}/$3"
    cluster exec --timeout 3600 env HPC_TIMEOUT=600 srun --mpi=pmix -N "$1" -n "$1" --ntasks-per-node=1 \
        hpc_benchmark --scale "$2" --t-presim "$t_presim" --t-sim "$t_sim" --seed "$seed" \
        --threads 1 --no-pin --out "/shared/$3" --quiet --no-plot >"$shared/$3.log" 2>&1
}
# A failed run is said and kept (DIR.log.failed), then run once more: a rank of the
# MPI build has been seen to die in its start-up on the cluster, once in several runs.
run() {
    run_once "$@" && return 0
    echo "$1 node(s), scale $2: failed, once more (log: $shared/$3.log.failed)" >&2
    tail -n 3 "$shared/$3.log" >&2
    mv "$shared/$3.log" "$shared/$3.log.failed"
    run_once "$@"
}

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
echo "hpc_benchmark scale $scale per node, t_sim $t_sim ms after $t_presim ms warm-up, seed $seed, 1 rank x 1 thread per node"
results=$shared/results.jsonl
: >"$results"
for n in $nodes; do
    total=$(awk -v s="$scale" -v n="$n" 'BEGIN { print s * n }')
    ok=1
    run "$n" "$total" "weak-n$n" || ok=0
    if [ "$ok" = 1 ] && [ "$n" -gt 1 ]; then run 1 "$total" "one-n$n" || ok=0; fi
    if [ "$ok" = 0 ]; then
        echo "$n node(s), scale $total: failed" >&2
        tail -n 5 "$shared"/*-n"$n".log >&2
        exit 1
    fi
    ref=one-n$n
    [ "$n" -gt 1 ] || ref=weak-n1
    python3 - "$shared" "$n" "$ref" >>"$results" <<'PY'
import hashlib, json, sys
shared, n, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(d):
    s = json.load(open(f"{shared}/{d}/summary.json"))
    h = hashlib.sha256(open(f"{shared}/{d}/spikes.spk", "rb").read()).hexdigest()
    return s, h
s, h = load(f"weak-n{n}")
o, ho = load(ref)
p = s["params"]
bio = (p["t_sim"] + p["t_presim"]) / 1000.0
exchanges = -(-round(bio * 1000.0 / p["dt"]) // s["interval_steps"])
ranks = s["ranks_report"]
print(json.dumps({
    "nodes": n, "scale": p["scale"], "neurons": s["neurons"], "synapses": s["synapses"],
    "t": s["simulate_s"] / bio,
    "update": max(r["simulate_s"] - r["communicate_s"] for r in ranks) / bio,
    "comm": max(r["communicate_s"] for r in ranks) / bio,
    "bmax": max(s["bytes_received_per_rank"]) / exchanges,
    # The allgather: every spike of the network, 4 bytes, to every rank.
    "bpred": max(o["bytes_received_per_rank"]) / exchanges,
    "rss": max(s["peak_rss_bytes"]), "rss_min": min(s["peak_rss_bytes"]),
    "rss_one": max(o["peak_rss_bytes"]),
    "bytes_per_synapse": s["bytes_per_synapse"],
    "same": h == ho and s["weights"]["digest"] == o["weights"]["digest"],
    "spikes": h[:12], "weights": s["weights"]["digest"],
}))
PY
done

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'nodes':>5} {'scale':>6} {'neurons':>8} {'synapses':>11} {'T':>7} {'update':>7} "
      f"{'exch.':>7} {'B max':>8} {'B pred':>8} {'RSS MiB':>13} {'1 rank':>7} {'B/syn':>6} {'same':>4}")
for x in rows:
    print(f"{x['nodes']:>5} {x['scale']:>6g} {x['neurons']:>8} {x['synapses']:>11} {x['t']:>7.2f} "
          f"{x['update']:>7.2f} {x['comm']:>7.2f} {x['bmax']:>8.1f} {x['bpred']:>8.1f} "
          f"{x['rss_min'] / 2**20:>6.1f}-{x['rss'] / 2**20:<6.1f} {x['rss_one'] / 2**20:>7.1f} {x['bytes_per_synapse']:>6.2f} {'yes' if x['same'] else 'NO':>4}")
print("T, update, exch.: seconds per biological second, warm-up included (T: the simulate phase;")
print("update = simulate - exchange and exchange: max over ranks); B: bytes received per rank per")
print("exchange (max over ranks) and the allgather's prediction (every spike of the one-rank run at")
print("the same scale, 4 bytes each); RSS: peak resident memory per rank (least-most; the ranks")
print("holding excitatory neurons only hold the most), 1 rank: the one-rank run's at the same scale;")
print("B/syn: bytes a synapse with its plastic state; same: spikes.spk and the weight digest equal")
print("to the one-rank run's.")
bad = [x["nodes"] for x in rows if not x["same"]]
if bad:
    sys.exit(f"spikes or weights differ from one rank at the same scale for {bad} node(s)")
PY
