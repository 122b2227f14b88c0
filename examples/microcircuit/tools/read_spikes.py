#!/usr/bin/env python3
"""Read a spike file of the microcircuit example (format "hpc-rs spikes", v1) and
print per-population rates and CVs of ISIs over the recorded time.

The file is read and checked by crates/hpc-spiking/python/hpc_spikes.py (the
format's one Python reader; the format and every check are described there):
a damaged file, an id beyond n_neurons, records out of order or past the end of
the run end in a one-line error and exit status 1. The header holds dt_ms,
n_neurons, t_presim_ms, t_sim_ms = end of the run and populations
[{name, first, count}]; time_ms = tick * dt_ms. The statistics need numpy.

    python3 read_spikes.py microcircuit-out/spikes.spk
    from read_spikes import read, pop_stats
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


def pop_stats(times, ids, first, names, t_start, t_stop):
    """Per population: rate (Hz) over (t_start, t_stop] and mean CV of ISIs over
    neurons with >= 2 ISIs in that window (population standard deviation), the
    example's definitions."""
    import numpy as np

    times = np.asarray(times)
    ids = np.asarray(ids)
    sel = (times > t_start + 1e-9) & (times <= t_stop + 1e-9)
    t, i = times[sel], ids[sel]
    order = np.lexsort((t, i))
    t, i = t[order], i[order]
    same = i[1:] == i[:-1]
    isi = np.diff(t)[same]
    # Sums per neuron that has ISIs, by population (arrays as long as the spikes,
    # never sized by an id or a population's count).
    neuron, owner = np.unique(i[1:][same], return_inverse=True)
    cnt = np.bincount(owner, minlength=len(neuron))
    s1 = np.bincount(owner, isi, minlength=len(neuron))
    s2 = np.bincount(owner, isi * isi, minlength=len(neuron))
    out = []
    for k, name in enumerate(names):
        a, b = int(first[k]), int(first[k + 1])
        mine = (neuron >= a) & (neuron < b)
        ok = mine & (cnt >= 2)
        mean = s1[ok] / cnt[ok]
        var = np.maximum(s2[ok] / cnt[ok] - mean * mean, 0.0)
        cv = float(np.mean(np.sqrt(var) / mean)) if ok.any() else 0.0
        spikes = int(np.count_nonzero((i >= a) & (i < b)))
        out.append({"name": name, "neurons": b - a,
                    "rate_hz": spikes / (b - a) / ((t_stop - t_start) / 1000.0),
                    "cv_isi": cv, "cv_neurons": int(ok.sum())})
    return out


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(f"usage: {PROG} FILE.spk", file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    check_run(path)
    f = hpc_spikes.read_or_exit(path, PROG)
    h = f.header
    t_start = h.get("t_presim_ms", 0.0)
    if isinstance(t_start, bool) or not isinstance(t_start, (int, float)) \
            or not 0 <= t_start < h["t_sim_ms"]:
        print(f"{PROG}: {path}: t_presim_ms {t_start!r} is not a time before t_sim_ms "
              f"{h['t_sim_ms']}", file=sys.stderr)
        sys.exit(1)
    pops = h["populations"]
    if not pops or any(p["count"] == 0 for p in pops):
        print(f"{PROG}: {path}: a population without neurons, no statistics", file=sys.stderr)
        sys.exit(1)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"{PROG}: {path} is valid ({len(f)} spikes); the statistics need numpy "
              "(python3-numpy)", file=sys.stderr)
        sys.exit(1)
    _, t, ids = arrays(f)
    first = [p["first"] for p in pops] + [pops[-1]["first"] + pops[-1]["count"]]
    res = pop_stats(t, ids, first, [p["name"] for p in pops], t_start, h["t_sim_ms"])
    print(f"{path}: {len(t)} spikes of {h['n_neurons']} neurons, dt {h['dt_ms']} ms, "
          f"window ({t_start}, {h['t_sim_ms']}] ms")
    for r in res:
        print(f"  {r['name']:<6} {r['neurons']:>7} neurons  {r['rate_hz']:8.3f} Hz  "
              f"CV ISI {r['cv_isi']:.3f}")


if __name__ == "__main__":
    main()
