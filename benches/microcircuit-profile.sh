#!/usr/bin/env bash
# Where the microcircuit's simulation time goes (a measurement, not a test):
#
#  1. `perf record` (software clock: this kind of VM hides the hardware counters)
#     of the full model on 2 threads and of the 0.1 scale on 1 thread, 0.5 s
#     warm-up + 1 s: CPU seconds of delivery (`Shard::deliver`, the calendar
#     and synapse loops), neuron update (`Shard::update_*`, `Poisson32::fill*`),
#     waiting in the thread team (`Wait::pause`) and the rest, per biological
#     second, with the example's own timers and counts beside them (ns per
#     synaptic event, ns per neuron update);
#  2. the hottest source lines of delivery (`perf annotate`);
#  3. with --cache, callgrind's cache simulation of delivery and update only
#     (full scale, 1 thread, 0.1 s + 0.1 s; about 12 minutes): data-cache misses
#     per synaptic event. Valgrind runs the AVX2 update (it has no AVX-512).
#
#   benches/microcircuit-profile.sh            # 1 and 2 (about a minute)
#   benches/microcircuit-profile.sh --cache    # 1, 2 and 3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cache=0
[ "${1:-}" = --cache ] && cache=1
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 2; }
[ $cache = 0 ] || command -v valgrind >/dev/null || { echo "--cache needs valgrind (apt-get install valgrind)" >&2; exit 2; }
# A relative $CARGO_TARGET_DIR is the caller's: cargo builds from the root.
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
export CARGO_TARGET_DIR=$target
(cd "$root" && cargo build -q --release -p hpc-example-microcircuit)
bin=$target/release/microcircuit
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"

profile() { # name, then the example's flags
    name=$1
    shift
    perf record -q -e cpu-clock -F 1000 -o "$work/$name.data" -- \
        "$bin" "$@" --t-presim 500 --t-sim 1000 --out "$work/$name" --no-plot > "$work/$name.txt" 2>&1
    perf report -i "$work/$name.data" --no-children --sort symbol --stdio -n 2>/dev/null > "$work/$name.report"
    python3 - "$work/$name.report" "$work/$name/summary.json" "$name" "$*" <<'PY'
import json, re, sys
report, summary, name, flags = sys.argv[1:]
# Delivery is `Shard::deliver` (once inlined into `sim::run::interval`), the
# update `Shard::update_*` with the background's `Poisson32::fill_avx2`.
parts = {"delivery": r"sim::run::interval|Shard::deliver", "update": r"Shard::update|Poisson32::fill",
         "waiting": r"Wait::pause",
         # The build draws its weights and delays through rand and rand_distr
         # (the simulation does not): counted as "rest" before, they were most
         # of the 0.1 scale's "rest".
         "build": r"network::|clear_page|rand::|rand_distr::"}
cpu = dict.fromkeys(list(parts) + ["rest"], 0.0)
total = 0
for line in open(report):
    m = re.match(r"\s*[\d.]+%\s+(\d+)\s+\[.\]\s+(.*)", line)
    if not m:
        continue
    n, sym = int(m.group(1)), m.group(2)
    total += n
    for k, pat in parts.items():
        if re.search(pat, sym):
            cpu[k] += n / 1000
            break
    else:
        cpu["rest"] += n / 1000
s = json.load(open(summary))
bio = (s["params"]["t_presim"] + s["params"]["t_sim"]) / 1000
events = s["events"]
neurons = s["neurons"]
sim = sum(cpu[k] for k in ("delivery", "update", "waiting", "rest"))
print(f"\n{name}: microcircuit {flags}")
print(f"  simulate, sampled: {sim:.2f} CPU-s for {bio:.1f} s of biological time "
      f"({sim / bio:.2f} CPU-s per biological second; the run's own timer: "
      f"{s.get('simulate_cpu_s', float('nan')):.2f} CPU-s)")
print(f"  {'part':10} {'CPU-s':>7} {'share':>6} {'CPU-s/bio-s':>11}")
for k in ("delivery", "update", "waiting", "rest"):
    print(f"  {k:10} {cpu[k]:>7.2f} {100 * cpu[k] / sim:>5.0f}% {cpu[k] / bio:>11.2f}")
if events and neurons:
    steps = bio * 1e4
    print(f"  {events / bio:.3g} synaptic events and {neurons * 1e4:.3g} neuron updates per biological second:"
          f" delivery {1e9 * cpu['delivery'] / events:.2f} ns per event,"
          f" update {1e9 * cpu['update'] / (neurons * steps):.2f} ns per neuron update")
PY
}
profile full --n-scaling 1 --k-scaling 1 --threads 2
profile small --threads 1
echo
echo "delivery's hottest source lines (full scale; % of delivery's samples):"
perf annotate -i "$work/full.data" --stdio -l -s 'microcircuit::sim::shard::Shard::deliver' 2>/dev/null |
    grep -E '^\s+[0-9]+\.[0-9]+\s+\S+\.rs:[0-9]+' | sort -rn | head -6

if [ $cache = 1 ]; then
    echo
    echo "callgrind cache simulation of delivery and update (full scale, 1 thread, 0.1 s + 0.1 s):"
    valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \
        --toggle-collect='*Shard::deliver*' --toggle-collect='*Shard::update*' --toggle-collect='*Poisson32::fill*' \
        --callgrind-out-file="$work/cg.out" \
        "$bin" --n-scaling 1 --k-scaling 1 --threads 1 --t-presim 100 --t-sim 100 \
        --out "$work/cg" --no-plot > "$work/cg.txt" 2>&1
    python3 - "$work/cg.out" "$work/cg/summary.json" <<'PY'
import json, sys
out, summary = sys.argv[1:]
ev = hdr = None
for line in open(out):
    if line.startswith("events:"):
        hdr = line.split()[1:]
    if line.startswith("summary:"):
        ev = dict(zip(hdr, map(int, line.split()[1:])))
s = json.load(open(summary))
events = s["events"]
print(f"  instructions {ev['Ir']:.3g}, data reads {ev['Dr']:.3g}, writes {ev['Dw']:.3g}")
if events:
    print(f"  per synaptic event ({events:.3g} in 0.2 s): L1 read misses {ev['D1mr'] / events:.2f},"
          f" L1 write misses {ev['D1mw'] / events:.2f}, last-level read misses {ev['DLmr'] / events:.3f}")
PY
    grep -i 'warning: simulated LL' "$work/cg.txt" || true
fi
