#!/usr/bin/env python3
"""Run NEST (tools/nest_brunel.py) and the brunel example on the same parameters
and compare mean rate and CV of ISIs. Exit status 1 if a case is out of tolerance
(rate within 5 %, CV within 0.05).

    python3 validate.py --brunel path/to/brunel [--quick]
"""
import argparse
import json
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "crates", "hpc-spiking", "python"))
from read_spikes import hpc_spikes, read, stats  # noqa: E402

PROG = "validate.py"

ap = argparse.ArgumentParser()
ap.add_argument("--brunel", required=True)
ap.add_argument("--quick", action="store_true", help="only the small network")
ap.add_argument("--t-sim", type=float, default=1000.0)
ap.add_argument("--keep", metavar="DIR",
                help="keep each case's output in DIR/case-N: figures and report.html "
                     "with the comparison to NEST (nest.json)")
a = ap.parse_args()
# Every argument is checked before the first run (NEST's takes minutes), as the
# microcircuit's validate.py does: NaN passes every comparison, so finite first.
if not (math.isfinite(a.t_sim) and a.t_sim > 0):
    ap.error(f"--t-sim {a.t_sim}: must be a finite number above 0 ms")
if not (os.path.isfile(a.brunel) and os.access(a.brunel, os.X_OK)):
    ap.error(f"--brunel {hpc_spikes.shown_path(a.brunel)}: not an executable file")
if a.keep and os.path.exists(a.keep) and not os.path.isdir(a.keep):
    ap.error(f"--keep {hpc_spikes.shown_path(a.keep)}: exists and is not a directory")

cases = [  # (label, order, ce, ci, v_reset)
    ("order 250, CE 100, CI 25, V_reset 0", 250, 100, 25, 0.0),
    ("order 250, CE 100, CI 25, V_reset 10", 250, 100, 25, 10.0),
]
if not a.quick:
    cases += [
        ("order 2500, V_reset 0 (nest)", 2500, None, None, 0.0),
        ("order 2500, V_reset 10 (paper)", 2500, None, None, 10.0),
    ]

rows, ok = [], True
for k, (label, order, ce, ci, vr) in enumerate(cases, 1):
    extra = (["--ce", str(ce), "--ci", str(ci)] if ce else [])
    nest = hpc_spikes.run_or_exit(
        [sys.executable, os.path.join(HERE, "nest_brunel.py"), "--order", str(order),
         "--v-reset", str(vr), "--t-sim", str(a.t_sim)] + extra, PROG)
    # NEST's result line: another last line was a traceback of json or a KeyError.
    n = hpc_spikes.result_line(nest, ("rate_hz", "cv_isi", "spikes", "simulate_cpu_s"), PROG)
    line = json.dumps(n)
    with tempfile.TemporaryDirectory() as tmp:
        out, report = tmp, ["--no-plot"]
        if a.keep:
            out = os.path.join(a.keep, f"case-{k}")
            os.makedirs(out, exist_ok=True)
            # Through a temporary file of its own: open(..., "w") wrote through a
            # link planted at DIR/case-N/nest.json.
            hpc_spikes.write_replacing(os.path.join(out, "nest.json"), (line + "\n").encode(),
                                       PROG)
            report = ["--reference", os.path.join(out, "nest.json")]
        # What a kept directory holds from an earlier invocation, which a
        # binary that writes nothing left to be read as this run's.
        files = [os.path.join(out, n) for n in ("spikes.spk", "summary.json")]
        before = [hpc_spikes.stamp(f) for f in files]
        hpc_spikes.run_or_exit(
            [a.brunel, "--order", str(order), "--v-reset", str(vr), "--t-sim", str(a.t_sim),
             "--out", out, "--quiet"] + report + extra, PROG)
        # A binary that is no brunel (/bin/true) writes neither: one line naming
        # it, not a traceback.
        try:
            for f, b in zip(files, before):
                hpc_spikes.written_since(f, b)
            hdr, t, ids = read(os.path.join(out, "spikes.spk"))
            # Bounded, a regular file only (a FIFO there waited without end).
            summ = hpc_spikes.read_json(os.path.join(out, "summary.json"))
            summ["simulate_cpu_s"] + 0.0
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            print(f"{PROG}: --brunel {hpc_spikes.shown_path(a.brunel)} wrote no run's spikes.spk and summary.json "
                  f"in {hpc_spikes.shown_path(out)}: {str(e)[:200]}", file=sys.stderr)
            sys.exit(1)
    rate, cv = stats(t, ids, hdr["n_neurons"], hdr["t_sim_ms"])
    # A network silent in NEST (a short --t-sim) was a ZeroDivisionError.
    d_rate = (rate - n["rate_hz"]) / n["rate_hz"] if n["rate_hz"] > 0 else (
        0.0 if rate == 0 else math.inf)
    d_cv = cv - n["cv_isi"]
    good = abs(d_rate) <= 0.05 and abs(d_cv) <= 0.05
    ok &= good
    rows.append((label, n["spikes"], len(t), n["rate_hz"], rate, d_rate, n["cv_isi"], cv, d_cv,
                 n["simulate_cpu_s"], summ["simulate_cpu_s"], good))

print(f"{'case':<38} {'spikes NEST':>11} {'ours':>9} {'rate NEST':>9} {'ours':>7} {'diff':>6}"
      f" {'CV NEST':>7} {'ours':>6} {'diff':>6} {'sim CPU-s NEST':>14} {'ours':>6}")
for r in rows:
    print(f"{r[0]:<38} {r[1]:>11} {r[2]:>9} {r[3]:>8.2f}H {r[4]:>6.2f}H {r[5]*100:>+5.1f}%"
          f" {r[6]:>7.3f} {r[7]:>6.3f} {r[8]:>+6.3f} {r[9]:>14.2f} {r[10]:>6.2f}  {'ok' if r[11] else 'FAIL'}")
if a.keep:
    print(f"reports: {hpc_spikes.shown_path(a.keep)}/case-*/report.html")
sys.exit(0 if ok else 1)
