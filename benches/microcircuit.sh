#!/usr/bin/env bash
# Benchmark of the microcircuit example (a measurement, not a test):
#
#  * full scale (77,169 neurons, ~3e8 synapses), 0.5 s warm-up + 1 s: build time,
#    real-time factor of the recorded second, bytes per synapse, peak memory;
#  * N_scaling = K_scaling = 0.1 on one thread beside NEST 3.10 on one thread
#    (tools/nest_microcircuit.py), runs alternating ours / NEST.
#
# Every case runs --reps times (alternating); the table gives mean, standard
# deviation, min and max, and CPU seconds beside wall seconds (on a shared machine
# the wall time moves with the neighbours' load; the CPU time moves less).
#
#   benches/microcircuit.sh                  # 3 repetitions, 2 threads at full scale
#   benches/microcircuit.sh --reps 5 --threads 2 --no-nest
#   benches/microcircuit.sh --full-sim 300   # a shorter recorded time at full scale
#
# NEST comes from the brunel/microcircuit venv ($BRUNEL_VENV, default
# ~/.cache/hpc-rs/brunel-venv; examples/microcircuit/validate.sh creates it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
reps=3 threads=2 nest=1 full=1 full_sim=1000
# A flag given last without its value is named (it was "$2: unbound variable").
need() { [ $# -ge 2 ] || { echo "$(basename "$0"): $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
        --reps) need "$@"; reps=$2; shift 2 ;;
        --threads) need "$@"; threads=$2; shift 2 ;;
        --no-nest) nest=0; shift ;;
        --no-full) full=0; shift ;;
        --full-sim) need "$@"; full_sim=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
py=${PYTHON:-python3}
if [ "$nest" = 1 ] && ! "$py" -c "import nest" >/dev/null 2>&1; then
    venv=${BRUNEL_VENV:-$HOME/.cache/hpc-rs/brunel-venv}
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import nest" >/dev/null 2>&1; then
        py=$venv/bin/python
    else
        echo "no NEST (run examples/microcircuit/validate.sh once to create $venv); --no-nest" >&2
        nest=0
    fi
fi
# A relative $CARGO_TARGET_DIR is the caller's: cargo builds from the root.
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
export CARGO_TARGET_DIR=$target
(cd "$root" && cargo build -q --release -p hpc-example-microcircuit)
exec "$py" - "$target/release/microcircuit" "$root/examples/microcircuit/tools/nest_microcircuit.py" \
    "$reps" "$threads" "$nest" "$full" "$full_sim" <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
mc, nest_py, reps, threads, nest, full, full_sim = sys.argv[1:8]
reps, threads, nest, full, full_sim = int(reps), int(threads), nest == "1", full == "1", float(full_sim)
rows = {}

def add(case, key, v):
    rows.setdefault(case, {}).setdefault(key, []).append(v)

def ours(case, args):
    with tempfile.TemporaryDirectory() as out:
        t0 = time.time()
        subprocess.run([mc, "--out", out, "--quiet", "--no-plot", "--no-spikes"] + args,
                       check=True, capture_output=True, text=True)
        s = json.load(open(os.path.join(out, "summary.json")))
    add(case, "build_s", s["build_s"])
    add(case, "build_cpu_s", s["build_cpu_s"])
    add(case, "rtf", s["real_time_factor"])
    add(case, "simulate_cpu_s_per_bio_s", s["simulate_cpu_s"] / ((s["params"]["t_sim"] + s["params"]["t_presim"]) / 1000.0))
    add(case, "bytes_per_synapse", s["bytes_per_synapse"])
    add(case, "peak_rss_gib", sum(s["peak_rss_bytes"]) / 2**30)
    add(case, "synapses", s["synapses"])
    add(case, "events_per_bio_s", s["events"] / ((s["params"]["t_sim"] + s["params"]["t_presim"]) / 1000.0))
    add(case, "rate_hz", s["stats"]["rate_hz"])

def nest_run(case, args):
    o = subprocess.run([sys.executable, nest_py] + args, check=True, capture_output=True, text=True)
    n = json.loads(o.stdout.strip().splitlines()[-1])
    add(case, "build_s", n["build_s"])
    add(case, "build_cpu_s", n["build_cpu_s"])
    add(case, "rtf", n["real_time_factor"])
    add(case, "simulate_cpu_s_per_bio_s", n["simulate_cpu_s"] / (n["t_sim_ms"] / 1000.0))
    add(case, "peak_rss_gib", n["peak_rss_mib"] / 1024)
    add(case, "synapses", n["synapses"])
    rates = [p["rate_hz"] * p["neurons"] for p in n["populations"]]
    add(case, "rate_hz", sum(rates) / n["neurons"])

full_case = f"ours full scale, {threads} threads"
for r in range(reps):
    print(f"repetition {r + 1}/{reps}", file=sys.stderr)
    if full:
        ours(full_case, ["--n-scaling", "1", "--k-scaling", "1", "--threads", str(threads),
                         "--t-presim", "500", "--t-sim", str(full_sim)])
    ours("ours 0.1 scale, 1 thread", ["--threads", "1"])
    if nest:
        nest_run("NEST 3.10 0.1 scale, 1 thread", ["--threads", "1"])

def fmt(xs):
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return (f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f} "
            f"[{min(xs):.3f}, {max(xs):.3f}]")

print(f"microcircuit benchmark: {reps} repetitions (alternating), host {os.uname().nodename}, "
      f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
keys = ["build_s", "build_cpu_s", "rtf", "simulate_cpu_s_per_bio_s", "bytes_per_synapse",
        "peak_rss_gib", "synapses", "events_per_bio_s", "rate_hz"]
for case, d in rows.items():
    print(f"\n{case}")
    for k in keys:
        if k in d:
            print(f"  {k:<26} {fmt(d[k])}")
o, n = rows.get("ours 0.1 scale, 1 thread"), rows.get("NEST 3.10 0.1 scale, 1 thread")
if o and n:
    print(f"\n0.1 scale, one thread: NEST RTF {statistics.mean(n['rtf']):.2f}, ours "
          f"{statistics.mean(o['rtf']):.3f}: {statistics.mean(n['rtf']) / statistics.mean(o['rtf']):.1f}x")
PY
