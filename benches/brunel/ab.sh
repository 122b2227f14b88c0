#!/usr/bin/env bash
# Two builds of the brunel example beside NEST 3.10 in one run (a measurement,
# not a test): order 2500 (12,500 neurons, 15.6 M synapses), 1 s of biological
# time, one thread, no MPI, as benches/brunel/run.sh. The runs alternate
# A B NEST, NEST B A, ... (benches/abba.sh), so that the drift of these VMs
# weighs on all three alike.
#
#   benches/brunel/ab.sh BIN_A BIN_B [rounds] [order]
#
# BIN_A and BIN_B are `brunel` binaries (build an old revision with
# `git stash; cargo build --release -p hpc-example-brunel; cp target/release/brunel ...`).
# Prints per side the median of the simulation's CPU seconds, B/A, and each
# side's lead over NEST (NEST's simulate CPU-s over ours), with the load
# average after each round. NEST comes from benches/nest-python.sh (installed
# once); BRUNEL_AB_NEST=0 leaves it out.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
a=$(realpath "$1") b=$(realpath "$2") rounds=${3:-3} order=${4:-2500}
# Checked before the first run (0, -1 or x rounds ran nothing and ended in the
# table's Python traceback; a missing binary in bash's "No such file").
case $rounds in
'' | *[!0-9]*) rounds_ok=false ;;
*) [ "${#rounds}" -le 6 ] && [ "$((10#$rounds))" -ge 1 ] && rounds_ok=true || rounds_ok=false ;;
esac
$rounds_ok || { echo "ab.sh: rounds $rounds: give a whole number of rounds, 1 to 999999" >&2; exit 2; }
for bin in "$1" "$2"; do
    [ -f "$bin" ] && [ -x "$bin" ] || { echo "ab.sh: $bin: not an executable file" >&2; exit 2; }
done
. "$root/benches/abba.sh"
items="A B"
if [ "${BRUNEL_AB_NEST:-1}" = 1 ]; then
    py=$("$root/benches/nest-python.sh")
    items="A B NEST"
fi
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT
run() { # round, item
    local out=$results/$2-$1
    case $2 in
    A | B)
        local bin=$a
        [ "$2" = B ] && bin=$b
        "$bin" --order "$order" --v-reset 0 --threads 1 --out "$out" --quiet --no-plot >/dev/null
        python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(sys.argv[2], s['simulate_cpu_s'], s['stats']['spikes'])" \
            "$out/summary.json" "$2" >>"$results/all" ;;
    NEST)
        "$py" "$root/examples/brunel/tools/nest_brunel.py" --no-record --v-reset 0 --order "$order" 2>/dev/null \
            | tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); print('NEST', d['simulate_cpu_s'], d['spikes'])" \
            >>"$results/all" ;;
    esac
}
abba "$rounds" run $items >&2
python3 - "$results/all" "$order" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    who, cpu, spikes = line.split()
    runs.setdefault(who, []).append((float(cpu), int(spikes)))
med = {w: statistics.median(c for c, _ in r) for w, r in runs.items()}
print(f"brunel order {sys.argv[2]}, 1 s biological, 1 thread: simulate CPU-s (median of {len(runs['A'])})")
print(f"{'side':<6} {'CPU-s':>8} {'runs':>40} {'spikes':>10} {'NEST/ours':>10}")
for w in runs:
    lead = f"{med['NEST'] / med[w]:.1f}x" if 'NEST' in med and w != 'NEST' else ""
    print(f"{w:<6} {med[w]:8.3f} {' '.join(f'{c:.3f}' for c, _ in runs[w]):>40} {runs[w][0][1]:>10} {lead:>10}")
print(f"B/A: {med['B'] / med['A']:.3f}")
PY
