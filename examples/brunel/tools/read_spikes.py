#!/usr/bin/env python3
"""Summarise a spike file written by the brunel example (format "hpc-rs spikes", v1).

The file is read and checked by crates/hpc-spiking/python/hpc_spikes.py (the format and
every check are described there): a damaged file, an id beyond n_neurons, records
out of order or past the end of the run end in a one-line error and exit status 1.
A `.partial` file (interrupted run) reads the same, less an incomplete last record.
The summary needs numpy.

    python3 read_spikes.py brunel-out/spikes.spk          # summary
    from read_spikes import read; hdr, times_ms, ids = read(path)
"""
import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "..", "..", "..", "crates", "hpc-spiking", "python"))
import hpc_spikes  # noqa: E402

PROG = "read_spikes.py"


check_run = hpc_spikes.check_run
read = hpc_spikes.read_arrays
read_or_exit = hpc_spikes.read_arrays_or_exit
arrays = hpc_spikes.arrays


def stats(times_ms, ids, n_neurons, t_sim_ms):
    """Mean rate (Hz) and mean CV of ISIs over neurons with >= 2 ISIs.

    The same definition as the example's summary (population standard deviation).
    """
    import numpy as np

    rate = len(times_ms) / n_neurons / (t_sim_ms / 1000.0)
    order = np.lexsort((times_ms, ids))
    t, i = np.asarray(times_ms)[order], np.asarray(ids)[order]
    same = i[1:] == i[:-1]
    isi = np.diff(t)[same]
    # Sums per neuron that has ISIs (arrays as long as the spikes, never sized by
    # an id or n_neurons).
    _, owner = np.unique(i[1:][same], return_inverse=True)
    cnt = np.bincount(owner)
    s1 = np.bincount(owner, isi)
    s2 = np.bincount(owner, isi * isi)
    ok = cnt >= 2
    mean = s1[ok] / cnt[ok]
    var = np.maximum(s2[ok] / cnt[ok] - mean * mean, 0.0)
    cv = float(np.mean(np.sqrt(var) / mean)) if ok.any() else 0.0
    return rate, cv


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(f"usage: {PROG} FILE.spk", file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    check_run(path)
    f = hpc_spikes.read_or_exit(path, PROG)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"{PROG}: {path} is valid ({len(f)} spikes); the summary needs numpy "
              "(python3-numpy)", file=sys.stderr)
        sys.exit(1)
    header, t, ids = arrays(f)
    t_s = header["t_sim_ms"] / 1000.0
    print(f"{path}: {len(t)} spikes of {header['n_neurons']} neurons, "
          f"dt {header['dt_ms']} ms, t_sim {header['t_sim_ms']} ms")
    if header["n_neurons"] == 0 or t_s == 0:
        return
    rate, cv = stats(t, ids, header["n_neurons"], header["t_sim_ms"])
    for p in header["populations"]:
        sel = (ids >= p["first"]) & (ids < p["first"] + p["count"])
        rate_p = sel.sum() / p["count"] / t_s if p["count"] else 0.0
        print(f"  {p['name']:<11} {sel.sum():>10} spikes  {rate_p:.2f} Hz")
    print(f"  mean rate {rate:.2f} Hz, CV ISI {cv:.3f}")


if __name__ == "__main__":
    main()
