#!/usr/bin/env python3
"""Runs examples/hpc_benchmark and NEST 3.10 on the same scale and seeds; one table.

Layer 2 (plasticity off, --lambda 0): the mean E rate over the seeds of ours within
10 % of NEST's (exit status 1 if not). Layer 3 (the plastic network): the
distribution of outcomes side by side, split into regimes. A run "runs away" when
its E rate is above RUNAWAY_FACTOR (3) times the mean lambda = 0 rate of the same
engine (from layer 2 of this invocation or the results file, or --baseline-hz).

Each seed runs ours then NEST's (alternating, one thread each, under `nice`), so a
change in the machine's load falls on both. Every finished run is appended to
--results (JSON lines) and reused when asked for again, so an interrupted
validation resumes where it stopped. A row is reused only for the same build
of the program that ran it (its "build": the SHA-256 of the binary's bytes;
for NEST, of the --python path and nest_hpc_benchmark.py): a row of an earlier
build of ours, or of one without that field, is run again, not taken for
this build's.

    validate.py --hpc-benchmark target/release/hpc_benchmark [--layers 2 3]
        [--scale 1] [--seeds-off 1 2 3] [--seeds-plastic 1 2 3 4 5]
        [--before OLD_BINARY]

With --before, each seed also runs an older build of ours (engine "before") in
the same alternation (ours, before, NEST; the next seed before, ours, NEST), so
that a change's speed is measured under the load NEST's runs saw too; its rows
must give the same rate and weights as ours when the change keeps the results.
The cost table at the end gives each engine's simulate CPU-seconds per
biological second and the ratios.
"""
import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent.parent / "crates" / "hpc-spiking" / "python"))
import hpc_spikes  # noqa: E402

PROG = "validate.py"
# The largest program whose bytes tell its build (a release binary is tens of MB).
MAX_BINARY_BYTES = 1 << 30
# The largest --results file read (a run is one line of about 600 bytes).
MAX_RESULTS_BYTES = 64 << 20


def out(text=""):
    """A line of the report on standard output: a closed pipe ends quietly (141), a
    full disk with one line and status 1, never a traceback."""
    hpc_spikes.say(text, PROG)


def fail(msg):
    """One line on standard error and status 1."""
    print(f"{PROG}: {msg}", file=sys.stderr)
    raise SystemExit(1)


# The numbers every run of the --results file has (what table() and cost() print).
RUN_NUMBERS = ("rate", "mean_pa", "sd_pa", "p5_pa", "p95_pa", "build_s", "sim_s", "sim_cpu_s",
               "wall_s", "cpu_s", "peak_rss", "bytes_per_syn", "load")
JE0 = 45.6096  # pA: the initial E->E weight, the 0.14 mV EPSP
RUNAWAY_FACTOR = 3.0
RATE_TOLERANCE = 0.10


