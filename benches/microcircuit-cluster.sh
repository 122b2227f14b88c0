#!/usr/bin/env bash
# The microcircuit on 1, 2, 3, 4 nodes of the Docker cluster (`hpc cluster`;
# one rank per node, one thread per rank, started by `srun --mpi=pmix`)
# beside the scaling model of the book's microcircuit chapter,
#
#   T(n) = C / n + S (alpha log2(n) + beta B(n))   seconds per biological second,
#
# (c = 1 core per node here), with
#   C      = U N_steps + D E: the update time per biological second of the 1-node run
#            (neuron updates and synaptic events together, as the model's compute term),
#   S      = exchanges per biological second (10^4 for this model),
#   alpha  = the half round trip of 8 bytes between two nodes (`hpc perftest send_lat`,
#            tcp backend, as benches/cluster-latency.sh measures it), measured here,
#   beta   = seconds per byte from the same ping-pong at 1 MiB,
#   B(n)   = bytes a rank receives per exchange; the prediction for the allgather is
#            4 bytes per spike of the 1-node run (every rank receives every spike).
#
# Per run: wall time per biological second of the simulate phase (T), the update
# and the exposed exchange time per biological second (max over ranks; the exchange
# overlaps the update, what is left is the time spent waiting on it), all with the
# warm-up included, and the bytes received per rank per exchange: rank 0 (which
# receives every spike for the output) and the largest of the others.
#
# Every "node" is a container on this one machine: all of them share its cores, so
# the compute term does not shrink with n here, and with more ranks than free cores
# the exchange waits on the scheduler. The comparison checks the volume B(n) and
# that the exchange's per-step cost, not its volume, grows with n; it cannot check
# C / n or the value of alpha (see the book's microcircuit chapter).
#
# Usage: benches/microcircuit-cluster.sh [--nodes "1 2 3 4"] [--n-scaling 0.1]
#            [--k-scaling 0.1] [--t-sim 1000] [--exchanges "allgather alltoallv"]
#            [--engine inline] [--rounds 2]
#   KEEP=1 leaves the cluster up afterwards (it is taken down otherwise).
#   HPC_CLUSTER_NAME / HPC_CLUSTER_DIR: the cluster's name and work directory
#   (default hpc-mc-bench, <target>/cluster-mc-bench: beside the tests' clusters).
set -euo pipefail
cd "$(dirname "$0")/.."
nodes="1 2 3 4" n_scaling=0.1 k_scaling=0.1 t_sim=1000 t_presim=100
exchanges="allgather alltoallv" engine=inline rounds=2
# A flag given last without its value is named (it was "$2: unbound variable").
need() { [ $# -ge 2 ] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) need "$@"; nodes=$2; shift 2 ;;
        --n-scaling) need "$@"; n_scaling=$2; shift 2 ;;
        --k-scaling) need "$@"; k_scaling=$2; shift 2 ;;
        --t-sim) need "$@"; t_sim=$2; shift 2 ;;
        --exchanges) need "$@"; exchanges=$2; shift 2 ;;
        --engine) need "$@"; engine=$2; shift 2 ;;
        --rounds) need "$@"; rounds=$2; shift 2 ;;
        -h|--help) sed -n "2,35p" "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
# shellcheck source=benches/cluster-bench.sh
. benches/cluster-bench.sh  # (the working directory is the repository root)
check_nodes "$nodes" 2  # alpha is measured between two

: "${CARGO_TARGET_DIR:=target}"
bin="$(readlink -f "$CARGO_TARGET_DIR")/release"
cargo build --release -q -p hpc-example-microcircuit -p hpc-cli \
    --features hpc-example-microcircuit/mpi,hpc-cli/mpi,hpc-cli/ofi
bench_cluster mc

# alpha and beta: the median half round trip between node1 and node2, best of 3.
lat() { # size iterations -> microseconds
    cluster exec srun --mpi=pmix -N 2 -n 2 hpc perftest send_lat --backend tcp -s "$1" -n "$2" 2>/dev/null |
        awk -v s="$1" '$1 == s && NF >= 8 { print $5 }'
}
best() { awk "NF" | sort -g | head -1; }
alpha_us=$( (lat 8 20000; lat 8 20000; lat 8 20000) | best)
mib_us=$( (lat 1048576 100; lat 1048576 100; lat 1048576 100) | best)
[ -n "$alpha_us" ] && [ -n "$mib_us" ] || { echo "the ping-pong between two nodes failed" >&2; exit 1; }

