#!/usr/bin/env bash
# Two builds of hpc_benchmark alternated in one run (A B, then B A, ...), one
# rank of one thread each, so that the machine's drift and the load of other
# work weigh on both alike: for each run the simulate CPU-seconds per
# biological second, the build time, the peak memory, the synapse bytes, the
# E->E weight digest, a hash of the spike file and the load average; then
# each side's sums and the ratio B/A of simulate CPU time. Exits 1 if the
# two builds gave other spikes or weights. (validate.sh --before does the
# same with NEST in the alternation, where NEST is installed.)
#
#   examples/hpc_benchmark/tools/before-after.sh A_BIN B_BIN ROUNDS [hpc_benchmark flags...]
#   examples/hpc_benchmark/tools/before-after.sh /tmp/before /tmp/after 2 --scale 1 --t-presim 20 --t-sim 80 --lambda 0
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
a=$1 b=$2 rounds=$3
shift 3
case $rounds in
'' | *[!0-9]*) rounds_ok=false ;;
*) [ "${#rounds}" -le 6 ] && [ "$((10#$rounds))" -ge 1 ] && rounds_ok=true || rounds_ok=false ;;
esac
$rounds_ok || {
    echo "before-after.sh: ROUNDS $rounds: give a whole number of rounds, 1 to 999999" >&2
    exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '| round | build | simulate CPU-s per bio s | simulate CPU-s | build s | peak RSS MiB | synapse bytes | digest | spikes sha256 | load |\n'
printf '|---:|---|---:|---:|---:|---:|---:|---|---|---:|\n'
for r in $(seq 1 "$rounds"); do
    order="A B"
    [ $((r % 2)) -eq 0 ] && order="B A"
    for side in $order; do
        bin=$a
        [ "$side" = B ] && bin=$b
        out="$work/$side-$r"
        "$bin" --threads 1 --no-plot --out "$out" "$@" >"$work/log" 2>&1 || {
            cat "$work/log" >&2
            exit 1
        }
        [ -f "$out/summary.json" ] || {
            echo "before-after.sh: $bin wrote no summary.json (is it hpc_benchmark?)" >&2
            exit 1
        }
        load=$(cut -d' ' -f1 /proc/loadavg)
        python3 - "$out" "$side" "$r" "$load" "$bin" <<'PY'
import hashlib, json, sys
out, side, r, load, binary = sys.argv[1:]
try:
    s = json.load(open(f"{out}/summary.json"))
    p = s["params"]
    if s["completed"] is not True:
        # Stopped early (--stop-at): it simulated less than t_presim + t_sim,
        # which its CPU time was divided by.
        print(f"before-after.sh: {binary} stopped before the end of its run (--stop-at?): "
              "its CPU time per biological second would be taken over time it did not "
              "simulate; give no --stop-at", file=sys.stderr)
        sys.exit(1)
    bio = (p["t_presim"] + p["t_sim"]) / 1000.0
    cpu = s["simulate_cpu_s"]
    line = (f"| {r} | {side} | {cpu / bio:.2f} | {cpu:.3f} | {s['build_s']:.2f} | "
            f"{max(s['peak_rss_bytes']) / 2**20:.1f} | {s['synapse_bytes']} | "
            f"{s['weights']['digest']} | ")
    digest = s["weights"]["digest"]
except (ValueError, KeyError, TypeError, ZeroDivisionError, RecursionError) as e:
    # Another program's summary (brunel's has no t_presim) or a damaged one: one
    # line naming the binary, not a traceback.
    print(f"before-after.sh: {binary} wrote a summary.json that is not hpc_benchmark's "
          f"({type(e).__name__} {str(e)[:200]})", file=sys.stderr)
    sys.exit(1)
try:
    spk = hashlib.sha256(open(f"{out}/spikes.spk", "rb").read()).hexdigest()[:16]
except FileNotFoundError:
    spk = "-"
print(f"{line}{spk} | {load} |")
with open(f"{out}/../results", "a") as f:
    f.write(json.dumps({"side": side, "cpu": cpu, "bio": bio, "digest": digest,
                        "spikes": spk, "build": s["build_s"]}) + "\n")
PY
    done
done
python3 - "$work/results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
side = {k: [x for x in rows if x["side"] == k] for k in "AB"}
cpu = {k: sum(x["cpu"] for x in v) for k, v in side.items()}
bio = {k: sum(x["bio"] for x in v) for k, v in side.items()}
build = {k: sum(x["build"] for x in v) / len(v) for k, v in side.items()}
for k in "AB":
    print(f"{k}: {cpu[k]:.3f} simulate CPU-s for {bio[k]:.2f} biological s = {cpu[k] / bio[k]:.2f} CPU-s per bio s; mean build {build[k]:.2f} s")
print(f"B/A simulate CPU time: {cpu['B'] / cpu['A']:.3f}; B/A build time {build['B'] / build['A']:.3f}")
same = len({(x["digest"], x["spikes"]) for x in rows}) == 1
# No spike file (--no-spikes): the weights alone were compared, not said of
# spikes that no run wrote.
compared = "weights" if any(x["spikes"] == "-" for x in rows) else "spikes and weights"
print(f"{compared} identical in every run" + (" (no spike file to compare)" if compared == "weights" else "")
      if same else f"OTHER {compared.upper()}")
sys.exit(0 if same else 1)
PY
