#!/usr/bin/env python3
"""Run NEST (tools/nest_microcircuit.py) and the microcircuit example on the same
parameters for several seeds and compare, per population, the rate averaged over
the seeds (within 10 %) and the mean CV of ISIs (within 0.05). Exit status 1 if a
population is out of tolerance.

    python3 validate.py --microcircuit path/to/microcircuit [--seeds 55 56 57]
"""
import argparse
import json
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "crates", "hpc-spiking", "python"))
from read_spikes import hpc_spikes, pop_stats  # noqa: E402

PROG = "validate.py"

ap = argparse.ArgumentParser()
ap.add_argument("--microcircuit", required=True)
ap.add_argument("--seeds", type=int, nargs="+", default=[55, 56, 57])
ap.add_argument("--n-scaling", type=float, default=0.1)
ap.add_argument("--k-scaling", type=float, default=0.1)
ap.add_argument("--t-sim", type=float, default=1000.0)
ap.add_argument("--rate-tol", type=float, default=0.10)
ap.add_argument("--cv-tol", type=float, default=0.05)
ap.add_argument("--keep", metavar="DIR", help="keep each run's output in DIR")
a = ap.parse_args()
# Every argument is checked before the first run (NEST's takes minutes): NaN
# passes every comparison, so finite first, then the range.
for flag, v, ok, must in [("--n-scaling", a.n_scaling, 0 < a.n_scaling <= 1, "in (0, 1]"),
                          ("--k-scaling", a.k_scaling, 0 < a.k_scaling <= 1, "in (0, 1]"),
                          ("--t-sim", a.t_sim, a.t_sim > 0, "above 0 ms"),
                          ("--rate-tol", a.rate_tol, a.rate_tol >= 0, ">= 0"),
                          ("--cv-tol", a.cv_tol, a.cv_tol >= 0, ">= 0")]:
    if not (math.isfinite(v) and ok):
        ap.error(f"{flag} {v}: must be a finite number {must}")
bad = [s for s in a.seeds if not 0 <= s < 2**64]
if bad:
    ap.error(f"--seeds {bad[0]}: a seed is a whole number from 0 to 2^64 - 1")
if not (os.path.isfile(a.microcircuit) and os.access(a.microcircuit, os.X_OK)):
    ap.error(f"--microcircuit {hpc_spikes.shown_path(a.microcircuit)}: not an executable file")
if a.keep and os.path.exists(a.keep) and not os.path.isdir(a.keep):
    ap.error(f"--keep {hpc_spikes.shown_path(a.keep)}: exists and is not a directory")

# The statistics need numpy: said before any run (the binary runs first now).
try:
    import numpy  # noqa: F401
except ImportError as e:
    sys.exit(f"{PROG} needs numpy (python3-numpy): {e}")

common = ["--n-scaling", str(a.n_scaling), "--k-scaling", str(a.k_scaling),
          "--t-sim", str(a.t_sim)]