run() { # nodes exchange dir
    rm -rf "${shared:?}/$3"
    cluster exec --timeout 3600 env HPC_TIMEOUT=300 srun --mpi=pmix -N "$1" -n "$1" --ntasks-per-node=1 \
        microcircuit --n-scaling "$n_scaling" --k-scaling "$k_scaling" --t-presim "$t_presim" \
        --t-sim "$t_sim" --threads 1 --no-pin --exchange "$2" --engine "$engine" \
        --out "/shared/$3" --quiet --no-plot --no-spikes >"$shared/$3.log" 2>&1
}

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
echo "microcircuit N_scaling $n_scaling K_scaling $k_scaling, t_sim $t_sim ms after $t_presim ms warm-up, Poisson input, 1 rank x 1 thread per node, engine $engine, rounds $rounds"
printf 'alpha = %.2f us (8 B half round trip, tcp backend), beta = %.3f ns/B (1 MiB: %.0f us)\n' \
    "$alpha_us" "$(awk -v t="$mib_us" 'BEGIN { print t * 1000 / 1048576 }')" "$mib_us"
results=$shared/results.jsonl
: >"$results"
r=1
while [ "$r" -le "$rounds" ]; do
    for ex in $exchanges; do
        for n in $nodes; do
            dir=r$r-$ex-n$n
            if run "$n" "$ex" "$dir"; then
                python3 - "$shared/$dir/summary.json" "$n" "$ex" "$r" >>"$results" <<'PY'
import json, sys
f, n, ex, r = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = json.load(open(f))
p = s["params"]
ranks = s["ranks_report"]
bio_rec = p["t_sim"] / 1000.0
bio_all = (p["t_sim"] + p["t_presim"]) / 1000.0
exchanges = bio_all * 1000.0 / (p["dt"] * ranks[0]["interval_steps"])
print(json.dumps({
    "nodes": n, "exchange": ex, "round": r,
    "t": s["simulate_s"] / bio_all,
    "update": max(x["update_s"] for x in ranks) / bio_all,
    "comm": max(x["communicate_s"] for x in ranks) / bio_all,
    "spikes": s["stats"]["spikes_total"],
    "exchanges_per_s": exchanges / bio_all,
    "b0": s["bytes_received_per_rank"][0] / exchanges,
    "bmax": max(s["bytes_received_per_rank"][1:] or [0]) / exchanges,
    "bio_all": bio_all,
}))
PY
            else
                echo "$n node(s), $ex: failed" >&2
                tail -5 "$shared/$dir.log" >&2
            fi
        done
    done
    r=$((r + 1))
done

python3 - "$results" "$alpha_us" "$mib_us" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
alpha = float(sys.argv[2]) * 1e-6
beta = float(sys.argv[3]) * 1e-6 / 1048576
one = [x for x in rows if x["nodes"] == 1]
if not one:
    sys.exit("no 1-node run: the model's compute term C is measured there")
C = min(x["update"] for x in one)
# The allgather's volume: every spike of the 1-node run, 4 bytes each, per exchange.
one_ex = one[0]
B_all = 4 * one_ex["spikes"] / (one_ex["exchanges_per_s"] * one_ex["bio_all"])
S = one_ex["exchanges_per_s"]
print(f"C = {C:.3f} s per biological second (update of the 1-node run, best round), "
      f"S = {S:.0f} exchanges per biological second")
print(f"{'nodes':>5} {'exchange':<9} {'T':>7} {'model':>7} {'update':>7} {'C/n':>7} "
      f"{'exch.':>7} {'S a log2n':>9} {'B rank0':>8} {'B other':>8} {'B model':>8}")
for x in sorted(rows, key=lambda x: (x["exchange"], x["nodes"], x["round"])):
    n = x["nodes"]
    lat = S * alpha * math.log2(n)
    bmodel = B_all if x["exchange"] == "allgather" or n == 1 else float("nan")
    vol = S * beta * (x["bmax"] if n > 1 else 0.0)
    model = C / n + lat + vol
    bm = f"{bmodel:8.2f}" if bmodel == bmodel else f"{'<= ' + format(B_all, '.1f'):>8}"
    print(f"{n:>5} {x['exchange']:<9} {x['t']:>7.3f} {model:>7.3f} {x['update']:>7.3f} "
          f"{C / n:>7.3f} {x['comm']:>7.3f} {lat:>9.3f} {x['b0']:>8.2f} {x['bmax']:>8.2f} {bm}")
print("T, update, exch.: measured seconds per biological second, warm-up included (T: the simulate")
print("phase; update and exposed exchange: max over ranks); model = C/n + S alpha log2(n) + S beta B(n);")
print("B: bytes received per rank per exchange (rank 0, the largest other rank, and the")
print("allgather's prediction: every spike of the 1-node run, 4 bytes each).")
PY
