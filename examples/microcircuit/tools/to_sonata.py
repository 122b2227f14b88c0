#!/usr/bin/env python3
"""Convert a spike file of the microcircuit example (native format, see
crates/hpc-spiking/python/read_spikes.py) into SONATA's HDF5 spike layout, readable by h5py, NEST, bmtk and
the other SONATA tools:

    /spikes                       attribute: magic = 0x0A7A (uint32), version = [0, 1]
    /spikes/<population>/         attribute: sorting = "by_time"
        timestamps  float64 (ms)  attribute: units = "ms"
        node_ids    uint64        ids within the population (0-based)

One SONATA population per population of the file (L23E, ...), or a single one
with global ids (--single NAME).

    python3 to_sonata.py microcircuit-out/spikes.spk spikes.h5 [--single cortex]

Needs numpy and h5py (pip install h5py).
"""
import argparse
import io
import os
import sys

try:
    import numpy as np
except ImportError:
    # One line, as for the other packages below, not a traceback.
    sys.exit("to_sonata.py needs numpy: pip install numpy h5py")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "crates", "hpc-spiking", "python"))
from read_spikes import hpc_spikes, read_or_exit  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("spikes")
ap.add_argument("out")
ap.add_argument("--single", metavar="NAME",
                help="one population NAME with the file's global ids")
a = ap.parse_args()
if a.single is not None and (not a.single or "/" in a.single or a.single in (".", "..")):
    # "" was taken as no --single; "/" would nest HDF5 groups (no SONATA population).
    ap.error(f"--single {a.single!r}: a population name, not empty, without '/'")
try:
    # Never onto a FIFO or a device (the rename below would replace it), nor onto
    # the spike file read (replaced by the HDF5 file).
    hpc_spikes.check_output(a.out, [a.spikes])
except hpc_spikes.SpikeFileError as e:
    sys.exit(f"to_sonata.py: {e}")
h, t, ids = read_or_exit(a.spikes, "to_sonata.py")

if a.single:
    parts = [(a.single, 0, h["n_neurons"])]
else:
    parts = [(p["name"], p["first"], p["count"]) for p in h["populations"]]
    # Each population is an HDF5 group named as the file names it: an empty
    # name, "/" (nested groups), "." or ".." or a name given twice ended in
    # h5py's traceback, with the temporary file left behind.
    seen = set()
    for name, _, _ in parts:
        if not name or "/" in name or name in (".", "..") or name in seen:
            why = "given twice" if name in seen else "empty, '.', '..' or with a '/'"
            sys.exit(f"to_sonata.py: {a.spikes}: population {hpc_spikes.shown(name)} is no "
                     f"SONATA population name ({why}); give --single NAME")
        seen.add(name)

try:
    import h5py
except ImportError:
    sys.exit("to_sonata.py needs h5py: pip install h5py")

order = np.lexsort((ids, t))
t, ids = t[order], ids[order]
# The HDF5 file is made in memory (h5py writing a full disk itself died of a
# segmentation fault), then written through a temporary file of its own (never
# OUT.tmp, whose planted link sent the file into what it pointed to), renamed
# over OUT when complete and removed when not.
buf = io.BytesIO()
with h5py.File(buf, "w") as f:
    g = f.create_group("spikes")
    g.attrs["magic"] = np.uint32(0x0A7A)
    g.attrs["version"] = np.array([0, 1], dtype=np.uint32)
    for name, first, count in parts:
        sel = (ids >= first) & (ids < first + count)
        p = g.create_group(name)
        p.attrs["sorting"] = "by_time"
        ts = p.create_dataset("timestamps", data=t[sel].astype(np.float64))
        ts.attrs["units"] = "ms"
        p.create_dataset("node_ids", data=(ids[sel] - first).astype(np.uint64))
hpc_spikes.write_replacing(a.out, buf.getbuffer(), "to_sonata.py")
hpc_spikes.say(f"{a.out}: {len(t)} spikes in {len(parts)} population(s)", "to_sonata.py")