def run_child(cmd, cwd):
    """Runs cmd under nice; returns (wall s, CPU s, peak RSS bytes) of the child."""
    tic = time.perf_counter()
    proc = subprocess.Popen(["nice", "-n", "10"] + cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - tic
    if proc.returncode != 0:
        sys.stderr.write(out.decode(errors="replace")[-4000:])
        raise SystemExit(f"{hpc_spikes.shown_path(cmd[0])} failed with status {proc.returncode}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def run_ours(a, seed, lam, work, binary=None, tag="ours"):
    out = Path(work) / f"{tag}-{seed}-{lam}"
    cmd = [binary or a.hpc_benchmark, "--scale", str(a.scale), "--seed", str(seed), "--lambda", str(lam),
           "--t-presim", str(a.t_presim), "--t-sim", str(a.t_sim), "--threads", "1",
           "--no-spikes", "--quiet", "--out", str(out)]
    before = hpc_spikes.stamp(out / "summary.json")
    wall, cpu, _ = run_child(cmd, work)
    with summary_of(cmd[0], out / "summary.json", before) as s:
        w = s["weights"]
        return {"rate": s["mean_rate_hz"], "mean_pa": w["mean_pa"], "sd_pa": w["sd_pa"],
                "p5_pa": w["p5_pa"], "p95_pa": w["p95_pa"], "weights_from": "all",
                "build_s": s["build_s"], "sim_s": s["simulate_s"], "sim_cpu_s": s["simulate_cpu_s"],
                "wall_s": wall, "cpu_s": cpu, "peak_rss": max(s["peak_rss_bytes"]),
                "bytes_per_syn": s["bytes_per_synapse"]}


class summary_of:
    """`with summary_of(program, path) as s:` the JSON object at path that program
    wrote, its fields read in the block: a file that is missing, is not JSON, or
    lacks a field or has one of another type (a program that is not hpc_benchmark,
    /bin/true) ends in one line naming the program and the file, not a traceback;
    so does a file that program did not write (its stamp is still `before`, what
    an earlier invocation left in a --keep directory)."""

    def __init__(self, program, path, before=None):
        self.program, self.path, self.before = program, path, before

    def __enter__(self):
        try:
            hpc_spikes.written_since(self.path, self.before)
        except ValueError:
            fail(f"{hpc_spikes.shown_path(self.program)} did not write {hpc_spikes.shown_path(self.path)}: the one there is an earlier "
                 "run's (is it hpc_benchmark?)")
        try:
            # Bounded, a regular file only (read_text() waited for a FIFO's
            # writer without end and read /dev/zero until memory ran out).
            s = hpc_spikes.read_json(self.path)
        except FileNotFoundError:
            fail(f"{hpc_spikes.shown_path(self.program)} wrote no {hpc_spikes.shown_path(self.path)} (is it hpc_benchmark?)")
        except (OSError, ValueError, RecursionError) as e:
            fail(f"{hpc_spikes.shown_path(self.path)} that {hpc_spikes.shown_path(self.program)} wrote cannot be read: {str(e)[:200]}")
        if not isinstance(s, dict):
            fail(f"{hpc_spikes.shown_path(self.path)} that {hpc_spikes.shown_path(self.program)} wrote is not a JSON object")
        return s

    def __exit__(self, kind, e, tb):
        if isinstance(e, (KeyError, TypeError, ValueError)):
            fail(f"{hpc_spikes.shown_path(self.path)} that {hpc_spikes.shown_path(self.program)} wrote is not the summary of a run "
                 f"(is it hpc_benchmark?): {type(e).__name__} {str(e)[:200]}")
        return False


def run_before(a, seed, lam, work):
    return run_ours(a, seed, lam, work, a.before, "before")


def run_nest(a, seed, lam, work):
    js = Path(work) / f"nest-{seed}-{lam}.json"
    cmd = [a.python, str(HERE / "nest_hpc_benchmark.py"), "--scale", str(a.scale), "--seed", str(seed),
           "--lambda", str(lam), "--t-presim", str(a.t_presim), "--t-sim", str(a.t_sim), "--threads", "1",
           "--json", str(js)]
    before = hpc_spikes.stamp(js)
    wall, cpu, _ = run_child(cmd, work)
    with summary_of(cmd[1], js, before) as s:
        w = s["weights"]
        return {"rate": s["mean_rate_hz"], "mean_pa": w["mean_pa"], "sd_pa": w["sd_pa"],
                "p5_pa": w["p5_pa"], "p95_pa": w["p95_pa"],
                "weights_from": f"{w['sources']} sources", "build_s": s["build_s"],
                "sim_s": s["simulate_s"], "sim_cpu_s": s["simulate_cpu_s"], "wall_s": wall,
                "cpu_s": cpu, "peak_rss": s["peak_rss_bytes"],
                "bytes_per_syn": s["bytes_per_synapse"]}


def build_of(*parts):
    """The SHA-256 (hex) of `parts`, each a path whose bytes are read (at most
    MAX_BINARY_BYTES) or a str taken as it is: the identity of a program's
    build, kept in every row it ran."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, str):
            h.update(part.encode("utf-8", errors="surrogateescape") + b"\0")
            continue
        try:
            # Bounded, a regular file only, as every file the tools read.
            h.update(hpc_spikes.read_regular(part, MAX_BINARY_BYTES))
        except hpc_spikes.SpikeFileError as e:
            fail(f"{hpc_spikes.shown_path(part)} cannot be read to tell its build: {e}")
        except OSError as e:
            fail(f"{hpc_spikes.shown_path(part)}: cannot be read to tell its build: {e.strerror or e}")
        h.update(b"\0")
    return h.hexdigest()


def builds(a):
    """The build of each engine this invocation runs (see build_of)."""
    b = {"ours": build_of(Path(a.hpc_benchmark)), "NEST": build_of(a.python, HERE / "nest_hpc_benchmark.py")}
    if a.before:
        b["before"] = build_of(Path(a.before))
    return b


def key(a, engine, seed, lam):
    # The build too: a row of an earlier build of the binary (same engine name,
    # seed and times) was reused and reported as this build's.
    return {"engine": engine, "seed": seed, "lambda": lam, "scale": a.scale, "t_presim": a.t_presim,
            "t_sim": a.t_sim, "build": a.builds[engine]}


def load(path):
    """The runs of the --results file (none when it does not exist yet): a regular
    file of JSON lines, at most MAX_RESULTS_BYTES; anything else is named, not read
    (a FIFO or /dev/zero would be read without end) or shown as a traceback."""
    if not path or not os.path.lexists(path):
        return []
    try:
        text = hpc_spikes.read_regular(path, MAX_RESULTS_BYTES).decode("utf-8", errors="replace")
    except hpc_spikes.SpikeFileError as e:
        # "PATH is a FIFO, not a regular file", "PATH is N bytes, more than ...".
        what = str(e)
        if what.startswith(f"{hpc_spikes.shown_path(path)} is "):
            what = what[len(f"{hpc_spikes.shown_path(path)} is "):]
        fail(f"--results {hpc_spikes.shown_path(path)}: {what} (a JSON-lines file of finished runs)")
    except OSError as e:
        fail(f"--results {hpc_spikes.shown_path(path)}: {e.strerror or e}")
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            # RecursionError: a line nested deeper than Python's recursion limit.
            fail(f"--results {hpc_spikes.shown_path(path)}: line {i} is not a JSON run: {e}")
        if not isinstance(row, dict):
            fail(f"--results {hpc_spikes.shown_path(path)}: line {i} is not a JSON object")
        # A row is reused as a finished run: every number the tables print must be
        # there (a hand-edited or foreign line was a KeyError's traceback).
        missing = next((k for k in RUN_NUMBERS if isinstance(row.get(k), bool)
                        or not isinstance(row.get(k), (int, float))
                        or not math.isfinite(row[k])), None)
        if missing is not None:
            fail(f"--results {hpc_spikes.shown_path(path)}: line {i} is not a finished run of this tool "
                 f"(no finite number {missing})")
        rows.append(row)
    return rows


def get(a, rows, engine, seed, lam, work):
    k = key(a, engine, seed, lam)
    for r in rows:
        if all(r.get(f) == v for f, v in k.items()):
            return r
    other = any(r.get("build") != k["build"] and all(r.get(f) == v for f, v in k.items() if f != "build")
                for r in rows)
    print(f"running {engine}, seed {seed}, lambda {lam}, scale {a.scale}"
          f"{' (the results hold a run of another build)' if other else ''} ...", file=sys.stderr, flush=True)
    res = {"ours": run_ours, "before": run_before, "NEST": run_nest}[engine](a, seed, lam, work)
    res.update(k)
    res["load"] = os.getloadavg()[0]
    rows.append(res)
    if a.results:
        # Appended without following a link planted at its name (open(..., "a")
        # appended the run to whatever it pointed to); a full disk or a file
        # removed since: one line, not a traceback.
        hpc_spikes.append_line(a.results, json.dumps(res), PROG)
    return res


def gib(b):
    return f"{b / 2**30:.2f} GiB"


def table(rows, baseline):
    out("| seed | engine | λ | regime | E rate (Hz) | weight drift (pA) | weight SD (pA) | 5 % / 95 % (pA) "
          "| build (s) | simulate wall / CPU (s) | process wall / CPU (s) | peak RSS | bytes/synapse | load |")
    out("|---:|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        out(f"| {r['seed']} | {r['engine']} | {r['lambda']:g} | {regime(r, baseline)} | {r['rate']:.2f} "
              f"| {r['mean_pa'] - JE0:+.3f} | {r['sd_pa']:.3f} | {r['p5_pa']:.2f} / {r['p95_pa']:.2f} "
              f"| {r['build_s']:.1f} | {r['sim_s']:.1f} / {r['sim_cpu_s']:.1f} | {r['wall_s']:.0f} / {r['cpu_s']:.0f} "
              f"| {gib(r['peak_rss'])} | {r['bytes_per_syn']:.1f} | {r['load']:.1f} |")


def regime(r, baseline):
    if r["lambda"] == 0:
        return "λ = 0"
    b = baseline.get(r["engine"])
    if b is None:
        return "?"
    return "runaway" if r["rate"] > RUNAWAY_FACTOR * b else "stable"


def spread(vals):
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.2f}"
    return f"{statistics.mean(vals):.2f} ± {statistics.stdev(vals):.2f} ({min(vals):.2f} to {max(vals):.2f})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hpc-benchmark", required=True, help="our release binary")
    p.add_argument("--python", default=sys.executable, help="a Python that imports NEST 3.10")
    p.add_argument("--layers", type=int, nargs="+", default=[2, 3], choices=[2, 3])
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--t-presim", type=float, default=50.0)
    p.add_argument("--t-sim", type=float, default=250.0)
    p.add_argument("--seeds-off", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--seeds-plastic", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--baseline-hz", type=float, nargs=2, metavar=("OURS", "NEST"),
                   help="lambda = 0 rates for the runaway rule when layer 2 is not run")
    p.add_argument("--results", help="JSON-lines file of finished runs (appended, reused)")
    p.add_argument("--keep", help="directory for both engines' outputs (default: a temporary one)")
    p.add_argument("--before", help="an older build of our binary, run beside ours on every seed")
    a = p.parse_args()
    # NaN passes every comparison: finite first, then the range.
    for flag, v, ok, must in [("--scale", a.scale, a.scale > 0, "above 0"),
                              ("--t-presim", a.t_presim, a.t_presim >= 0, ">= 0 ms"),
                              ("--t-sim", a.t_sim, a.t_sim > 0, "above 0 ms")]:
        if not (math.isfinite(v) and ok):
            p.error(f"{flag} {v}: must be a finite number {must}")
    if a.baseline_hz and not all(math.isfinite(b) and b > 0 for b in a.baseline_hz):
        p.error(f"--baseline-hz {a.baseline_hz[0]} {a.baseline_hz[1]}: rates must be finite and above 0")
    if a.keep and os.path.exists(a.keep) and not os.path.isdir(a.keep):
        p.error(f"--keep {hpc_spikes.shown_path(a.keep)}: exists and is not a directory")
    # Each finished run is appended to --results: its folder must be there before
    # the first run (minutes at scale 1), not found missing after it.
    if a.results and not os.path.isdir(os.path.dirname(os.path.abspath(a.results))):
        p.error(f"--results {hpc_spikes.shown_path(a.results)}: its folder does not exist")
    # Refused before the first run (minutes), not when its row is appended.
    if a.results and os.path.islink(a.results):
        p.error(f"--results {hpc_spikes.shown_path(a.results)} is a symbolic link: a results file is never appended "
                "through one (give the file it points to)")
    # Seeds and programs too (a seed beyond u64 failed in the binary, a --python
    # that is no program after the first of our runs, minutes at scale 1).
    for flag, seeds in [("--seeds-off", a.seeds_off), ("--seeds-plastic", a.seeds_plastic)]:
        bad = [s for s in seeds if not 0 <= s < 2**64]
        if bad:
            seed = str(bad[0]) if len(str(bad[0])) <= 24 else f"{str(bad[0])[:12]}..."
            p.error(f"{flag} {seed}: a seed is a whole number from 0 to 2^64 - 1")
    for flag, prog in [("--hpc-benchmark", a.hpc_benchmark), ("--before", a.before),
                       ("--python", a.python)]:
        if prog is not None and not (os.path.isfile(prog) and os.access(prog, os.X_OK)):
            p.error(f"{flag} {hpc_spikes.shown_path(prog)}: not an executable file")
    # The runs start in the work directory: a relative path (the docstring's
    # target/release/hpc_benchmark, --keep out) is taken from here, not from there.
    a.hpc_benchmark, a.python = os.path.abspath(a.hpc_benchmark), os.path.abspath(a.python)
    if a.before:
        a.before = os.path.abspath(a.before)
    a.builds = builds(a)
    rows = load(a.results)
    tmp = None
    if a.keep:
        Path(a.keep).mkdir(parents=True, exist_ok=True)
        work = os.path.abspath(a.keep)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="hpc-benchmark-validate-")
        work = tmp.name
    done, status, baseline = [], 0, {}
    if a.baseline_hz:
        baseline = {"ours": a.baseline_hz[0], "NEST": a.baseline_hz[1]}
    def engines(i):
        if not a.before:
            return ("ours", "NEST")
        return ("ours", "before", "NEST") if i % 2 == 0 else ("before", "ours", "NEST")

    if 2 in a.layers:
        off = [get(a, rows, e, s, 0.0, work) for i, s in enumerate(a.seeds_off) for e in engines(i)]
        done += off
        for e in ("ours", "NEST"):
            baseline[e] = statistics.mean(r["rate"] for r in off if r["engine"] == e)
        if a.before:
            baseline["before"] = statistics.mean(r["rate"] for r in off if r["engine"] == "before")
    if 3 in a.layers:
        done += [get(a, rows, e, s, 0.1, work) for i, s in enumerate(a.seeds_plastic) for e in engines(i)]
    out(f"hpc_benchmark against NEST 3.10, scale {a.scale}, {a.t_presim:g} ms warm-up + {a.t_sim:g} ms, "
          "1 thread each; weight drift from 45.61 pA (NEST: the synapses of the first 100 E sources; ours: all)")
    table(done, baseline)
    if 2 in a.layers:
        ours, nest = baseline["ours"], baseline["NEST"]
        dev = abs(ours - nest) / nest
        ok = dev <= RATE_TOLERANCE
        out(f"\nlayer 2 (λ = 0, seeds {a.seeds_off}): mean E rate ours {ours:.2f} Hz, NEST {nest:.2f} Hz, "
              f"{100 * dev:.1f} % apart: {'PASS' if ok else 'FAIL'} (within {100 * RATE_TOLERANCE:.0f} %)")
        status |= 0 if ok else 1
    if 3 in a.layers:
        out(f"\nlayer 3 (λ = 0.1, seeds {a.seeds_plastic}); runaway: rate > {RUNAWAY_FACTOR:g} x the engine's "
              "λ = 0 rate" + "".join(f", {e} {RUNAWAY_FACTOR * b:.1f} Hz" for e, b in baseline.items()))
        for e in ("ours", "before", "NEST"):
            plastic = [r for r in done if r["engine"] == e and r["lambda"] > 0]
            for reg in ("stable", "runaway", "?"):
                sel = [r for r in plastic if regime(r, baseline) == reg]
                if sel:
                    out(f"  {e:4} {reg:7} {len(sel)}/{len(plastic)} seeds: rate {spread([r['rate'] for r in sel])} Hz, "
                          f"drift {spread([r['mean_pa'] - JE0 for r in sel])} pA, "
                          f"SD {spread([r['sd_pa'] for r in sel])} pA")
    cost(done, a)
    return status


def cost(done, a):
    """Simulate CPU-seconds per biological second, per engine and lambda, and the ratios."""
    bio = (a.t_presim + a.t_sim) / 1000
    out(f"\nsimulate CPU-s per biological s (sum over the seeds' runs of {bio:g} s each; "
          f"load average {min(r['load'] for r in done):.1f} to {max(r['load'] for r in done):.1f})")
    for lam in sorted({r["lambda"] for r in done}):
        per = {}
        for e in ("ours", "before", "NEST"):
            sel = [r for r in done if r["engine"] == e and r["lambda"] == lam]
            if sel:
                per[e] = (sum(r["sim_cpu_s"] for r in sel), len(sel))
        line = ", ".join(f"{e} {c:.1f} CPU-s / {n} runs = {c / (n * bio):.2f}" for e, (c, n) in per.items())
        ratios = [f"NEST / {e} {per['NEST'][0] / per[e][0]:.1f}x" for e in ("ours", "before")
                  if e in per and "NEST" in per and per[e][0] > 0]
        if "ours" in per and "before" in per and per["before"][0] > 0:
            ratios.append(f"ours / before {per['ours'][0] / per['before'][0]:.2f}")
        out(f"  λ = {lam:g}: {line}; " + ", ".join(ratios))


if __name__ == "__main__":
    sys.exit(main())
