#!/usr/bin/env python3
"""Read a spike file of a spiking-network example (brunel, microcircuit,
hpc_benchmark: format "hpc-rs spikes", v1) and print per-population rates and
CVs of ISIs over the recorded time, then those of all neurons.

The file is read and checked by hpc_spikes.py beside this file (the format's
one Python reader; the format and every check are described there): a damaged
file, an id beyond n_neurons, records out of order or past the end of the run
end in a one-line error and exit status 1. A `.partial` file (interrupted run)
reads the same, less an incomplete last record, and is rated up to where its
run stopped (its run.json's stopped_at, else its last spike), not to t_sim_ms. The header holds dt_ms,
n_neurons, t_sim_ms = end of the run, populations [{name, first, count}] and,
where the run had a warm-up, t_presim_ms (the statistics count the spikes after
it); time_ms = tick * dt_ms. The statistics need numpy.

    python3 crates/hpc-spiking/python/read_spikes.py brunel-out/spikes.spk
    from read_spikes import read, stats, pop_stats
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hpc_spikes  # noqa: E402

PROG = "read_spikes.py"


check_run = hpc_spikes.check_run
read = hpc_spikes.read_arrays
read_or_exit = hpc_spikes.read_arrays_or_exit
arrays = hpc_spikes.arrays


def _cv_sums(t, i):
    """Per neuron with ISIs among the spikes `t` (ms) of neurons `i`, sorted by
    neuron then time: its id, ISI count, sum and sum of squares (arrays as long
    as the spikes, never sized by an id or n_neurons)."""
    import numpy as np
    same = i[1:] == i[:-1]
    isi = np.diff(t)[same]
    neuron, owner = np.unique(i[1:][same], return_inverse=True)
    cnt = np.bincount(owner, minlength=len(neuron))
    s1 = np.bincount(owner, isi, minlength=len(neuron))
    s2 = np.bincount(owner, isi * isi, minlength=len(neuron))
    return neuron, cnt, s1, s2


def _mean_cv(ok, cnt, s1, s2):
    """Mean CV of ISIs over the neurons `ok` selects (population SD)."""
    import numpy as np
    mean = s1[ok] / cnt[ok]
    var = np.maximum(s2[ok] / cnt[ok] - mean * mean, 0.0)
    return float(np.mean(np.sqrt(var) / mean)) if ok.any() else 0.0


def stats(times_ms, ids, n_neurons, t_sim_ms):
    """Mean rate (Hz) of all spikes and mean CV of ISIs over neurons with >= 2
    ISIs: the brunel example's definitions (population standard deviation)."""
    import numpy as np
    rate = len(times_ms) / n_neurons / (t_sim_ms / 1000.0)
    order = np.lexsort((times_ms, ids))
    t, i = np.asarray(times_ms)[order], np.asarray(ids)[order]
    _, cnt, s1, s2 = _cv_sums(t, i)
    return rate, _mean_cv(cnt >= 2, cnt, s1, s2)


def pop_stats(times, ids, first, names, t_start, t_stop):
    """Per population: rate (Hz) over (t_start, t_stop] and mean CV of ISIs over
    neurons with >= 2 ISIs in that window (population standard deviation), the
    microcircuit example's definitions; population k is neurons first[k] to
    first[k + 1]."""
    import numpy as np
    times = np.asarray(times)
    ids = np.asarray(ids)
    sel = (times > t_start + 1e-9) & (times <= t_stop + 1e-9)
    t, i = times[sel], ids[sel]
    order = np.lexsort((t, i))
    t, i = t[order], i[order]
    neuron, cnt, s1, s2 = _cv_sums(t, i)
    out = []
    for k, name in enumerate(names):
        a, b = int(first[k]), int(first[k + 1])
        mine = (neuron >= a) & (neuron < b)
        ok = mine & (cnt >= 2)
        spikes = int(np.count_nonzero((i >= a) & (i < b)))
        out.append({"name": name, "neurons": b - a,
                    "rate_hz": spikes / (b - a) / ((t_stop - t_start) / 1000.0),
                    "cv_isi": _mean_cv(ok, cnt, s1, s2), "cv_neurons": int(ok.sum())})
    return out


