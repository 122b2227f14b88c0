#!/usr/bin/env python3
"""The microcircuit in NEST (PyNEST 3.x), built as NEST's Potjans_2014 example
builds it, from the same TOML parameters as the Rust example, recording every
neuron; for validation and benchmarks (one process).

    python3 nest_microcircuit.py [--config microcircuit.toml] [--n-scaling 0.1]
        [--k-scaling 0.1] [--t-presim 500] [--t-sim 1000] [--seed 55]
        [--threads 1] [--dc] [--out DIR]

Prints one JSON line: per-population rates and mean CVs of ISIs over the recorded
time (after the warm-up), build and simulation wall and CPU times, peak memory,
synapses. With --out, also writes the spikes in the example's spike file format.
"""
import argparse
import json
import os
import resource
import struct
import sys
import time

try:
    import numpy as np
except ImportError as e:
    np = None
    NO_NUMPY = f"nest_microcircuit.py needs numpy (python3-numpy): {e}"

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "crates", "hpc-spiking", "python"))
import hpc_spikes  # noqa: E402
from read_spikes import pop_stats  # noqa: E402

PROG = "nest_microcircuit.py"

POPS = ["L23E", "L23I", "L4E", "L4I", "L5E", "L5I", "L6E", "L6I"]


def write_spikes(out, header, records):
    """Writes out/spikes.spk (out made when missing): the spike file's magic,
    version and JSON `header` (a dict), then `records`, the bytes of the
    (tick, id) pairs. Through a temporary file of its own renamed over the name
    (hpc_spikes.write_replacing): open(..., "wb") wrote through a symbolic link
    planted at out/spikes.spk into whatever it pointed to, and left half a file
    on a full disk. A failure ends the program with one line naming the file."""
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        print(f"{PROG}: cannot make --out {out}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    hdr = json.dumps(header).encode()
    hpc_spikes.write_replacing(os.path.join(out, "spikes.spk"),
                               b"HPCSPIKE" + struct.pack("<II", 1, len(hdr)) + hdr + records, PROG)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=os.path.join(HERE, "..", "microcircuit.toml"))
    ap.add_argument("--n-scaling", type=float)
    ap.add_argument("--k-scaling", type=float)
    ap.add_argument("--t-presim", type=float)
    ap.add_argument("--t-sim", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dc", action="store_true", help="DC instead of Poisson background")
    ap.add_argument("--out", help="write DIR/spikes.spk")
    a = ap.parse_args()
    if np is None:
        sys.exit(NO_NUMPY)
    if a.out:
        # A FIFO or a device at the spike file's name is refused before NEST runs.
        try:
            hpc_spikes.check_output(os.path.join(a.out, "spikes.spk"))
        except hpc_spikes.SpikeFileError as e:
            ap.error(str(e))

    # Bounded, a regular file only: open() of a FIFO given as --config waited
    # for a writer without end, /dev/zero was read until memory ran out.
    try:
        P = tomllib.loads(hpc_spikes.read_regular(a.config, hpc_spikes.MAX_METADATA_BYTES)
                          .decode("utf-8"))
    except (OSError, ValueError) as e:
        ap.error(f"--config {hpc_spikes.shown(a.config)}: {str(e)[:200]}")
    for k in ("n_scaling", "k_scaling", "t_presim", "t_sim", "seed"):
        v = getattr(a, k)
        if v is not None:
            P[k] = v
    if a.dc:
        P["input"] = "dc"
    nu = P["neuron"]
    pops = [P["populations"][p] for p in POPS]
    probs = np.array([P["conn_probs"][p] for p in POPS])
    n_full = np.array([q["n_full"] for q in pops], dtype=float)
    k_ext_full = np.array([q["k_ext"] for q in pops], dtype=float)
    rates_full = np.array([q["full_mean_rate"] for q in pops])
    ns, ks, dt = P["n_scaling"], P["k_scaling"], P["dt"]
    poisson = P["input"] == "poisson"

    # PSC amplitude whose PSP peaks at 1 mV (iaf_psc_exp).
    tm, ts, cm = nu["tau_m"], nu["tau_syn"], nu["c_m"]
    sub = 1.0 / (ts - tm)
    frac = (tm / ts) ** sub
    psc_over_psp = 1.0 / (tm * ts / cm * sub * (frac ** tm - frac ** ts))

    exc = np.arange(8) % 2 == 0
    psp = np.where(exc, P["psp_exc_mean"], P["psp_exc_mean"] * P["g"])[None, :].repeat(8, 0)
    psp[0, 2] *= 2.0
    w = psp * psc_over_psp
    w_ext = P["psp_exc_mean"] * psc_over_psp
    prod = np.outer(n_full, n_full)
    with np.errstate(divide="ignore"):
        full_syn = np.log(1.0 - probs) / np.log((prod - 1.0) / prod)
    sizes = np.round(n_full * ns).astype(int)
    n_syn = np.round(full_syn * ns * ks).astype(int)
    k_ext = np.round(k_ext_full * ks).astype(int)
    dc = np.zeros(8) if poisson else P["bg_rate"] * k_ext_full * w_ext * ts * 0.001
    if ks != 1:
        indeg = full_syn / n_full[:, None]
        rec_in = np.sum(w * indeg * rates_full, axis=1)
        dc = dc + 0.001 * ts * (1 - np.sqrt(ks)) * rec_in
        if poisson:
            dc = dc + 0.001 * ts * (1 - np.sqrt(ks)) * w_ext * k_ext_full * P["bg_rate"]
        w = w / np.sqrt(ks)
        w_ext = w_ext / np.sqrt(ks)
    d_mean = np.where(exc, P["delay_exc_mean"], P["delay_inh_mean"])[None, :].repeat(8, 0)

    try:
        import nest  # noqa: E402
    except ImportError as e:
        sys.exit(f"nest_microcircuit.py needs NEST's Python module (nest-simulator): {e}")

    nest.set_verbosity("M_WARNING")
    nest.ResetKernel()
    t0 = time.time()
    c0 = time.process_time()
    nest.SetKernelStatus({"resolution": dt, "local_num_threads": a.threads,
                          "rng_seed": int(P["seed"]), "print_time": False})
    nodes = []
    for i, p in enumerate(POPS):
        pop = nest.Create("iaf_psc_exp", int(sizes[i]))
        pop.set({"tau_syn_ex": ts, "tau_syn_in": ts, "E_L": nu["e_l"], "V_th": nu["v_th"],
                 "V_reset": nu["v_reset"], "t_ref": nu["t_ref"], "C_m": cm, "tau_m": tm,
                 "I_e": float(dc[i])})
        if P["v0_type"] == "optimized":
            pop.set(V_m=nest.random.normal(mean=pops[i]["v0_mean"], std=pops[i]["v0_std"]))
        else:
            pop.set(V_m=nest.random.normal(mean=-58.0, std=10.0))
        nodes.append(pop)
    rec = nest.Create("spike_recorder")
    for pop in nodes:
        nest.Connect(pop, rec)
    if poisson:
        for i, pop in enumerate(nodes):
            pg = nest.Create("poisson_generator", params={"rate": P["bg_rate"] * k_ext[i]})
            nest.Connect(pg, pop, "all_to_all", {"weight": w_ext, "delay": 1.5})
    for i, tgt in enumerate(nodes):
        for j, src in enumerate(nodes):
            if n_syn[i, j] <= 0:
                continue
            lo, hi = (0.0, np.inf) if w[i, j] >= 0 else (-np.inf, 0.0)
            syn = {
                "synapse_model": "static_synapse",
                "weight": nest.math.redraw(
                    nest.random.normal(mean=w[i, j], std=abs(w[i, j] * P["weight_rel_std"])),
                    min=lo, max=hi),
                "delay": nest.math.redraw(
                    nest.random.normal(mean=d_mean[i, j], std=d_mean[i, j] * P["delay_rel_std"]),
                    min=0.5 * dt, max=np.inf),
            }
            nest.Connect(src, tgt, {"rule": "fixed_total_number", "N": int(n_syn[i, j])}, syn)
    build_s = time.time() - t0
    build_cpu = time.process_time() - c0
    t1 = time.time()
    c1 = time.process_time()
    nest.Simulate(P["t_presim"])
    t2 = time.time()
    c2 = time.process_time()
    nest.Simulate(P["t_sim"])
    t3 = time.time()
    c3 = time.process_time()
    ev = rec.get("events")
    first = np.concatenate([[0], np.cumsum(sizes)])
    ids = ev["senders"] - 1
    times = ev["times"]
    T = P["t_presim"] + P["t_sim"]
    res = pop_stats(times, ids, first, POPS, P["t_presim"], T)
    if a.out:
        ticks = np.rint(times / dt).astype("<u4")
        order = np.lexsort((ids, ticks))
        header = {"format": "hpc-rs spikes", "version": 1, "dt_ms": dt,
                  "t_presim_ms": P["t_presim"], "t_sim_ms": T, "n_neurons": int(first[-1]),
                  "populations": [{"name": p, "first": int(first[i]), "count": int(sizes[i])}
                                  for i, p in enumerate(POPS)],
                  "model": f"NEST {nest.__version__}"}
        rec_arr = np.empty(len(order), dtype=[("t", "<u4"), ("id", "<u4")])
        rec_arr["t"], rec_arr["id"] = ticks[order], ids[order]
        write_spikes(a.out, header, rec_arr.tobytes())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "simulator": f"NEST {nest.__version__}", "n_scaling": ns, "k_scaling": ks,
        "seed": P["seed"], "threads": a.threads, "input": P["input"],
        "t_presim_ms": P["t_presim"], "t_sim_ms": P["t_sim"], "neurons": int(first[-1]),
        "synapses": int(nest.GetKernelStatus("num_connections")),
        "populations": res, "build_s": build_s, "build_cpu_s": build_cpu,
        "presim_s": t2 - t1, "simulate_s": t3 - t2, "simulate_cpu_s": c3 - c2,
        "real_time_factor": (t3 - t2) / (P["t_sim"] / 1000.0),
        "peak_rss_mib": ru.ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
