#!/usr/bin/env python3
"""Read a spike file written by the brunel example (format "hpc-rs spikes", v1).

Layout: magic b"HPCSPIKE", u32 version, u32 header length H, H bytes of JSON,
then records (tick: u32 LE, node_id: u32 LE); time_ms = tick * header["dt_ms"].
A `.partial` file (interrupted run) reads the same; a trailing partial record is
ignored.

    python3 read_spikes.py brunel-out/spikes.spk          # summary
    from read_spikes import read; hdr, times_ms, ids = read(path)
"""
import json
import os
import struct
import sys

import numpy as np


def check_run(path):
    """Warn (on stderr) when the run directory's run.json does not vouch for `path`:
    the file is not the run's, or the run is still running, was killed or stopped
    early. Returns the warning, or None."""
    manifest = os.path.join(os.path.dirname(path) or ".", "run.json")
    try:
        with open(manifest) as f:
            run = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        msg = f"{manifest} cannot be read ({e}): {path} is not vouched for"
    else:
        name = os.path.basename(path)
        status = run.get("status")
        if name not in [f.get("name") for f in run.get("files", [])]:
            msg = f"{path} was not written by the run {run.get('run_id')} of {manifest} (an older or foreign file)"
        elif status == "running":
            msg = f"{path}: its run {run.get('run_id')} (pid {run.get('pid')} on {run.get('host')}) is running or was killed"
        elif status == "incomplete":
            where = f" at {run['stopped_at']}" if run.get("stopped_at") else ""
            msg = f"{path}: its run is incomplete: {run.get('reason')}{where}"
        else:
            return None
    print(f"warning: {msg}", file=sys.stderr)
    return msg


def read(path):
    """Return (header dict, spike times in ms, node ids) of a spike file (with a
    warning on stderr when its run directory's run.json does not vouch for it)."""
    check_run(path)
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"HPCSPIKE":
        raise ValueError(f"{path} is not a spike file")
    version, hlen = struct.unpack_from("<II", data, 8)
    if version != 1:
        raise ValueError(f"unsupported version {version}")
    header = json.loads(data[16 : 16 + hlen].decode())
    body = data[16 + hlen :]
    body = body[: len(body) // 8 * 8]
    rec = np.frombuffer(body, dtype=[("tick", "<u4"), ("id", "<u4")])
    return header, rec["tick"] * header["dt_ms"], rec["id"].astype(np.int64)


def stats(times_ms, ids, n_neurons, t_sim_ms):
    """Mean rate (Hz) and mean CV of ISIs over neurons with >= 2 ISIs.

    The same definition as the example's summary (population standard deviation).
    """
    rate = len(times_ms) / n_neurons / (t_sim_ms / 1000.0)
    order = np.lexsort((times_ms, ids))
    t, i = np.asarray(times_ms)[order], np.asarray(ids)[order]
    same = i[1:] == i[:-1]
    isi = np.diff(t)[same]
    owner = i[1:][same]
    cnt = np.bincount(owner, minlength=n_neurons)
    s1 = np.bincount(owner, isi, minlength=n_neurons)
    s2 = np.bincount(owner, isi * isi, minlength=n_neurons)
    ok = cnt >= 2
    mean = s1[ok] / cnt[ok]
    var = np.maximum(s2[ok] / cnt[ok] - mean * mean, 0.0)
    cv = float(np.mean(np.sqrt(var) / mean)) if ok.any() else 0.0
    return rate, cv


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    header, t, ids = read(sys.argv[1])
    rate, cv = stats(t, ids, header["n_neurons"], header["t_sim_ms"])
    print(f"{sys.argv[1]}: {len(t)} spikes of {header['n_neurons']} neurons, "
          f"dt {header['dt_ms']} ms, t_sim {header['t_sim_ms']} ms")
    for p in header["populations"]:
        sel = (ids >= p["first"]) & (ids < p["first"] + p["count"])
        print(f"  {p['name']:<11} {sel.sum():>10} spikes  "
              f"{sel.sum() / p['count'] / (header['t_sim_ms'] / 1000.0):.2f} Hz")
    print(f"  mean rate {rate:.2f} Hz, CV ISI {cv:.3f}")


if __name__ == "__main__":
    main()