# The microcircuit's populations, in the order of its ids and of NEST's result
# line (nest_microcircuit.py's POPS): the comparison goes population by
# population, so a binary that writes others is refused by name.
POPS = ["L23E", "L23I", "L4E", "L4I", "L5E", "L5I", "L6E", "L6I"]
nest_runs, ours_runs = [], []
for seed in a.seeds:
    # Ours first: a binary that is not the microcircuit is named in seconds,
    # not after NEST's minutes.
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(a.keep, f"seed-{seed}") if a.keep else tmp
        # What a kept directory holds from an earlier invocation, which a
        # binary that writes nothing left to be read as this run's.
        files = [os.path.join(out, n) for n in ("spikes.spk", "summary.json")]
        before = [hpc_spikes.stamp(f) for f in files]
        hpc_spikes.run_or_exit([a.microcircuit, "--seed", str(seed), "--out", out, "--quiet",
                                "--no-plot"] + common, PROG)
        # A binary that is no microcircuit (/bin/true) writes neither: one line
        # naming it, not a traceback.
        try:
            for f, b in zip(files, before):
                hpc_spikes.written_since(f, b)
            spikes = os.path.join(out, "spikes.spk")
            hpc_spikes.check_run(spikes)
            f = hpc_spikes.read(spikes)
            # Bounded, a regular file only (a FIFO there waited without end).
            summ = hpc_spikes.read_json(os.path.join(out, "summary.json"))
            summ["simulate_recorded_s"] + summ["build_s"] + f.header["t_presim_ms"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            print(f"{PROG}: --microcircuit {hpc_spikes.shown_path(a.microcircuit)} wrote no run's spikes.spk and "
                  f"summary.json in {hpc_spikes.shown_path(out)}: {str(e)[:200]}", file=sys.stderr)
            sys.exit(1)
    names = [p["name"] for p in f.header["populations"]]
    if names != POPS:
        # Indexed by NEST's populations, another binary's ended in an IndexError
        # traceback after NEST's run (none: at pops[-1]).
        shown = ", ".join(hpc_spikes._word(n) for n in names[:10]) or "none"
        more = f" and {len(names) - 10} more" if len(names) > 10 else ""
        sys.exit(f"{PROG}: --microcircuit {hpc_spikes.shown_path(a.microcircuit)} wrote the populations {shown}{more}, "
                 f"not the microcircuit's {', '.join(POPS)}: it is not the microcircuit")
    n = hpc_spikes.run_or_exit([sys.executable, os.path.join(HERE, "nest_microcircuit.py"),
                                "--seed", str(seed)] + common, PROG)
    # NEST's result line: another last line was a traceback of json.
    nest = hpc_spikes.result_line(n, ("simulate_s",), PROG)
    if not (isinstance(nest.get("populations"), list) and all(
            isinstance(q, dict) and isinstance(q.get("name"), str)
            and all(isinstance(q.get(k), (int, float)) and not isinstance(q.get(k), bool)
                    for k in ("rate_hz", "cv_isi")) for q in nest["populations"])
            and [q["name"] for q in nest["populations"]] == POPS):
        sys.exit(f"{PROG}: nest_microcircuit.py printed no populations of "
                 f"{{name, rate_hz, cv_isi}} named {', '.join(POPS)} in its result line")
    nest_runs.append(nest)
    h, t, ids = hpc_spikes.arrays(f)
    pops = h["populations"]
    first = [p["first"] for p in pops] + [pops[-1]["first"] + pops[-1]["count"]]
    res = pop_stats(t, ids, first, [p["name"] for p in pops], h["t_presim_ms"], h["t_sim_ms"])
    ours_runs.append({"populations": res, "simulate_s": summ["simulate_recorded_s"],
                      "build_s": summ["build_s"]})
    print(f"seed {seed}: NEST {nest_runs[-1]['simulate_s']:.2f} s, "
          f"ours {summ['simulate_recorded_s']:.2f} s for {a.t_sim:.0f} ms", file=sys.stderr)


def mean_of(runs, k, key):
    return sum(r["populations"][k][key] for r in runs) / len(runs)


ok = True
print(f"N_scaling {a.n_scaling}, K_scaling {a.k_scaling}, Poisson input, seeds {a.seeds}, "
      f"{a.t_sim:.0f} ms after 500 ms warm-up; means over seeds")
print(f"{'population':<10} {'rate NEST':>9} {'ours':>7} {'diff':>7}   "
      f"{'CV NEST':>7} {'ours':>6} {'diff':>7}")
for k, p in enumerate(nest_runs[0]["populations"]):
    rn, ro = mean_of(nest_runs, k, "rate_hz"), mean_of(ours_runs, k, "rate_hz")
    cn, co = mean_of(nest_runs, k, "cv_isi"), mean_of(ours_runs, k, "cv_isi")
    dr = (ro - rn) / rn if rn > 0 else (0.0 if ro == 0 else float("inf"))
    good = abs(dr) <= a.rate_tol and abs(co - cn) <= a.cv_tol
    ok &= good
    print(f"{p['name']:<10} {rn:>8.3f}H {ro:>6.3f}H {dr*100:>+6.1f}%   {cn:>7.3f} {co:>6.3f} "
          f"{co-cn:>+7.3f}  {'ok' if good else 'FAIL'}")
for k, p in enumerate(nest_runs[0]["populations"]):
    per = " ".join(f"{r['populations'][k]['rate_hz']:.3f}" for r in nest_runs)
    mine = " ".join(f"{r['populations'][k]['rate_hz']:.3f}" for r in ours_runs)
    print(f"  {p['name']:<6} rates per seed: NEST {per} | ours {mine}")
ns = sum(r["simulate_s"] for r in nest_runs) / len(nest_runs)
os_ = sum(r["simulate_s"] for r in ours_runs) / len(ours_runs)
print(f"simulate wall time per {a.t_sim:.0f} ms (mean): NEST {ns:.2f} s (1 thread), ours {os_:.2f} s (1 thread)")
sys.exit(0 if ok else 1)
