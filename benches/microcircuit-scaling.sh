#!/usr/bin/env bash
# Volume and memory of the microcircuit's spike exchange for P ranks on one
# machine (a measurement, not a test; with more ranks than cores the machine is
# oversubscribed, so this measures bytes and memory, not speed):
#
#  * strong scaling: the full-scale network over P ranks;
#  * weak scaling: a fixed number of neurons per rank (N_scaling = W * P, capped at
#    1), full in-degrees;
#
# each with the allgather and the targeted alltoallv exchange. Per run: the bytes of
# spikes each rank receives per biological second (rank 0, which receives every
# spike for the output, and the largest and mean over the other ranks), the peak
# memory of the largest rank, and the model's prediction for the alltoallv volume
# (see the book's microcircuit chapter).
#
#   benches/microcircuit-scaling.sh                        # P = 1 2 4 8 16 32 64
#   benches/microcircuit-scaling.sh --ranks "1 2 4" --t-sim 50 --weak 0.05
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ranks="1 2 4 8 16 32 64" t_sim=100 weak=0.015625 modes="strong weak"
# A flag given last without its value is named (it was "$2: unbound variable").
need() { [ $# -ge 2 ] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --ranks) need "$@"; ranks=$2; shift 2 ;;
        --t-sim) need "$@"; t_sim=$2; shift 2 ;;
        --weak) need "$@"; weak=$2; shift 2 ;;
        --modes) need "$@"; modes=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
# A relative $CARGO_TARGET_DIR is the caller's: cargo builds from the root.
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
export CARGO_TARGET_DIR=$target
# $HPC: an `hpc` launcher already built (the launcher's speed does not matter here).
if [ -n "${HPC:-}" ]; then
    (cd "$root" && cargo build -q --release -p hpc-example-microcircuit)
    hpc=$HPC
else
    (cd "$root" && cargo build -q --release -p hpc-example-microcircuit -p hpc-cli)
    hpc=$target/release/hpc
fi
mc=$target/release/microcircuit
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf "%-6s %-9s %5s %8s %12s %14s %14s %14s %12s\n" mode exchange ranks neurons synapses \
    "rank0 B/s" "max other B/s" "mean other B/s" "peak MiB/rank"
for mode in $modes; do
    for ex in allgather alltoallv; do
        for p in $ranks; do
            if [ "$mode" = strong ]; then s=1; else
                s=$(awk -v w="$weak" -v p="$p" 'BEGIN { v = w * p; if (v > 1) v = 1; print v }')
            fi
            out=$work/$mode-$ex-$p
            if ! "$hpc" run -n "$p" --no-tag --timeout 1200 -- "$mc" --n-scaling "$s" --k-scaling 1 \
                --t-presim 20 --t-sim "$t_sim" --threads 1 --no-pin --exchange "$ex" \
                --engine inline --out "$out" --quiet --no-plot --no-spikes >"$out.log" 2>&1; then
                echo "$mode $ex $p ranks failed:"; tail -3 "$out.log"; continue
            fi
            python3 - "$mode" "$ex" "$p" "$out/summary.json" <<'PY'
import json, sys
mode, ex, p, f = sys.argv[1:5]
s = json.load(open(f))
bio = (s["params"]["t_sim"] + s["params"]["t_presim"]) / 1000.0
r = s["bytes_received_per_rank"]
others = r[1:] or [0]
peak = max(s["peak_rss_bytes"]) / 2**20
print(f"{mode:<6} {ex:<9} {p:>5} {s['neurons']:>8} {s['synapses']:>12} {r[0] / bio:>14.0f} "
      f"{max(others) / bio:>14.0f} {sum(others) / len(others) / bio:>14.0f} {peak:>12.1f}")
PY
        done
    done
done
