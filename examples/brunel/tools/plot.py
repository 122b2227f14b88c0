#!/usr/bin/env python3
"""Labelled raster and population-rate plots of a spike file (matplotlib).

    python3 plot.py brunel-out/spikes.spk [--out brunel-out/brunel.png] [--n 50]
"""
import argparse
import io
import os
import sys

try:
    import numpy as np
except ImportError:
    # One line, as for the other packages below, not a traceback.
    sys.exit("plot.py needs numpy: pip install numpy matplotlib")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "crates", "hpc-spiking", "python"))
from read_spikes import hpc_spikes, read_or_exit  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("spikes")
ap.add_argument("--out")
ap.add_argument("--n", type=int, default=50, help="neurons shown per population")
a = ap.parse_args()
if a.n < 1:
    sys.exit(f"plot.py: --n must be at least 1, got {a.n}")
out = a.out or os.path.splitext(a.spikes)[0] + ".png"
try:
    # Never into a FIFO (the write would wait for a reader for ever) or a device.
    # Nor onto the spike file read (`--out` naming it would replace it by the figure).
    hpc_spikes.check_output(out, [a.spikes])
except hpc_spikes.SpikeFileError as e:
    sys.exit(f"plot.py: {e}")
hdr, t, ids = read_or_exit(a.spikes, "plot.py")

try:
    import matplotlib  # noqa: E402
except ImportError:
    sys.exit("plot.py needs matplotlib: pip install matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pops = hdr["populations"]
fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(10, 6), height_ratios=[3, 1])
row = 0
for p, color in zip(pops, ["tab:blue", "tab:red"]):
    sel = (ids >= p["first"]) & (ids < p["first"] + min(a.n, p["count"]))
    ax1.plot(t[sel], ids[sel] - p["first"] + row, ".", ms=2, color=color, label=p["name"])
    row += min(a.n, p["count"])
ax1.set_ylabel("neuron")
ax1.legend(loc="upper right")
# A .partial file is drawn up to where its run stopped (its run.json's
# stopped_at, else its last spike): over the header's whole t_sim_ms, a run
# stopped at 441 ms of 100 s filled 0.4 % of the axis and its rate fell to 0.
end, until = hdr["t_sim_ms"], ""
if a.spikes.endswith(".partial"):
    at = hpc_spikes.stop_time_ms(a.spikes)
    if at is not None and 0 < at <= end:
        end, until = at, f" (drawn to {at} ms, where its run stopped)"
    elif len(t) and 0 < float(t.max()) < end:
        end = float(t.max())
        until = f" (drawn to its last spike, {end} ms: its run's end is not known)"
    ax1.set_xlim(0, end)
# Bins of 1 ms, at most 100,000 of them: a header's t_sim_ms of 1e15 (a valid
# file) asked numpy for 10^15 bins.
width = max(1.0, end / 100000)
bins = np.arange(0, end + width, width)
h, _ = np.histogram(t, bins)
ax2.plot(bins[:-1], h / max(hdr["n_neurons"], 1) / (width * 1e-3), color="k", lw=0.8)
ax2.set_xlabel("time (ms)")
ax2.set_ylabel("rate (Hz)")
ax1.set_title(f"Brunel network, {hdr['n_neurons']} neurons, {len(t)} spikes")
# Drawn in memory and written through a temporary file of its own: savefig
# onto OUT wrote through a link planted there.
buf = io.BytesIO()
try:
    fig.savefig(buf, format=os.path.splitext(out)[1][1:] or "png", dpi=100,
                bbox_inches="tight")
except ValueError as e:
    sys.exit(f"plot.py: --out {out}: {e}")
hpc_spikes.write_replacing(out, buf.getbuffer(), "plot.py")
hpc_spikes.say(out + until, "plot.py")
