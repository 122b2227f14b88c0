#!/usr/bin/env python3
"""The brunel example's network in Brian2, C++ standalone, one thread: the same
LIF/delta model, fixed in-degree (CE, CI, with multapses), delay 1.5 ms, Poisson
drive of rate CE*nu_ext with weight J, inputs discarded while refractory.

    python3 brian2_brunel.py --order 2500 --t-sim 1000 --v-reset 10

Prints one JSON line; simulate_s is Brian2's own timing of the compiled run
(`device._last_run_time`), compile_s the code generation and compilation.
"""
import argparse
import json
import tempfile
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--order", type=int, default=2500)
ap.add_argument("--ce", type=int)
ap.add_argument("--ci", type=int)
ap.add_argument("--v-reset", type=float, default=10.0)
ap.add_argument("--t-sim", type=float, default=1000.0)
ap.add_argument("--seed", type=int, default=12345)
a = ap.parse_args()

from brian2 import (NeuronGroup, PoissonInput, SpikeMonitor, Synapses, defaultclock,  # noqa: E402
                    device, ms, mV, prefs, run, seed, set_device)

workdir = tempfile.mkdtemp(prefix="brian2-brunel-")
set_device("cpp_standalone", directory=workdir, build_on_run=False)
prefs.devices.cpp_standalone.openmp_threads = 0
seed(a.seed)
defaultclock.dt = 0.1 * ms
NE, NI = 4 * a.order, a.order
N = NE + NI
CE = a.ce if a.ce is not None else int(0.1 * NE)
CI = a.ci if a.ci is not None else int(0.1 * NI)
tau, theta, Vr, tau_rp = 20 * ms, 20 * mV, a.v_reset * mV, 2 * ms
J, g, eta, D = 0.1 * mV, 5.0, 2.0, 1.5 * ms
nu_th = theta / (J * CE * tau)
nu_ext = eta * nu_th

neurons = NeuronGroup(N, "dv/dt = -v/tau : volt (unless refractory)",
                      threshold="v >= theta", reset="v = Vr", refractory=tau_rp,
                      method="exact")
neurons.v = 0 * mV
rng = np.random.default_rng(a.seed)
exc = Synapses(neurons, neurons, on_pre="v_post += J * int(not_refractory_post)", delay=D)
inh = Synapses(neurons, neurons, on_pre="v_post += -g * J * int(not_refractory_post)", delay=D)
tgt = np.repeat(np.arange(N), CE)
exc.connect(i=rng.integers(0, NE, size=N * CE), j=tgt)
tgt = np.repeat(np.arange(N), CI)
inh.connect(i=NE + rng.integers(0, NI, size=N * CI), j=tgt)
ext = PoissonInput(neurons, "v", CE, nu_ext, weight="J * int(not_refractory)")
mon = SpikeMonitor(neurons)
run(a.t_sim * ms)
t0 = time.time()
device.build(directory=workdir, compile=True, run=True, debug=False)
total = time.time() - t0
sim_s = device._last_run_time
spikes = int(mon.num_spikes)
print(json.dumps({"simulator": "Brian2 C++ standalone", "order": a.order, "ce": CE, "ci": CI,
                  "v_reset": a.v_reset, "spikes": spikes,
                  "rate_hz": spikes / N / (a.t_sim / 1000.0),
                  "simulate_s": sim_s, "compile_s": total - sim_s,
                  "synapses": int(len(exc) + len(inh))}))