def window_end(path, h, t, t_start):
    """The end of the window the rates are over, and a note saying why it is not
    the header's t_sim_ms: a `.partial` file ends where its run stopped (its
    run.json's stopped_at: "--stop-at", a signal) or, where that is not said (a
    killed run), at its last spike; its rates were taken over the whole run it
    was meant to be (a run stopped at 441 ms of 100 s read 0.16 Hz for 37 Hz)."""
    end = h["t_sim_ms"]
    if not path.endswith(".partial"):
        return end, ""
    at = hpc_spikes.stop_time_ms(path)
    if at is not None and at <= end:
        if at <= t_start:
            within = f", within the warm-up (t_presim_ms {t_start})" if t_start > 0 else ""
            print(f"{PROG}: {hpc_spikes.shown_path(path)}: its run stopped at {at} ms{within}: no time to rate",
                  file=sys.stderr)
            sys.exit(1)
        return at, " (where its run stopped)"
    last = float(t.max()) if len(t) else 0.0
    if last <= t_start:
        print(f"{PROG}: {hpc_spikes.shown_path(path)}: no spike after the warm-up (t_presim_ms {t_start}) in "
              "this partial file, whose run's end is not known: no rates", file=sys.stderr)
        sys.exit(1)
    return min(last, end), " (to its last spike: its run's end is not known)"


def main():
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print(f"usage: {PROG} FILE.spk", file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    check_run(path)
    f = hpc_spikes.read_or_exit(path, PROG)
    h = f.header
    if h["t_sim_ms"] == 0:
        # brunel's t_sim = 0 writes such a file; it has no window to rate.
        print(f"{PROG}: {hpc_spikes.shown_path(path)} is valid ({len(f)} spikes), but its run is 0 ms long "
              "(t_sim_ms 0): no rates", file=sys.stderr)
        sys.exit(1)
    t_start = h.get("t_presim_ms", 0.0)
    if isinstance(t_start, bool) or not isinstance(t_start, (int, float)) \
            or not 0 <= t_start < h["t_sim_ms"]:
        print(f"{PROG}: {hpc_spikes.shown_path(path)}: t_presim_ms {hpc_spikes.shown(t_start)} is not a time before t_sim_ms "
              f"{h['t_sim_ms']}", file=sys.stderr)
        sys.exit(1)
    pops = h["populations"]
    if not pops or any(p["count"] == 0 for p in pops):
        print(f"{PROG}: {hpc_spikes.shown_path(path)}: a population without neurons, no statistics", file=sys.stderr)
        sys.exit(1)
    try:
        import numpy  # noqa: F401
    except ImportError:
        print(f"{PROG}: {hpc_spikes.shown_path(path)} is valid ({len(f)} spikes); the statistics need numpy "
              "(python3-numpy)", file=sys.stderr)
        sys.exit(1)
    _, t, ids = arrays(f)
    t_stop, until = window_end(path, h, t, t_start)
    first = [p["first"] for p in pops] + [pops[-1]["first"] + pops[-1]["count"]]
    res = pop_stats(t, ids, first, [p["name"] for p in pops], t_start, t_stop)
    if len(pops) > 1:
        res += pop_stats(t, ids, [first[0], first[-1]], ["all"], t_start, t_stop)
    hpc_spikes.say("\n".join(result_lines(path, len(t), h, (t_start, t_stop, until), res)),
                   PROG)


def result_lines(path, spikes, h, window, res):
    """The lines read_spikes.py prints: the file, then one per population of res
    (pop_stats' rows). A population's name is the file's: quoted, its control
    characters escaped, when it holds a line break or a terminal's escape (it was
    written as it was, a forged name drawing on the terminal), and cut when long."""
    t_start, t_stop, until = window
    lines = [f"{hpc_spikes.shown_path(path)}: {spikes} spikes of {h['n_neurons']} neurons, dt {h['dt_ms']} ms, "
             f"window ({t_start}, {t_stop}] ms{until}"]
    for r in res:
        lines.append(f"  {hpc_spikes._word(r['name']):<6} {r['neurons']:>7} neurons  "
                     f"{r['rate_hz']:8.3f} Hz  CV ISI {r['cv_isi']:.3f}")
    return lines


if __name__ == "__main__":
    main()
