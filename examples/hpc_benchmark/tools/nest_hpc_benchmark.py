#!/usr/bin/env python3
"""NEST 3.10's hpc_benchmark model, built for a side-by-side run with ours.

The model of NEST's pynest/examples/hpc_benchmark.py with the parameters of
examples/hpc_benchmark/src/params.rs (the two lists are compared in
validate.py's PARAMS): scale x 11,250 iaf_psc_alpha neurons, fixed in-degree
9,000 E + 2,250 I (multapses, no autapses), stdp_pl_synapse_hom_hpc on E->E,
static_synapse_hpc elsewhere, one poisson_generator to every neuron, 1.5 ms
delays, V_m from N(5.7, 7.2) mV, JE the 0.14 mV EPSP in pA.

Writes one JSON object (--json): the mean rate of the first 1,000 E neurons
after the warm-up, E->E weight statistics at the end (mean, SD, 5th and 95th
percentile) over the outgoing synapses of a sample of E sources (reading all
81 M weights at scale 1 needs more memory than the machine has), build and
simulate wall and CPU time, the resident memory before and after connecting,
bytes per synapse ((RSS after connect - RSS before) / synapses) and peak RSS.

    nest_hpc_benchmark.py --scale 1 --seed 1 --lambda 0 --json out.json
"""
import argparse
import json
import math
import resource
import sys
import time

from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent.parent / "crates" / "hpc-spiking" / "python"))
import hpc_spikes  # noqa: E402

PROG = "nest_hpc_benchmark.py"

try:
    import numpy as np
except ImportError as e:
    np = None
    NO_NUMPY = f"nest_hpc_benchmark.py needs numpy (python3-numpy): {e}"

TAU_SYN = 0.32582722403722841
NEURON = {
    "E_L": 0.0,
    "C_m": 250.0,
    "tau_m": 10.0,
    "t_ref": 0.5,
    "V_th": 20.0,
    "V_reset": 0.0,
    "tau_syn_ex": TAU_SYN,
    "tau_syn_in": TAU_SYN,
    "tau_minus": 30.0,
}


