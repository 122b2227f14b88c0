#!/usr/bin/env python3
"""NEST's brunel_delta_nest.py with the brunel example's parameters, recording
every neuron, for validation and benchmarks (single process, no MPI).

    python3 nest_brunel.py --order 2500 --t-sim 1000 --v-reset 0 [--ce 100 --ci 25]

Prints one JSON line: spikes, rate_hz, cv_isi, build_s, simulate_s, cpu_s.
"""
import argparse
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "crates", "hpc-spiking", "python"))
from read_spikes import stats  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--order", type=int, default=2500)
ap.add_argument("--ce", type=int)
ap.add_argument("--ci", type=int)
ap.add_argument("--v-reset", type=float, default=0.0)
ap.add_argument("--t-sim", type=float, default=1000.0)
ap.add_argument("--seed", type=int, default=12345)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--no-record", action="store_true", help="benchmark without recording")
a = ap.parse_args()

try:
    import nest  # noqa: E402
except ImportError as e:
    sys.exit(f"nest_brunel.py needs NEST's Python module (nest-simulator): {e}")

nest.set_verbosity("M_WARNING")
nest.ResetKernel()
dt, delay, g, eta, epsilon, J = 0.1, 1.5, 5.0, 2.0, 0.1, 0.1
NE, NI = 4 * a.order, a.order
CE = a.ce if a.ce is not None else int(epsilon * NE)
CI = a.ci if a.ci is not None else int(epsilon * NI)
tauMem, theta = 20.0, 20.0
neuron_params = {"C_m": 1.0, "tau_m": tauMem, "t_ref": 2.0, "E_L": 0.0,
                 "V_reset": a.v_reset, "V_m": 0.0, "V_th": theta}
nu_th = theta / (J * CE * tauMem)
nu_ex = eta * nu_th
p_rate = 1000.0 * nu_ex * CE

t0 = time.time()
nest.SetKernelStatus({"resolution": dt, "print_time": False,
                      "local_num_threads": a.threads, "rng_seed": a.seed})
nest.SetDefaults("iaf_psc_delta", neuron_params)
nest.SetDefaults("poisson_generator", {"rate": p_rate})
nodes_ex = nest.Create("iaf_psc_delta", NE)
nodes_in = nest.Create("iaf_psc_delta", NI)
noise = nest.Create("poisson_generator")
rec = nest.Create("spike_recorder")
nest.CopyModel("static_synapse", "excitatory", {"weight": J, "delay": delay})
nest.CopyModel("static_synapse", "inhibitory", {"weight": -g * J, "delay": delay})
nest.Connect(noise, nodes_ex, syn_spec="excitatory")
nest.Connect(noise, nodes_in, syn_spec="excitatory")
if not a.no_record:
    nest.Connect(nodes_ex + nodes_in, rec, syn_spec="excitatory")
nest.Connect(nodes_ex, nodes_ex + nodes_in, {"rule": "fixed_indegree", "indegree": CE}, "excitatory")
nest.Connect(nodes_in, nodes_ex + nodes_in, {"rule": "fixed_indegree", "indegree": CI}, "inhibitory")
build_s = time.time() - t0
c0 = time.process_time()
t1 = time.time()
nest.Simulate(a.t_sim)
sim_s = time.time() - t1
sim_cpu = time.process_time() - c0
ev = rec.get("events")
ids = ev["senders"] - 1  # NEST ids start at 1
times = ev["times"]
n = NE + NI
spikes = int(nest.GetKernelStatus("local_spike_counter"))
rate, cv = stats(times, ids, n, a.t_sim) if not a.no_record else (spikes / n / (a.t_sim / 1000), float("nan"))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"simulator": f"NEST {nest.__version__}", "order": a.order, "ce": CE, "ci": CI,
                  "v_reset": a.v_reset, "t_sim_ms": a.t_sim, "spikes": spikes, "rate_hz": rate,
                  "cv_isi": cv, "build_s": build_s, "simulate_s": sim_s, "simulate_cpu_s": sim_cpu,
                  "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mib": ru.ru_maxrss / 1024,
                  "synapses": int(nest.GetKernelStatus("num_connections"))}))
