#!/usr/bin/env python3
"""Compare hpc-spiking's iaf_psc_alpha with NEST 3.10's, step by step.

Each case is one neuron driven by a spike generator (its `spike_weights` give
each input's weight, delay one step) and NEST's multimeter records V_m at the
end of every step. NEST adds a spike stamped `t` with delay `d` to dI at the
end of the step that ends at `t + d` (`iaf_psc_alpha::update` reads the input
slot after propagating), i.e. in our step `(t + d)/h - 1`; here `d = h`, so a
generator spike at `k h` is the input of our step `k`. The Rust example
`alpha_trace` runs the same inputs; V_m must agree to --atol (1e-12 mV) at
every step, and the spike steps exactly.

    python3 iaf_psc_alpha_vs_nest.py --alpha-trace path/to/alpha_trace
"""
import argparse
import json
import subprocess
import sys
import tempfile
import os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import hpc_spikes  # noqa: E402

import numpy as np  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--alpha-trace", required=True, help="the alpha_trace example binary")
ap.add_argument("--atol", type=float, default=1e-12)
ap.add_argument("--seed", type=int, default=4321)
a = ap.parse_args()

import nest  # noqa: E402

H = 0.1
STEPS = 20000  # 2 s
TAU_SYN_HPC = 0.32582722403722841
NEURONS = {
    # hpc_benchmark's neuron, NEST's defaults with different rise times,
    # tau_syn = tau_m (NEST's singular propagators), a constant current.
    "hpc_benchmark": dict(C_m=250.0, tau_m=10.0, t_ref=0.5, E_L=0.0, V_reset=0.0, V_th=20.0, I_e=0.0,
                          tau_syn_ex=TAU_SYN_HPC, tau_syn_in=TAU_SYN_HPC, V_m=5.7),
    "defaults": dict(C_m=250.0, tau_m=10.0, t_ref=2.0, E_L=-70.0, V_reset=-70.0, V_th=-55.0, I_e=0.0,
                     tau_syn_ex=2.0, tau_syn_in=0.5, V_m=-70.0),
    "singular": dict(C_m=250.0, tau_m=10.0, t_ref=1.0, E_L=-65.0, V_reset=-70.0, V_th=-50.0, I_e=0.0,
                     tau_syn_ex=10.0, tau_syn_in=10.0, V_m=-65.0),
    "current": dict(C_m=200.0, tau_m=15.0, t_ref=2.5, E_L=-60.0, V_reset=-65.0, V_th=-50.0, I_e=150.0,
                    tau_syn_ex=1.0, tau_syn_in=3.0, V_m=-60.0),
}
ORDER = ("C_m", "tau_m", "t_ref", "E_L", "V_reset", "V_th", "I_e", "tau_syn_ex", "tau_syn_in", "V_m")


def inputs(rng, rate_hz, w_ex, w_in):
    """Input steps (one spike a step at most) and weights: 80 % excitatory."""
    k = np.flatnonzero(rng.random(STEPS - 1) < rate_hz * H * 1e-3) + 1
    w = np.where(rng.random(k.size) < 0.8, w_ex, w_in) * rng.uniform(0.5, 1.5, k.size)
    return k, w


def main():
    rng = np.random.default_rng(a.seed)
    cases = []
    for name, p in NEURONS.items():
        for rate, w_ex, w_in in ((2000.0, 45.61, -228.0), (8000.0, 30.0, -100.0), (500.0, 400.0, -400.0)):
            k, w = inputs(rng, rate, w_ex, w_in)
            cases.append((name, p, k, w))
    nest.verbosity = nest.VerbosityLevel.ERROR
    nest.ResetKernel()
    nest.resolution = H
    mms = []
    for name, p, k, w in cases:
        n = nest.Create("iaf_psc_alpha", params=p)
        g = nest.Create("spike_generator", params={"spike_times": list(k * H), "spike_weights": list(w)})
        nest.Connect(g, n, syn_spec={"weight": 1.0, "delay": H})
        mm = nest.Create("multimeter", params={"record_from": ["V_m"], "interval": H})
        nest.Connect(mm, n)
        sr = nest.Create("spike_recorder")
        nest.Connect(n, sr)
        mms.append((mm, sr))
    nest.Simulate(STEPS * H + H)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cases.txt")
        lines = []
        for i, (name, p, k, w) in enumerate(cases):
            lines.append(" ".join(["case", str(i), repr(H), str(STEPS)] + [repr(float(p[x])) for x in ORDER]))
            lines.append(" ".join(["input"] + [f"{int(ki)} {float(wi)!r}" for ki, wi in zip(k, w)]))
        hpc_spikes.write_replacing(path, "".join(x + "\n" for x in lines).encode(), "iaf_psc_alpha_vs_nest.py")
        r = subprocess.run([a.alpha_trace, path], check=True, capture_output=True, text=True)
    ours = json.loads(r.stdout)["cases"]
    worst, bad, spikes_total, inputs_total = 0.0, 0, 0, 0
    for (name, p, k, w), (mm, sr), mine in zip(cases, mms, ours):
        ev = mm.events
        t, v = np.asarray(ev["times"]), np.asarray(ev["V_m"])
        steps_nest = np.rint(t / H).astype(int) - 1  # V_m at (k + 1) h ends our step k
        v_nest = np.full(STEPS, np.nan)
        sel = steps_nest < STEPS
        v_nest[steps_nest[sel]] = v[sel]
        v_ours = np.asarray(mine["v_m"])
        ok = ~np.isnan(v_nest)
        diff = np.abs(v_nest[ok] - v_ours[ok]).max()
        s_nest = sorted(int(round(x / H)) - 1 for x in sr.events["times"] if x / H - 1 < STEPS - 0.5)
        same_spikes = s_nest == mine["spikes"]
        worst = max(worst, diff)
        spikes_total += len(s_nest)
        inputs_total += len(k)
        if diff > a.atol or not same_spikes or ok.sum() < STEPS - 1:
            bad += 1
            print(f"{name}: max |dV| {diff:.3e} mV over {ok.sum()} steps, spikes NEST {len(s_nest)} "
                  f"ours {len(mine['spikes'])}", file=sys.stderr)
        print(f"{name:14s}: {len(k):5d} inputs, {len(s_nest):4d} spikes, {ok.sum()} steps, "
              f"max |V_NEST - V_ours| {diff:.2e} mV, spikes {'equal' if same_spikes else 'DIFFER'}")
    print(json.dumps(dict(nest=nest.__version__, cases=len(cases), inputs=inputs_total, spikes=spikes_total,
                          max_abs_mV=worst, failures=bad)))
    return 1 if bad else 0


sys.exit(main())
