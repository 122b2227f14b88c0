#!/usr/bin/env python3
"""Read a spike file of the microcircuit example (format "hpc-rs spikes", v1) and
print per-population rates and CVs of ISIs over the recorded time.

Layout: magic b"HPCSPIKE", u32 version, u32 header length H, H bytes of JSON
(dt_ms, n_neurons, t_presim_ms, t_sim_ms = end of the run, populations
[{name, first, count}]), then records (tick: u32 LE, node_id: u32 LE);
time_ms = tick * dt_ms.

    python3 read_spikes.py microcircuit-out/spikes.spk
    from read_spikes import read, pop_stats
"""
import json
import struct
import sys

import numpy as np


def read(path):
    """Return (header dict, spike times in ms, node ids) of a spike file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"HPCSPIKE":
        raise ValueError(f"{path} is not a spike file")
    version, hlen = struct.unpack_from("<II", data, 8)
    if version != 1:
        raise ValueError(f"unsupported version {version}")
    header = json.loads(data[16:16 + hlen].decode())
    body = data[16 + hlen:]
    body = body[: len(body) // 8 * 8]
    rec = np.frombuffer(body, dtype=[("tick", "<u4"), ("id", "<u4")])
    return header, rec["tick"] * header["dt_ms"], rec["id"].astype(np.int64)


def pop_stats(times, ids, first, names, t_start, t_stop):
    """Per population: rate (Hz) over (t_start, t_stop] and mean CV of ISIs over
    neurons with >= 2 ISIs in that window (population standard deviation), the
    example's definitions."""
    times = np.asarray(times)
    ids = np.asarray(ids)
    sel = (times > t_start + 1e-9) & (times <= t_stop + 1e-9)
    t, i = times[sel], ids[sel]
    order = np.lexsort((t, i))
    t, i = t[order], i[order]
    n = int(first[-1])
    same = i[1:] == i[:-1]
    isi = np.diff(t)[same]
    owner = i[1:][same]
    cnt = np.bincount(owner, minlength=n)
    s1 = np.bincount(owner, isi, minlength=n)
    s2 = np.bincount(owner, isi * isi, minlength=n)
    spikes = np.bincount(i, minlength=n)
    out = []
    for k, name in enumerate(names):
        a, b = int(first[k]), int(first[k + 1])
        ok = cnt[a:b] >= 2
        mean = s1[a:b][ok] / cnt[a:b][ok]
        var = np.maximum(s2[a:b][ok] / cnt[a:b][ok] - mean * mean, 0.0)
        cv = float(np.mean(np.sqrt(var) / mean)) if ok.any() else 0.0
        out.append({"name": name, "neurons": b - a,
                    "rate_hz": float(spikes[a:b].sum()) / (b - a) / ((t_stop - t_start) / 1000.0),
                    "cv_isi": cv, "cv_neurons": int(ok.sum())})
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    h, t, ids = read(sys.argv[1])
    pops = h["populations"]
    first = [p["first"] for p in pops] + [pops[-1]["first"] + pops[-1]["count"]]
    res = pop_stats(t, ids, first, [p["name"] for p in pops], h.get("t_presim_ms", 0.0),
                    h["t_sim_ms"])
    print(f"{sys.argv[1]}: {len(t)} spikes of {h['n_neurons']} neurons, dt {h['dt_ms']} ms, "
          f"window ({h.get('t_presim_ms', 0.0)}, {h['t_sim_ms']}] ms")
    for r in res:
        print(f"  {r['name']:<6} {r['neurons']:>7} neurons  {r['rate_hz']:8.3f} Hz  "
              f"CV ISI {r['cv_isi']:.3f}")


if __name__ == "__main__":
    main()
