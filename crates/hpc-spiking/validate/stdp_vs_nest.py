#!/usr/bin/env python3
"""Compare hpc-spiking's stdp_pl_synapse_hom with NEST 3.10's, weight by weight.

Each case is one synapse between two parrot neurons driven by spike generators
(resolution 0.1 ms, the synapse's delay 1.5 ms unless the case says otherwise,
the pre -> post synapse on the post parrot's port 1 so that it does not repeat
those spikes). NEST's weight_recorder gives the weight after every presynaptic
spike; the parrots' spikes, recorded, are given to the Rust example
`stdp_trace`, and the weights must agree to --rtol (1e-12) relative.

    python3 stdp_vs_nest.py --stdp-trace path/to/stdp_trace [--keep DIR]

Prints one summary line per family of cases and a final JSON line; exit status
1 if any weight differs by more than --rtol.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import hpc_spikes  # noqa: E402

import numpy as np  # noqa: E402

PROG = "stdp_vs_nest.py"

ap = argparse.ArgumentParser()
ap.add_argument("--stdp-trace", required=True, help="the stdp_trace example binary")
ap.add_argument("--rtol", type=float, default=1e-12)
ap.add_argument("--seed", type=int, default=12345)
ap.add_argument("--keep", metavar="DIR", help="keep the cases and both weight files in DIR")
a = ap.parse_args()

import nest  # noqa: E402  (after argparse: --help works without NEST)

H = 0.1
# Parameter sets: hpc_benchmark's E->E synapse, NEST's own test's, additive
# (mu = 0), multiplicative (mu = 1), and one whose depression clips at 0.
PARAMS = {
    "hpc_benchmark": dict(tau_plus=15.0, **{"lambda": 0.1}, alpha=0.0513, mu=0.4, tau_minus=30.0, weight=45.6096),
    "nest_test": dict(tau_plus=20.0, **{"lambda": 0.1}, alpha=1.0, mu=0.4, tau_minus=33.7, weight=0.5),
    "additive": dict(tau_plus=20.0, **{"lambda": 0.05}, alpha=0.5, mu=0.0, tau_minus=20.0, weight=1.0),
    "multiplicative": dict(tau_plus=20.0, **{"lambda": 0.05}, alpha=0.5, mu=1.0, tau_minus=20.0, weight=1.0),
    "clipping": dict(tau_plus=20.0, **{"lambda": 1.0}, alpha=2.0, mu=0.0, tau_minus=20.0, weight=3.0),
}


def steps(times_ms):
    return sorted(set(int(round(t / H)) for t in times_ms))


def poisson(rng, rate_hz, t_start, t_stop):
    p = rate_hz * H * 1e-3
    s = np.arange(int(round(t_start / H)), int(round(t_stop / H)))
    return list(s[rng.random(s.size) < p] * H)


def cases(rng):
    """(family, parameter set, delay, pre generator times, post generator times)."""
    out = []
    # One pair at every lag from -10 to +10 ms (the delay boundary included):
    # presynaptic spikes at 20 and 60 ms, the postsynaptic one at 20 + lag.
    for pset in ("hpc_benchmark", "nest_test", "additive", "multiplicative"):
        for lag in range(-100, 101):
            out.append(("pairs", pset, 1.5, [20.0, 60.0], [20.0 + lag * H]))
    # Bursts: presynaptic bursts around postsynaptic ones and the reverse.
    for pset in PARAMS:
        for gap in (0.1, 0.5, 1.0, 1.5, 2.0, 5.0):
            pre = [10 + i * gap for i in range(5)] + [60.0] + [100 + i * gap for i in range(5)] + [150.0]
            post = [30.0] + [70 + i * gap for i in range(5)] + [120.0] + [130 + i * gap for i in range(5)]
            out.append(("bursts", pset, 1.5, pre, post))
    # Long random trains, and NEST's own test's hand-placed sequence (every
    # order of pre and post, coincident ones included) after them, at several
    # delays.
    edge_pre = [1, 5, 6, 7, 9, 11, 12, 13, 14.5, 16.1, 21, 25, 26, 27, 29, 31, 32, 33, 34.5, 36.1]
    edge_post = [2, 3, 4, 8, 9, 10, 12, 12.2, 14.1, 15.4, 22, 23, 24, 28, 29, 30, 32, 33.2, 35.1, 36.4]
    for pset in PARAMS:
        for delay in (1.5, 1.0, 0.5, 0.1):
            for rate in (10.0, 50.0, 100.0):
                t_end = 4000.0
                pre = poisson(rng, rate, 1.0, t_end) + [t_end + 10 + t for t in edge_pre]
                post = poisson(rng, rate, 1.0, t_end) + [t_end + 10 + t for t in edge_post]
                out.append(("trains", pset, delay, pre, post))
    return out


def run_nest(all_cases):
    nest.verbosity = nest.VerbosityLevel.ERROR
    nest.ResetKernel()
    nest.resolution = H
    # The generators' connections have delay 0.1 ms: the network's shortest.
    nest.SetKernelStatus({"min_delay": H, "max_delay": 2.0})
    models = {}
    for pset, p in PARAMS.items():
        wr = nest.Create("weight_recorder")
        name = f"stdp_pl_{pset}"
        nest.CopyModel("stdp_pl_synapse_hom", name, {"weight_recorder": wr})
        nest.SetDefaults(name, {k: p[k] for k in ("tau_plus", "lambda", "alpha", "mu")})
        models[pset] = (name, wr)
    sr = nest.Create("spike_recorder")
    nodes = []
    t_max = 0.0
    for _, pset, delay, pre, post in all_cases:
        p = PARAMS[pset]
        gens = nest.Create("spike_generator", 2)
        gens[0].spike_times = [s * H for s in steps(pre)]
        gens[1].spike_times = [s * H for s in steps(post)]
        parrots = nest.Create("parrot_neuron", 2, params={"tau_minus": p["tau_minus"]})
        nest.Connect(gens[0], parrots[0], syn_spec={"delay": H})
        nest.Connect(gens[1], parrots[1], syn_spec={"delay": H})
        nest.Connect(parrots, sr)
        nest.Connect(parrots[0], parrots[1], syn_spec={
            "synapse_model": models[pset][0], "weight": p["weight"], "delay": delay, "receptor_type": 1})
        nodes.append((parrots[0].global_id, parrots[1].global_id))
        t_max = max(t_max, max(pre), max(post))
    nest.Simulate(t_max + 20.0)
    ev = sr.events
    spikes = {}
    for s, t in zip(ev["senders"], ev["times"]):
        spikes.setdefault(int(s), []).append(float(t))
    weights = {}
    for _, wr in models.values():
        e = wr.events
        for s, t, w in zip(e["senders"], e["times"], e["weights"]):
            weights.setdefault(int(s), []).append((float(t), float(w)))
    return nodes, spikes, weights


def main():
    rng = np.random.default_rng(a.seed)
    all_cases = cases(rng)
    nodes, spikes, weights = run_nest(all_cases)
    ours_in = []
    for i, ((family, pset, delay, _, _), (pre_id, post_id)) in enumerate(zip(all_cases, nodes)):
        p = PARAMS[pset]
        ours_in.append(dict(
            name=f"{i}", tau_plus=p["tau_plus"], alpha=p["alpha"], mu=p["mu"], tau_minus=p["tau_minus"],
            weight=p["weight"], delay=delay, min_delay=H, pre=sorted(spikes.get(pre_id, [])),
            post=sorted(spikes.get(post_id, [])), **{"lambda": p["lambda"]}))
    with tempfile.TemporaryDirectory() as tmp:
        d = a.keep or tmp
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "cases.txt")
        # Every file of --keep DIR through a temporary file of its own renamed
        # over its name: open(..., "w") wrote through a link planted there.
        lines = []
        # repr() writes each float exactly (shortest round-trip form).
        for c in ours_in:
            lines.append(" ".join(["case", c["name"]] + [repr(float(c[k])) for k in (
                "tau_plus", "lambda", "alpha", "mu", "tau_minus", "weight", "delay", "min_delay")]))
            lines.append(" ".join(["pre"] + [repr(t) for t in c["pre"]]))
            lines.append(" ".join(["post"] + [repr(t) for t in c["post"]]))
        hpc_spikes.write_replacing(path, "".join(x + "\n" for x in lines).encode(), PROG)
        r = subprocess.run([a.stdp_trace, path], check=True, capture_output=True, text=True)
        ours = json.loads(r.stdout)["cases"]
        if a.keep:
            hpc_spikes.write_replacing(os.path.join(d, "ours.json"), r.stdout.encode(), PROG)
            hpc_spikes.write_replacing(os.path.join(d, "nest.json"), json.dumps(
                {str(k): v for k, v in weights.items()}).encode(), PROG)
    fams = {}
    worst = (0.0, None)
    bad = 0
    for (family, pset, _, _, _), (pre_id, _), case, mine in zip(all_cases, nodes, ours_in, ours):
        theirs = sorted(weights.get(pre_id, []))
        f = fams.setdefault(family, dict(cases=0, pre=0, post=0, weights=0, max_rel=0.0, changed=0))
        f["cases"] += 1
        f["pre"] += len(case["pre"])
        f["post"] += len(case["post"])
        if len(theirs) != len(mine["weights"]):
            print(f"case {case['name']} ({family}, {pset}): NEST recorded {len(theirs)} weights, "
                  f"ours {len(mine['weights'])}", file=sys.stderr)
            bad += 1
            continue
        for (t_nest, w_nest), t_ours, w_ours in zip(theirs, mine["times"], mine["weights"]):
            if abs(t_nest - t_ours) > 1e-9:
                print(f"case {case['name']}: NEST's weight at {t_nest} ms, ours at {t_ours} ms", file=sys.stderr)
                bad += 1
                break
            rel = abs(w_nest - w_ours) / max(abs(w_nest), 1e-300) if w_nest != w_ours else 0.0
            f["weights"] += 1
            f["changed"] += w_nest != case["weight"]
            f["max_rel"] = max(f["max_rel"], rel)
            if rel > worst[0]:
                worst = (rel, (case["name"], family, pset, t_nest, w_nest, w_ours))
            if rel > a.rtol:
                bad += 1
    for name, f in fams.items():
        print(f"{name:7s}: {f['cases']:4d} cases, {f['pre']:6d} pre and {f['post']:6d} post spikes, "
              f"{f['weights']:6d} weights compared ({f['changed']} differ from the initial weight), "
              f"max relative difference {f['max_rel']:.2e}")
    if worst[1]:
        print(f"worst: case {worst[1][0]} ({worst[1][1]}, {worst[1][2]}) at {worst[1][3]} ms: "
              f"NEST {worst[1][4]!r}, ours {worst[1][5]!r}")
    print(json.dumps(dict(nest=nest.__version__, rtol=a.rtol, failures=bad, families=fams)))
    return 1 if bad else 0


sys.exit(main())
