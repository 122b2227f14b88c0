#!/usr/bin/env bash
# Two builds of the microcircuit example side by side in one run (a
# measurement, not a test): the runs alternate A B B A ... so that the drift of
# these VMs weighs on both alike; NEST 3.10 runs beside them at the 0.1 scale
# where its venv exists.
#
#   benches/microcircuit-ab.sh BIN_A BIN_B [reps] [full_sim_ms]
#
# BIN_A and BIN_B are `microcircuit` binaries (build an old revision with
# `git stash; cargo build --release -p hpc-example-microcircuit; cp ...`, or see
# benches/before-after.sh). Prints, per case and side, the mean of the
# simulation's CPU seconds per biological second, the real-time factor, build
# seconds (wall and CPU) and bytes per synapse, the ratio B/A of each, and the
# load average beside every repetition.
#
# Cases: full scale on 2 threads (0.5 s warm-up + full_sim_ms, default 1000),
# and the 0.1 scale on 1 thread (0.5 s + 1 s); AB_CASES=small or AB_CASES=full
# runs one of them. AB_CASES=half runs half the neurons with full in-degrees on
# 1 thread (0.1 s + 0.4 s): the shard one thread of the full scale on 2 threads
# holds, without the second thread's waits, for comparing kernels on a machine
# that is not idle. Cases combine: AB_CASES=full,half.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
a=$1 b=$2 reps=${3:-3} full_sim=${4:-1000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
py=python3 nest=0
venv=${BRUNEL_VENV:-$HOME/.cache/hpc-rs/brunel-venv}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import nest" >/dev/null 2>&1; then
    py=$venv/bin/python nest=1
fi
exec "$py" - "$a" "$b" "$reps" "$full_sim" "${AB_CASES:-full,small}" "$nest" \
    "$root/examples/microcircuit/tools/nest_microcircuit.py" <<'PY'
import json, os, statistics, subprocess, sys, tempfile
a, b, reps, full_sim, cases, nest, nest_py = sys.argv[1:8]
reps, cases, nest = int(reps), cases.split(","), nest == "1"
bins = {"A": a, "B": b}
rows = {}

def add(case, side, key, v):
    rows.setdefault(case, {}).setdefault(side, {}).setdefault(key, []).append(v)

def ours(case, side, args):
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([bins[side], "--out", out, "--quiet", "--no-plot", "--no-spikes"] + args,
                       check=True, capture_output=True, text=True)
        s = json.load(open(os.path.join(out, "summary.json")))
    bio = (s["params"]["t_sim"] + s["params"]["t_presim"]) / 1000.0
    add(case, side, "simulate_cpu_s_per_bio_s", s["simulate_cpu_s"] / bio)
    add(case, side, "rtf", s["real_time_factor"])
    add(case, side, "build_s", s["build_s"])
    add(case, side, "build_cpu_s", s["build_cpu_s"])
    add(case, side, "bytes_per_synapse", s["bytes_per_synapse"])
    add(case, side, "events_per_bio_s", s["events"] / bio)

def nest_run(case):
    o = subprocess.run([sys.executable, nest_py, "--threads", "1"], check=True,
                       capture_output=True, text=True)
    n = json.loads(o.stdout.strip().splitlines()[-1])
    add(case, "NEST", "rtf", n["real_time_factor"])
    add(case, "NEST", "simulate_cpu_s_per_bio_s", n["simulate_cpu_s"] / (n["t_sim_ms"] / 1000.0))

full = ["--n-scaling", "1", "--k-scaling", "1", "--threads", "2", "--t-presim", "500",
        "--t-sim", full_sim]
small = ["--threads", "1"]
half = ["--n-scaling", "0.5", "--k-scaling", "1", "--threads", "1", "--t-presim", "100",
        "--t-sim", "400"]
for r in range(reps):
    order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
    for side in order:
        if "full" in cases:
            ours("full scale, 2 threads", side, full)
        if "small" in cases:
            ours("0.1 scale, 1 thread", side, small)
        if "half" in cases:
            ours("0.5 scale (full in-degrees), 1 thread", side, half)
    if nest and "small" in cases:
        nest_run("0.1 scale, 1 thread")
    print(f"repetition {r + 1}/{reps} done ({''.join(order)}), load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)

print(f"\nA = {a}\nB = {b}\n{reps} repetitions alternating, {os.cpu_count()} CPUs")
for case, sides in rows.items():
    print(f"\n{case}")
    keys = list(sides["A"])
    print(f"  {'':26} {'A':>9} {'B':>9} {'B/A':>6}" + (f" {'NEST':>9}" if "NEST" in sides else ""))
    for k in keys:
        ma, mb = statistics.mean(sides["A"][k]), statistics.mean(sides["B"][k])
        line = f"  {k:26} {ma:9.3f} {mb:9.3f} {mb / ma if ma else float('nan'):6.3f}"
        if "NEST" in sides and k in sides["NEST"]:
            line += f" {statistics.mean(sides['NEST'][k]):9.3f}"
        print(line)
    if "NEST" in sides:
        n = statistics.mean(sides["NEST"]["rtf"])
        print(f"  NEST RTF / ours: A {n / statistics.mean(sides['A']['rtf']):.1f}x, "
              f"B {n / statistics.mean(sides['B']['rtf']):.1f}x")
PY