def rss_bytes():
    """Resident set size of this process now."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def psc_per_psp(tau_m, tau_syn, c_m):
    """pA of an alpha current whose PSP peaks at 1 mV (the script's conversion).

    The PSP's peak is found by golden-section search instead of the script's
    LambertW, so the number does not rest on the same formula as ours.
    """
    b = 1.0 / tau_syn - 1.0 / tau_m

    def psp(t):
        return (
            math.e
            / (tau_syn * c_m * b)
            * ((math.exp(-t / tau_m) - math.exp(-t / tau_syn)) / b - t * math.exp(-t / tau_syn))
        )

    lo, hi = 1e-9, 20.0 * tau_m
    for _ in range(200):  # golden-section search for the maximum
        m1, m2 = lo + (hi - lo) * 0.381966, hi - (hi - lo) * 0.381966
        if psp(m1) < psp(m2):
            lo = m1
        else:
            hi = m2
    return 1.0 / psp(0.5 * (lo + hi))


def build(nest, a):
    """Creates and connects the network; returns (E neurons, recorder, memory facts)."""
    ne, ni = int(9000 * a.scale), int(2250 * a.scale)
    ce, ci = 9000, 2250
    nest.ResetKernel()
    nest.set_verbosity("M_WARNING")
    nest.local_num_threads = a.threads
    nest.resolution = a.dt
    nest.rng_seed = a.seed
    e_pop = nest.Create("iaf_psc_alpha", ne, params=NEURON)
    i_pop = nest.Create("iaf_psc_alpha", ni, params=NEURON)
    vm = nest.random.normal(a.v_mean, a.v_sd)
    e_pop.V_m = vm
    i_pop.V_m = vm
    je = a.je_mv * psc_per_psp(NEURON["tau_m"], TAU_SYN, NEURON["C_m"])
    nu_th = NEURON["V_th"] / (ce * NEURON["tau_m"] / NEURON["C_m"] * je * math.e * TAU_SYN)
    drive = a.eta * nu_th * ce * 1000.0
    stim = nest.Create("poisson_generator", 1, {"rate": drive})
    rec = nest.Create("spike_recorder")
    nest.SetDefaults("static_synapse_hpc", {"delay": a.delay})
    nest.CopyModel("static_synapse_hpc", "hb_ex", {"weight": je})
    nest.CopyModel("static_synapse_hpc", "hb_in", {"weight": a.g * je})
    nest.SetDefaults(
        "stdp_pl_synapse_hom_hpc",
        {
            "delay": a.delay,
            "weight": je,
            "alpha": a.alpha,
            "lambda": a.lam,
            "mu": a.mu,
            "tau_plus": a.tau_plus,
        },
    )
    rss0 = rss_bytes()
    tic = time.perf_counter()
    cpu0 = time.process_time()
    both = e_pop + i_pop
    nest.Connect(stim, both, "all_to_all", {"synapse_model": "hb_ex"})

    def indeg(k):
        return {"rule": "fixed_indegree", "indegree": k, "allow_autapses": False, "allow_multapses": True}

    nest.Connect(e_pop, e_pop, indeg(ce), {"synapse_model": "stdp_pl_synapse_hom_hpc"})
    nest.Connect(i_pop, e_pop, indeg(ci), {"synapse_model": "hb_in"})
    nest.Connect(e_pop, i_pop, indeg(ce), {"synapse_model": "hb_ex"})
    nest.Connect(i_pop, i_pop, indeg(ci), {"synapse_model": "hb_in"})
    n_rec = min(1000, ne)
    nest.Connect(e_pop[:n_rec], rec, "all_to_all", "static_synapse_hpc")
    # Connections are sorted and their buffers sized in the first Prepare: count that
    # as building, as our build does, and take the memory after it.
    nest.Prepare()
    nest.Cleanup()
    facts = {
        "build_s": time.perf_counter() - tic,
        "build_cpu_s": time.process_time() - cpu0,
        "rss_before_connect": rss0,
        "rss_after_connect": rss_bytes(),
        "synapses": (ne + ni) * (ce + ci),
        "nest_connections": nest.num_connections,
        "je_pa": je,
        "drive_hz": drive,
        "n_rec": n_rec,
        "ne": ne,
    }
    return e_pop, rec, facts


def weights(nest, e_pop, n_sources):
    """E->E weights of the outgoing synapses of the first n_sources E neurons.

    Read a few sources at a time: NEST's connection handles take kilobytes each.
    """
    parts = []
    for lo in range(0, n_sources, 10):
        conns = nest.GetConnections(source=e_pop[lo : min(lo + 10, n_sources)], synapse_model="stdp_pl_synapse_hom_hpc")
        parts.append(np.asarray(conns.get("weight"), dtype=float))
        del conns
    return np.concatenate(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--t-presim", type=float, default=50.0)
    p.add_argument("--t-sim", type=float, default=250.0)
    p.add_argument("--dt", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lambda", dest="lam", type=float, default=0.1, help="STDP step size (0: plasticity off)")
    p.add_argument("--alpha", type=float, default=0.0513)
    p.add_argument("--mu", type=float, default=0.4)
    p.add_argument("--tau-plus", type=float, default=15.0)
    p.add_argument("--eta", type=float, default=1.685)
    p.add_argument("--g", type=float, default=-5.0)
    p.add_argument("--je-mv", type=float, default=0.14)
    p.add_argument("--delay", type=float, default=1.5)
    p.add_argument("--v-mean", type=float, default=5.7)
    p.add_argument("--v-sd", type=float, default=7.2)
    p.add_argument("--weight-sources", type=int, default=100, help="E sources whose E->E weights are read")
    p.add_argument("--json", required=True, help="file for the result")
    a = p.parse_args()
    if a.seed < 1 or a.seed >= 2**31:
        p.error(f"--seed {a.seed}: NEST's rng_seed must be in [1, 2^31)")
    if a.scale * 9000 < 2 or a.scale * 2250 < 2:
        p.error(f"--scale {a.scale}: at least 2 E and 2 I neurons are needed")
    if a.weight_sources < 1:
        p.error("--weight-sources must be at least 1")
    if np is None:
        sys.exit(NO_NUMPY)
    # A FIFO, a device or a name in /dev at --json is refused before NEST runs,
    # not after it (the result is written through a temporary file renamed over
    # the name, which no such name takes).
    try:
        hpc_spikes.check_output(a.json)
    except hpc_spikes.SpikeFileError as e:
        p.error(f"--json: {e}")

    try:
        import nest  # late: --help works without NEST
    except ImportError as e:
        sys.exit(f"nest_hpc_benchmark.py needs NEST's Python module (nest-simulator): {e}")

    e_pop, rec, facts = build(nest, a)
    tic, cpu0 = time.perf_counter(), time.process_time()
    nest.Simulate(a.t_presim + a.t_sim)
    sim_s, sim_cpu = time.perf_counter() - tic, time.process_time() - cpu0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before the weights are read
    times = np.asarray(rec.get("events")["times"], dtype=float)
    after = int(np.count_nonzero(times > a.t_presim))
    rate = after / (facts["n_rec"] * a.t_sim / 1000.0)
    w = weights(nest, e_pop, min(a.weight_sources, facts["ne"]))
    out = dict(facts)
    out.update(
        {
            "engine": "NEST " + nest.__version__,
            "scale": a.scale,
            "seed": a.seed,
            "lambda": a.lam,
            "threads": a.threads,
            "mean_rate_hz": rate,
            "recorded_spikes": int(times.size),
            "simulate_s": sim_s,
            "simulate_cpu_s": sim_cpu,
            "weights": {
                "count": int(w.size),
                "sources": min(a.weight_sources, facts["ne"]),
                "mean_pa": float(w.mean()),
                "sd_pa": float(w.std()),
                "p5_pa": float(np.percentile(w, 5)),
                "p95_pa": float(np.percentile(w, 95)),
            },
            "bytes_per_synapse": (facts["rss_after_connect"] - facts["rss_before_connect"]) / facts["synapses"],
            "peak_rss_bytes": peak,
        }
    )
    write_result(a.json, out)


def write_result(path, result):
    """Writes the JSON object `result` to path through a temporary file of its
    own renamed over the name (hpc_spikes.write_replacing): open(path, "w")
    wrote through a symbolic link planted at path into whatever it pointed to,
    and left half a file on a full disk. A failure ends the program with one line
    naming the file, status 1."""
    hpc_spikes.write_replacing(path, (json.dumps(result, indent=1) + "\n").encode(), PROG)


if __name__ == "__main__":
    main()
