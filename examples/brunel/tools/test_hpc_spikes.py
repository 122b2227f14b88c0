#!/usr/bin/env python3
"""Tests of the Python spike-file reader (crates/hpc-spiking/python/hpc_spikes.py) and of the
read_spikes.py tool beside it: standard library only (numpy where installed).

    python3 -m unittest discover -s examples/brunel/tools -p 'test_*.py'

The brunel crate's test `tests/python_reader.rs` runs this with SPIKES_FROM_RUST set
to a directory of files written by the brunel binary (a run's spikes.spk and the
spikes.spk.partial of a stopped run), which are then checked too.
"""
import contextlib
import io
import json
import os
import stat
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
READER_DIR = os.path.join(HERE, "..", "..", "..", "crates", "hpc-spiking", "python")
READER = os.path.join(READER_DIR, "hpc_spikes.py")
sys.path.insert(0, READER_DIR)
import hpc_spikes  # noqa: E402
from hpc_spikes import SpikeFileError, decode  # noqa: E402

READ_SPIKES = os.path.join(READER_DIR, "read_spikes.py")

try:
    import numpy  # noqa: F401
    HAVE_NUMPY = True
except ImportError:
    HAVE_NUMPY = False
try:
    import h5py  # noqa: F401
    HAVE_H5PY = True
except ImportError:
    HAVE_H5PY = False
try:
    import matplotlib  # noqa: F401
    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False


def header(**over):
    h = {"format": "hpc-rs spikes", "version": 1, "dt_ms": 0.1, "t_sim_ms": 10.0,
         "n_neurons": 100,
         "populations": [{"name": "excitatory", "first": 0, "count": 80},
                         {"name": "inhibitory", "first": 80, "count": 20}]}
    h.update(over)
    return {k: v for k, v in h.items() if v is not None}


def spk(recs, hdr=None, magic=b"HPCSPIKE", version=1, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(hdr or header()).encode()
    body = b"".join(struct.pack("<II", t, i) for t, i in recs)
    return magic + struct.pack("<II", version, len(h)) + h + body


GOOD = [(1, 3), (1, 99), (4, 0), (100, 5), (101, 5)]


class Decode(unittest.TestCase):
    def refused(self, data, *words, partial_ok=False):
        with self.assertRaises(SpikeFileError) as cm:
            decode(data, partial_ok)
        msg = str(cm.exception)
        for w in words:
            self.assertIn(w, msg)
        self.assertNotIn("\n", msg)
        return msg

    def test_a_valid_file_reads_every_record(self):
        f = decode(spk(GOOD))
        self.assertEqual(list(zip(f.ticks, f.ids)), GOOD)
        self.assertEqual((f.n_neurons, f.dt_ms, f.dropped_bytes), (100, 0.1, 0))
        self.assertAlmostEqual(f.times_ms()[3], 10.0)

    def test_a_header_only_file_is_a_run_without_spikes(self):
        f = decode(spk([]))
        self.assertEqual(len(f), 0)

    def test_too_short_and_empty_files_are_refused(self):
        self.refused(b"", "0 bytes is too short")
        self.refused(spk(GOOD)[:10], "10 bytes is too short")

    def test_bad_magic_and_version_are_refused(self):
        self.refused(spk(GOOD, magic=b"HPCSPIKF"), "not a spike file")
        self.refused(spk(GOOD, version=2), "format version 2")

    def test_a_header_length_beyond_the_file_is_refused(self):
        b = bytearray(spk(GOOD))
        b[15] = 0x7F
        self.refused(bytes(b), "the header claims", "truncated")
        self.refused(spk(GOOD)[:40], "the header claims")

    def test_a_truncated_record_is_refused_or_dropped_for_a_partial_file(self):
        cut = spk(GOOD)[:-3]
        self.refused(cut, "5 bytes into a record")
        f = decode(cut, partial_ok=True)
        self.assertEqual((len(f), f.dropped_bytes), (4, 5))

    def test_ids_at_or_beyond_n_neurons_are_refused(self):
        self.refused(spk([(1, 3), (2, 100)]), "record 1 names neuron 100", "100 neurons")
        self.refused(spk([(1, 0xFFFFFFFF)]), "neuron 4294967295")

    def test_a_huge_id_or_n_neurons_allocates_nothing_by_it(self):
        big = header(n_neurons=2**32 - 1,
                     populations=[{"name": "all", "first": 0, "count": 2**32 - 1}])
        data = spk([(1, 2**32 - 2), (2, 0)], big)
        tracemalloc.start()
        f = decode(data)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.assertEqual(list(f.ids), [2**32 - 2, 0])
        self.assertLess(peak, 64 * 1024, "the reader allocated by an id or n_neurons")

    def test_records_out_of_order_or_repeated_are_refused(self):
        self.refused(spk([(5, 1), (4, 2)]), "record 1 has tick 4, before", "tick 5")
        self.refused(spk([(5, 2), (5, 1)]), "record 1 has neuron 1 at tick 5")
        self.refused(spk([(5, 2), (5, 2)]), "record 1 has neuron 2 at tick 5")

    def test_ticks_after_the_end_of_the_run_are_refused(self):
        # t_sim_ms 10 in steps of 0.1 ms: ticks up to 101 (one step of rounding).
        decode(spk([(101, 0)]))
        self.refused(spk([(1, 0), (102, 0)]), "record 1 has tick 102", "tick 101 at most")
        self.refused(spk([(2, 0)], header(t_sim_ms=0.0)), "tick 1 at most")

    def test_a_record_at_tick_0_is_refused(self):
        # No run writes tick 0 (its first step ends at tick 1): it was read as a
        # spike at 0 ms. After a record, it is out of order, as in Rust.
        self.refused(spk([(0, 7), (1, 2)]), "record 0 has neuron 7 at tick 0, which no run writes")
        self.refused(spk([(0, 7), (0, 7)]), "record 0 has neuron 7 at tick 0")
        self.refused(spk([(1, 2), (0, 7)]), "record 1 has tick 0, before", "tick 1")
        self.refused(spk([(0, 100)]), "record 0 names neuron 100")

    def test_the_first_bad_record_is_named_whatever_its_kind(self):
        # Record 1 is late, record 2 out of order, record 3 names no neuron.
        self.refused(spk([(1, 0), (500, 0), (2, 0), (3, 100)]), "record 1 has tick 500")
        self.refused(spk([(1, 0), (1, 0), (500, 0)]), "record 1 has neuron 0")
        self.refused(spk([(2, 0), (1, 100)]), "record 1 names neuron 100")

    def test_bad_headers_are_refused(self):
        cases = [
            (b"not json", "the header is not valid"),
            (b"\xff\xfe", "the header is not valid"),
            (b"[1, 2]", "not a JSON object"),
            (b'{"n_neurons": NaN}', "the header is not valid"),
            (b"[" * 5000 + b"]" * 5000, "the header is not valid"),
            (b'{"x": 1e400}', "number out of range"),
        ]
        for raw, words in cases:
            self.refused(spk(GOOD, raw_header=raw), words)
        bad = [
            (dict(n_neurons=None), "no n_neurons"),
            (dict(n_neurons=100.0), "no n_neurons"),
            (dict(n_neurons=-1), "no n_neurons"),
            (dict(n_neurons=True), "no n_neurons"),
            (dict(n_neurons=2**32), "no n_neurons"),
            (dict(dt_ms=None), "no positive dt_ms"),
            (dict(dt_ms=0), "no positive dt_ms"),
            (dict(dt_ms=-0.1), "no positive dt_ms"),
            (dict(dt_ms="0.1"), "no positive dt_ms"),
            (dict(dt_ms=10**400), "number out of range"),
            (dict(params={"x": "\ud800"}), "surrogates not allowed"),
            (dict(params=json.loads("[" * 127 + "]" * 127)), "nested more than 127 deep"),
            (dict(t_sim_ms=None), "no t_sim_ms"),
            (dict(t_sim_ms=-1.0), "no t_sim_ms"),
            (dict(populations=None), "no populations"),
            (dict(populations=[{"name": "a", "first": 0}]), "population 0 is not"),
            (dict(populations=[{"name": 1, "first": 0, "count": 100}]), "population 0 is not"),
            (dict(populations=[{"name": "a", "first": 0, "count": 50},
                               {"name": "b", "first": 60, "count": 40}]),
             "population 1 (b) starts at 60, not at 50"),
            (dict(populations=[{"name": "a", "first": 0, "count": 90}]),
             "cover ids 0..90, not the 100 neurons"),
        ]
        for over, words in bad:
            with self.subTest(over=over):
                self.refused(spk(GOOD, header(**over)), words)

    def test_an_integral_dt_and_extra_fields_are_accepted(self):
        f = decode(spk([(1, 0)], header(dt_ms=1, t_sim_ms=5, params={"x": [1, 2]})))
        self.assertEqual(f.dt_ms, 1.0)


def run(script, *args, timeout=120):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=timeout)


class Memory(unittest.TestCase):
    """Pass 16: a file of 60 GiB was read whole (up to MAX_BYTES) to find that it
    is no spike file, and one larger than the memory was read until Python ran out."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def sparse(self, name, first, size):
        p = os.path.join(self.dir.name, name)
        with open(p, "wb") as f:
            f.write(first)
            f.truncate(size)
        return p

    def refused_within_a_mebibyte(self, p):
        """The SpikeFileError reading `p` raises, after checking that reading it
        allocated less than 1 MiB."""
        tracemalloc.start()
        try:
            with self.assertRaises(SpikeFileError) as cm:
                hpc_spikes.read(p)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.assertLess(peak, 1 << 20)
        return cm.exception

    def test_what_is_no_spike_file_is_refused_by_its_first_bytes(self):
        e = self.refused_within_a_mebibyte(self.sparse("image.spk", b"", 1 << 30))
        self.assertIn('does not start with "HPCSPIKE"', str(e))

    def test_a_file_larger_than_the_memory_is_refused_by_its_size(self):
        p = self.sparse("big.spk", spk([]), 1 << 30)
        real = hpc_spikes.mem_available
        hpc_spikes.mem_available = lambda: 1 << 20
        try:
            e = self.refused_within_a_mebibyte(p)
        finally:
            hpc_spikes.mem_available = real
        self.assertIn("bytes of memory, 1048576 are available", str(e))
        self.assertTrue(real() is None or real() > 0)


class CommandLine(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def file(self, name, data):
        p = os.path.join(self.dir.name, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def one_line_error(self, r, status, *words):
        self.assertEqual(r.returncode, status, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)

    def test_the_checker_names_each_bad_file_in_one_line(self):
        good = self.file("good.spk", spk(GOOD))
        bad = self.file("bad.spk", spk([(1, 100)]))
        r = run(READER, good)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("good.spk: valid, 5 spikes of 100 neurons, ticks 1..101", r.stdout)
        r = run(READER, good, bad)
        self.one_line_error(r, 1, "bad.spk is not a valid spike file", "neuron 100")
        self.one_line_error(run(READER), 2, "usage")
        missing = os.path.join(self.dir.name, "missing.spk")
        self.one_line_error(run(READER, missing), 1,
                            "cannot read", "missing.spk")

    def test_a_name_with_a_line_break_or_not_utf8_is_quoted_in_one_line(self):
        # Pass 21: the file's name was written raw: a line break split the
        # checker's line and the reader's message, a terminal's escape drew on
        # it, and a name that is not UTF-8 ended in a UnicodeEncodeError's
        # traceback where standard output is strict UTF-8 (a UTF-8 locale;
        # PYTHONIOENCODING stands for one here). Now each is quoted, escaped.
        odd = os.path.join(os.fsencode(self.dir.name), b"a\nb\x1b[31m\xff.spk")
        with open(odd, "wb") as f:
            f.write(spk(GOOD))
        env = dict(os.environ, PYTHONIOENCODING="utf-8:strict")
        for tool, status in ((READER, 0), (READ_SPIKES, None)):
            with self.subTest(tool=tool):
                r = subprocess.run([sys.executable, tool, odd], capture_output=True,
                                   timeout=120, env=env)
                out, err = r.stdout.decode(), r.stderr.decode()
                self.assertNotIn("Traceback", err)
                if status is not None:
                    self.assertEqual(r.returncode, status, err)
                said = (out + err).strip()
                self.assertEqual(len(said.splitlines()), 1, said)
                self.assertIn("a\\nb\\x1b[31m\\udcff.spk'", said)
                self.assertNotIn("\x1b", said)

    def test_a_partial_file_may_end_in_half_a_record(self):
        p = self.file("spikes.spk.partial", spk(GOOD)[:-3])
        f = hpc_spikes.read(p)
        self.assertEqual((len(f), f.dropped_bytes), (4, 5))
        self.assertRaises(SpikeFileError, hpc_spikes.read, p, partial_ok=False)
        r = run(READER, p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("5 bytes of an incomplete record dropped", r.stdout)

    def test_both_tools_end_bad_input_in_one_line(self):
        bad = {
            "empty.spk": b"",
            "magic.spk": spk(GOOD, magic=b"NOTSPIKE"),
            "version.spk": spk(GOOD, version=7),
            "cut.spk": spk(GOOD)[:-1],
            "id.spk": spk([(1, 100)]),
            "huge.spk": spk([(1, 0xFFFFFFFF)]),
            "order.spk": spk([(3, 0), (2, 0)]),
            "late.spk": spk([(5000, 0)]),
            "header.spk": spk(GOOD, raw_header=b'{"n_neurons": 1'),
            "directory.spk": None,
        }
        for name, data in bad.items():
            if data is None:
                p = os.path.join(self.dir.name, name)
                os.mkdir(p)
            else:
                p = self.file(name, data)
            for tool in (READ_SPIKES,):
                with self.subTest(tool=tool, file=name):
                    self.one_line_error(run(tool, p), 1, name)
        for tool in (READ_SPIKES,):
            self.one_line_error(run(tool), 2, "usage")

    def test_output_that_cannot_be_written_is_one_line_or_a_quiet_closed_pipe(self):
        good = self.file("good.spk", spk(GOOD))
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, READER, good], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=120)
        self.one_line_error(r, 1, "cannot write to standard output")
        # A reader that closed the pipe before the first line: status 141, no message.
        p = subprocess.Popen([sys.executable, READER] + [good] * 2000, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        p.stdout.close()
        err = p.stderr.read()
        self.assertEqual((p.wait(timeout=120), err), (141, ""))

    def test_a_fifo_or_a_device_is_refused_at_once_not_waited_for_or_read_for_ever(self):
        fifo = os.path.join(self.dir.name, "fifo.spk")
        os.mkfifo(fifo)
        for path, kind in [(fifo, "is a FIFO, not a regular file"),
                           ("/dev/zero", "is a character device, not a regular file")]:
            for tool in (READER, READ_SPIKES):
                with self.subTest(tool=tool, file=path):
                    self.one_line_error(run(tool, path, timeout=30), 1, path, kind)
            with self.assertRaises(SpikeFileError):
                hpc_spikes.read(path)

    def test_a_directory_is_named_as_one_not_by_its_descriptor(self):
        # As the docs of read_regular say: a directory is refused naming what it
        # is; as run.json, the warning said "Is a directory: 3" (a descriptor).
        d = os.path.join(self.dir.name, "adir")
        os.mkdir(d)
        with self.assertRaisesRegex(SpikeFileError, "adir is a directory, not a regular file"):
            hpc_spikes.read(d)
        q = self.file("spikes.spk", spk(GOOD))
        os.mkdir(os.path.join(self.dir.name, "run.json"))
        r = run(READ_SPIKES, q, timeout=30)
        self.assertIn("run.json is a directory, not a regular file", r.stderr)
        self.assertNotIn(": 3)", r.stderr)

    def test_the_command_line_warns_when_run_json_does_not_vouch_for_the_file(self):
        d = self.dir.name
        p = self.file("spikes.spk.partial", spk(GOOD))
        manifest = os.path.join(d, "run.json")
        with open(manifest, "w") as f:
            json.dump({"run_id": "r1", "status": "incomplete", "reason": "--stop-at",
                       "stopped_at": "50.0 ms", "files": [{"name": "spikes.spk.partial"}]}, f)
        r = run(READ_SPIKES, p, timeout=30)
        self.assertIn("warning:", r.stderr)
        self.assertIn("its run is incomplete: --stop-at at 50.0 ms", r.stderr)
        # A file the manifest does not list is an older or foreign one.
        q = self.file("spikes.spk", spk(GOOD))
        r = run(READ_SPIKES, q, timeout=30)
        self.assertIn("was not written by the run r1", r.stderr)
        # A FIFO (or a link to /dev/zero) as run.json: a warning at once, no wait.
        os.remove(manifest)
        os.mkfifo(manifest)
        r = run(READ_SPIKES, q, timeout=30)
        self.assertIn("run.json cannot be read", r.stderr)
        self.assertIn("FIFO", r.stderr)
        os.remove(manifest)
        os.symlink("/dev/zero", manifest)
        r = run(READ_SPIKES, q, timeout=30)
        self.assertIn("run.json cannot be read", r.stderr)
        # A run.json of another shape (hand-made, damaged): a warning naming it,
        # never a traceback.
        os.remove(manifest)
        for bad in ({"files": 5, "status": "complete"},
                    {"files": [1, 2], "status": "complete"},
                    {"files": [{"name": ["spikes.spk"]}], "status": "complete"},
                    {"files": [{"name": "spikes.spk"}], "status": 7},
                    {"files": [{"name": "spikes.spk"}], "status": "incomplete",
                     "stopped_at": 5}):
            with open(manifest, "w") as f:
                json.dump(bad, f)
            for tool in (READ_SPIKES,):
                with self.subTest(bad=bad, tool=tool):
                    r = run(tool, q, timeout=30)
                    self.assertNotIn("Traceback", r.stderr)
                    self.assertIn("run.json cannot be read", r.stderr)
        # Nested deeper than Python's recursion limit (pass 15: a RecursionError's
        # traceback).
        with open(manifest, "w") as f:
            f.write("[" * 100000)
        r = run(READ_SPIKES, q, timeout=30)
        self.assertNotIn("Traceback", r.stderr)
        self.assertIn("run.json cannot be read", r.stderr)

    def test_a_file_whose_size_is_not_the_one_its_run_listed_is_warned_about(self):
        # As hpc_io::rundir::check_file: a complete run's file of another size
        # than its run.json lists was changed since (pass 20: another run's
        # spike file copied over it was read as this run's without a word).
        d = self.dir.name
        q = self.file("spikes.spk", spk(GOOD))
        size = os.path.getsize(q)
        manifest = os.path.join(d, "run.json")
        for listed, warned in ((size, False), (size + 1, True), (None, False)):
            with open(manifest, "w") as f:
                json.dump({"run_id": "r1", "status": "complete",
                           "files": [{"name": "spikes.spk", "size": listed}]}, f)
            with self.subTest(listed=listed):
                with contextlib.redirect_stderr(io.StringIO()):
                    msg = hpc_spikes.check_run(q)
                if warned:
                    self.assertIn(f"is {size} bytes, but its run's manifest says {size + 1} "
                                  "(changed since the run r1 wrote it)", msg or "")
                else:
                    self.assertIsNone(msg)

    def test_long_values_of_a_header_or_run_json_are_cut_in_the_messages(self):
        # A population's name, t_presim_ms and run.json's words were echoed whole:
        # a line of 100,000 characters and more.
        big = "x" * 100000
        pops = [{"name": big, "first": 5, "count": 95}]
        p = self.file("name.spk", spk([], header(populations=pops)))
        for tool in (READER, READ_SPIKES):
            r = run(tool, p)
            self.one_line_error(r, 1, "population 0 ('xxxx", "(99960 more characters)",
                                "starts at 5, not at 0")
            self.assertLess(len(r.stderr), 600, r.stderr[:300])
        # As the Rust reader says it (hpc_env::short): a name of 41 to 200
        # characters was shown whole, and a line break or a terminal's escape in
        # a name written as it is, breaking the message's one line.
        for name, said in (("y" * 60, "population 0 ('" + "y" * 40 + "'... (20 more characters))"),
                           ("a\nb\x1b[31m", "population 0 ('a\\nb\\x1b[31m')")):
            pops = [{"name": name, "first": 5, "count": 95}]
            p = self.file("name.spk", spk([], header(populations=pops)))
            for tool in (READER, READ_SPIKES):
                self.one_line_error(run(tool, p), 1, said, "starts at 5, not at 0")
        for presim in (big, [[1] * 1000] * 50):
            p = self.file("presim.spk", spk(GOOD, header(t_presim_ms=presim)))
            r = run(READ_SPIKES, p)
            self.one_line_error(r, 1, "t_presim_ms ", "more characters) is not a time")
            self.assertLess(len(r.stderr), 600, r.stderr[:300])
        q = self.file("spikes.spk", spk(GOOD))
        manifest = os.path.join(self.dir.name, "run.json")
        for run_json, words in (
                ({"run_id": big, "status": "complete", "files": []},
                 "was not written by the run 'xxxx"),
                ({"run_id": "r", "status": "incomplete", "reason": big, "stopped_at": big,
                  "files": [{"name": "spikes.spk"}]}, "its run is incomplete: 'xxxx"),
                ({"run_id": [list(range(1000))] * 100, "pid": big, "host": big,
                  "status": "running", "files": [{"name": "spikes.spk"}]}, "(pid 'xxxx")):
            with open(manifest, "w") as f:
                json.dump(run_json, f)
            r = run(READ_SPIKES, q)
            self.assertIn(words, r.stderr)
            warning = r.stderr.splitlines()[0]
            self.assertLess(len(warning), 1000, warning[:300])

    def test_a_running_manifest_whose_lock_is_free_is_taken_as_incomplete(self):
        # A run that failed on a full disk cannot mark its run.json: it says
        # "running" for ever. Its lock tells: held, the run is there; free, it
        # ended without finishing.
        import fcntl
        d = self.dir.name
        p = self.file("spikes.spk", spk(GOOD))
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"run_id": "r2", "pid": 1, "host": "h", "status": "running",
                       "files": [{"name": "spikes.spk"}]}, f)
        lock = os.path.join(d, "run.lock")
        with open(lock, "w"):
            pass
        r = run(READ_SPIKES, p, timeout=30)
        self.assertIn("ended without finishing", r.stderr)
        self.assertIn("run.json", r.stderr)
        self.assertIn("take it as incomplete", r.stderr)
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            r = run(READ_SPIKES, p, timeout=30)
            self.assertIn("is still running", r.stderr)
            self.assertNotIn("ended without finishing", r.stderr)
        finally:
            os.close(fd)

    def test_an_incomplete_run_with_a_null_stop_time_is_read_as_rust_reads_it(self):
        # "stopped_at": null (none, for hpc_io::rundir's reader) made this
        # reader call the run.json unreadable and the file not vouched for.
        d = self.dir.name
        p = self.file("spikes.spk.partial", spk(GOOD))
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"run_id": "r3", "pid": 1, "host": "h", "status": "incomplete",
                       "reason": "stopped by SIGTERM", "stopped_at": None,
                       "files": [{"name": "spikes.spk.partial"}]}, f)
        r = run(READ_SPIKES, p, timeout=30)
        self.assertIn("its run is incomplete: stopped by SIGTERM", r.stderr)
        self.assertNotIn("cannot be read", r.stderr)
        self.assertNotIn("None", r.stderr)

    def test_a_run_of_0_ms_is_said_not_blamed_on_a_missing_t_presim_ms(self):
        # It read "t_presim_ms 0.0 is not a time before t_sim_ms 0.0", a field the
        # file (brunel's t_sim = 0) does not have.
        p = self.file("zero.spk", spk([], header(t_sim_ms=0.0)))
        r = run(READ_SPIKES, p)
        self.one_line_error(r, 1, "is valid (0 spikes), but its run is 0 ms long")
        self.assertNotIn("t_presim_ms", r.stderr)

    @unittest.skipUnless(HAVE_NUMPY, "numpy is not installed")
    def test_the_plot_and_sonata_tools_end_bad_input_in_one_line(self):
        p = self.file("late.spk", spk([(1, 0), (5000, 0)]))
        for tool in (os.path.join(HERE, "plot.py"),
                     os.path.join(HERE, "..", "..", "microcircuit", "tools", "to_sonata.py")):
            with self.subTest(tool=tool):
                args = [p] if tool.endswith("plot.py") else [p, p + ".h5"]
                self.one_line_error(run(tool, *args), 1, "record 1 has tick 5000")

    @unittest.skipUnless(HAVE_NUMPY, "numpy is not installed")
    def test_the_plot_and_sonata_tools_never_write_into_a_fifo(self):
        p = self.file("good.spk", spk(GOOD))
        fifo = os.path.join(self.dir.name, "out.png")
        os.mkfifo(fifo)
        r = run(os.path.join(HERE, "plot.py"), p, "--out", fifo, timeout=30)
        self.one_line_error(r, 1, "is a FIFO, not a regular file")
        r = run(os.path.join(HERE, "plot.py"), p, "--n", "0", timeout=30)
        self.one_line_error(r, 1, "--n must be at least 1")
        r = run(os.path.join(HERE, "..", "..", "microcircuit", "tools", "to_sonata.py"), p, fifo,
                timeout=30)
        self.one_line_error(r, 1, "is a FIFO, not a regular file")
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    @unittest.skipUnless(HAVE_NUMPY and HAVE_H5PY, "numpy or h5py is not installed")
    def test_the_sonata_tool_writes_through_no_planted_link_and_names_unusable_names(self):
        # OUT.tmp, a link planted beside OUT, sent the HDF5 file into what it
        # pointed to (then renamed onto OUT); a population name HDF5 cannot take
        # as a group ended in h5py's traceback, leaving OUT.tmp.
        tool = os.path.join(HERE, "..", "..", "microcircuit", "tools", "to_sonata.py")
        d = self.dir.name
        p = self.file("good.spk", spk(GOOD))
        victim = os.path.join(d, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        out = os.path.join(d, "out.h5")
        os.symlink("victim", out + ".tmp")
        r = run(tool, p, out, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertTrue(stat.S_ISREG(os.lstat(out).st_mode))
        for name, pops in (("slash", [("a/b", 0, 2), ("a", 2, 98)]),
                           ("twice", [("E", 0, 2), ("E", 2, 98)]),
                           ("empty", [("", 0, 100)])):
            with self.subTest(name=name):
                q = self.file(name + ".spk", spk(GOOD, header(populations=[
                    {"name": n, "first": a, "count": c} for n, a, c in pops])))
                o = os.path.join(d, name + ".h5")
                self.one_line_error(run(tool, q, o, timeout=60), 1, "is no SONATA population name")
                self.assertEqual([f for f in os.listdir(d) if f.startswith(name + ".h5")], [])
        # A folder that does not exist, and a write that fails (a file size
        # limit standing in for a full disk: h5py writing it itself died of a
        # segmentation fault): one line, nothing left.
        r = run(tool, p, os.path.join(d, "no", "o.h5"), timeout=60)
        self.one_line_error(r, 1, "cannot write", "No such file or directory")
        import resource
        r = subprocess.run(
            [sys.executable, tool, p, os.path.join(d, "big.h5")], capture_output=True,
            text=True, timeout=60,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048)))
        self.one_line_error(r, 1, "cannot write", "big.h5")
        self.assertEqual([f for f in os.listdir(d) if "big.h5" in f], [])

    @unittest.skipUnless(HAVE_NUMPY and HAVE_MATPLOTLIB, "numpy or matplotlib is not installed")
    def test_the_plot_tool_writes_through_no_planted_link_and_bins_a_long_run(self):
        # savefig onto --out wrote through a link planted there; a valid
        # header's t_sim_ms of 1e15 asked numpy for 10^15 one-ms bins (a
        # MemoryError's traceback).
        tool = os.path.join(HERE, "plot.py")
        d = self.dir.name
        p = self.file("good.spk", spk(GOOD))
        victim = os.path.join(d, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        out = os.path.join(d, "raster.png")
        os.symlink("victim", out)
        r = run(tool, p, "--out", out, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertTrue(stat.S_ISREG(os.lstat(out).st_mode))
        q = self.file("long.spk", spk(GOOD, header(t_sim_ms=1e15)))
        r = run(tool, q, "--out", os.path.join(d, "long.png"), timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run(tool, p, "--out", os.path.join(d, "no", "x.png"), timeout=120)
        self.one_line_error(r, 1, "cannot write", "No such file or directory")
        # A .partial file is drawn up to where its run stopped, not over the
        # header's whole length (441 ms of 100 s filled 0.4 % of the axis).
        part = self.file("spikes.spk.partial",
                         spk([(10 * k, 5) for k in range(1, 11)], header(t_sim_ms=1e5)))
        r = run(tool, part, "--out", os.path.join(d, "part.png"), timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(drawn to its last spike, 10.0 ms", r.stdout)
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"run_id": "r5", "pid": 1, "host": "h", "status": "incomplete",
                       "reason": "stopped by SIGTERM", "stopped_at": "20.0 ms",
                       "files": [{"name": "spikes.spk.partial"}]}, f)
        r = run(tool, part, "--out", os.path.join(d, "part.png"), timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(drawn to 20.0 ms, where its run stopped)", r.stdout)

    def load_tool(self, relative):
        """A tool of the examples as a module, without running its main (NEST and
        numpy may be missing)."""
        import importlib.util
        path = os.path.join(HERE, "..", "..", relative)
        name = "tool_" + os.path.basename(relative)[:-3]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def test_the_nest_scripts_write_through_no_planted_link(self):
        # nest_microcircuit.py's --out DIR/spikes.spk and nest_hpc_benchmark.py's
        # --json FILE were written with open(..., "w"): through a link planted
        # at the name into whatever it pointed to, and half a file on a full
        # disk. Their writing functions, without NEST: through a temporary file
        # renamed over the name; a FIFO or a name in /dev refused in one line.
        d = self.dir.name
        victim = os.path.join(d, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        micro = self.load_tool("microcircuit/tools/nest_microcircuit.py")
        out = os.path.join(d, "nest-out")
        os.mkdir(out)
        os.symlink(victim, os.path.join(out, "spikes.spk"))
        micro.write_spikes(out, header(), struct.pack("<IIII", 1, 2, 3, 4))
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertTrue(stat.S_ISREG(os.lstat(os.path.join(out, "spikes.spk")).st_mode))
        self.assertEqual(hpc_spikes.read(os.path.join(out, "spikes.spk")).ids.tolist()
                         if HAVE_NUMPY else list(hpc_spikes.read(os.path.join(out, "spikes.spk")).ids),
                         [2, 4])
        self.assertEqual(sorted(os.listdir(out)), ["spikes.spk"])
        bench = self.load_tool("hpc_benchmark/tools/nest_hpc_benchmark.py")
        js = os.path.join(d, "nest.json")
        os.symlink(victim, js)
        bench.write_result(js, {"mean_rate_hz": 1.5})
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        with open(js) as f:
            self.assertEqual(json.load(f), {"mean_rate_hz": 1.5})
        self.assertFalse(os.path.islink(js))
        fifo = os.path.join(d, "fifo.json")
        os.mkfifo(fifo)
        # A name in /dev (as root, /dev/stdout, a link, was replaced by the
        # file): one that does not exist, so that nothing of the machine's is
        # at stake here; and, as root, a device node of our own.
        in_dev = f"/dev/hpc-rs-test-{os.getpid()}.json"
        calls = [lambda: bench.write_result(fifo, {}),
                 lambda: bench.write_result(in_dev, {}),
                 lambda: micro.write_spikes(fifo, header(), b"")]
        node = os.path.join(d, "null")
        if os.geteuid() == 0:
            os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
            calls.append(lambda: bench.write_result(node, {}))
        for call in calls:
            import contextlib
            import io
            said = io.StringIO()
            with self.assertRaises(SystemExit) as e, contextlib.redirect_stderr(said):
                call()
            self.assertEqual(e.exception.code, 1)
            self.assertEqual(len(said.getvalue().splitlines()), 1, said.getvalue())
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))
        self.assertFalse(os.path.lexists(in_dev))
        if os.geteuid() == 0:
            self.assertTrue(stat.S_ISCHR(os.lstat(node).st_mode))
        self.assertEqual(sorted(f for f in os.listdir(d) if f.startswith(".")), [])

    def test_a_results_file_is_appended_to_through_no_planted_link(self):
        # hpc_benchmark's validate.py appended each run to --results with
        # open(..., "a"), into whatever a link planted there pointed to.
        d = self.dir.name
        victim = os.path.join(d, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        link = os.path.join(d, "results.jsonl")
        os.symlink(victim, link)
        fifo = os.path.join(d, "fifo.jsonl")
        os.mkfifo(fifo)
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import hpc_spikes; "
                "hpc_spikes.append_line(sys.argv[2], '{\"a\": 1}', 'validate.py')")
        for target, words in ((link, "symbolic link"), (fifo, "is a FIFO")):
            r = subprocess.run([sys.executable, "-c", code, READER_DIR, target],
                               capture_output=True, text=True, timeout=30)
            self.one_line_error(r, 1, "cannot append to", words)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        plain = os.path.join(d, "plain.jsonl")
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code, READER_DIR, plain],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
        with open(plain) as f:
            self.assertEqual(f.read(), '{"a": 1}\n{"a": 1}\n')
        # A row that does not fit (a file size limit standing in for a full
        # disk) is cut off again: half of it was left, and the next run of the
        # tool refused the file ("line 3 is not a JSON run").
        import resource
        size = os.path.getsize(plain)
        r = subprocess.run([sys.executable, "-c", code, READER_DIR, plain], capture_output=True,
                           text=True, timeout=30,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                                 (size + 4, size + 4)))
        self.one_line_error(r, 1, "cannot append to", "File too large")
        with open(plain) as f:
            self.assertEqual(f.read(), '{"a": 1}\n{"a": 1}\n')
        tool = os.path.join(HERE, "..", "..", "hpc_benchmark", "tools", "validate.py")
        # Refused before the first run, as a usage error.
        r = run(tool, "--hpc-benchmark", "/bin/true", "--results", link, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("is a symbolic link", r.stderr.strip().splitlines()[-1])
        self.assertNotIn("Traceback", r.stderr)

    def test_no_tool_opens_a_file_for_writing_itself(self):
        # Every output of a tool goes through hpc_spikes.write_replacing (a file
        # written whole) or append_line (a row appended): open(..., "w"), "wb"
        # or "a" of a name followed a link planted there (pass 17's plot.py,
        # to_sonata.py and brunel's validate.py --keep; pass 18's NEST scripts,
        # hpc_benchmark's --results and stdp_vs_nest.py --keep).
        import ast
        import glob
        root = os.path.join(HERE, "..", "..", "..")
        tools = [p for p in glob.glob(os.path.join(root, "examples", "*", "tools", "*.py"))
                 + glob.glob(os.path.join(root, "crates", "hpc-spiking", "python", "*.py"))
                 + glob.glob(os.path.join(root, "crates", "hpc-spiking", "validate", "*.py"))
                 if not os.path.basename(p).startswith("test_")]
        self.assertGreater(len(tools), 8)
        found = []
        for path in tools:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == "open"):
                    continue
                mode = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "mode"), None)
                if isinstance(mode, ast.Constant) and any(c in mode.value for c in "wax+"):
                    found.append(f"{os.path.relpath(path, root)}:{node.lineno}")
        self.assertEqual(found, [])

    def test_no_tool_reads_a_file_unbounded_itself(self):
        # Every file a tool reads goes through hpc_spikes.read_regular (or
        # read_json): a regular file, at most a bound. Pass 18 left the
        # validate.py scripts' summary.json (open, read_text: a FIFO there
        # waited without end, /dev/zero was read until memory ran out), and
        # pass 19 found nest_microcircuit.py's --config the same way. Only
        # /proc files are read with open.
        import ast
        import glob
        root = os.path.join(HERE, "..", "..", "..")
        tools = [p for p in glob.glob(os.path.join(root, "examples", "*", "tools", "*.py"))
                 + glob.glob(os.path.join(root, "crates", "hpc-spiking", "python", "*.py"))
                 + glob.glob(os.path.join(root, "crates", "hpc-spiking", "validate", "*.py"))
                 if not os.path.basename(p).startswith("test_")]
        self.assertGreater(len(tools), 8)
        found = []
        for path in tools:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if isinstance(f, ast.Name) and f.id == "open":
                    first = node.args[0] if node.args else None
                    mode = node.args[1] if len(node.args) > 1 else next(
                        (k.value for k in node.keywords if k.arg == "mode"), None)
                    if isinstance(first, ast.Constant) and str(first.value).startswith("/proc/"):
                        continue
                    if isinstance(mode, ast.Constant) and any(c in mode.value for c in "wax+"):
                        continue  # a write: the test above
                    found.append(f"{os.path.relpath(path, root)}:{node.lineno} open")
                elif isinstance(f, ast.Attribute) and f.attr in ("read_text", "read_bytes"):
                    found.append(f"{os.path.relpath(path, root)}:{node.lineno} {f.attr}")
        self.assertEqual(found, [])

    def test_a_summary_that_is_a_fifo_or_too_large_is_named_at_once(self):
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "summary.json")
            os.mkfifo(fifo)
            with self.assertRaisesRegex(SpikeFileError, "is a FIFO, not a regular file"):
                hpc_spikes.read_json(fifo)
            big = os.path.join(d, "big.json")
            with open(big, "wb") as f:
                f.truncate(hpc_spikes.MAX_METADATA_BYTES + 1)
            with self.assertRaisesRegex(SpikeFileError, "more than the 16777216 accepted"):
                hpc_spikes.read_json(big)
            ok = os.path.join(d, "ok.json")
            hpc_spikes.write_replacing(ok, b'{"a": 1}\n', "test")
            self.assertEqual(hpc_spikes.read_json(ok), {"a": 1})

    def test_a_population_name_with_a_terminal_escape_is_quoted_in_the_rates(self):
        # A forged header's population "\x1b[31mred\n" was printed as it was by
        # read_spikes.py: the terminal's escape drawn, the line broken (pass 19).
        import read_spikes
        res = [{"name": "\x1b[31mred\n", "neurons": 2, "rate_hz": 1.0, "cv_isi": 0.0},
               {"name": "E", "neurons": 3, "rate_hz": 2.0, "cv_isi": 0.5},
               {"name": "n" * 1000, "neurons": 1, "rate_hz": 0.0, "cv_isi": 0.0}]
        h = {"n_neurons": 6, "dt_ms": 0.1}
        lines = read_spikes.result_lines("f.spk", 3, h, (0.0, 10.0, ""), res)
        self.assertEqual(len(lines), 4)
        self.assertFalse(any("\x1b" in line or "\n" in line for line in lines), lines)
        self.assertIn("'\\x1b[31mred\\n'", lines[1])
        self.assertTrue(lines[2].startswith("  E "), lines[2])
        self.assertLess(len(lines[3]), 400)

    def test_a_failed_command_of_a_tool_is_one_line(self):
        # validate.py's runs of NEST and of the example: a program that fails or
        # is missing ends the tool in one line naming it, not a traceback.
        for cmd in ([sys.executable, "-c", "import sys; sys.exit('no nest here')"],
                    [os.path.join(self.dir.name, "missing-program")]):
            with self.subTest(cmd=cmd):
                r = subprocess.run(
                    [sys.executable, "-c",
                     "import sys; sys.path.insert(0, sys.argv[1]); import hpc_spikes; "
                     "hpc_spikes.run_or_exit(sys.argv[2:], 'validate.py')",
                     READER_DIR, *cmd], capture_output=True, text=True, timeout=30)
                self.one_line_error(r, 1, "validate.py: ")
        r = subprocess.run(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, sys.argv[1]); import hpc_spikes; "
             "hpc_spikes.run_or_exit([sys.executable, '-c', 'import sys; sys.exit(\"no nest\")'], 'v')",
             READER_DIR], capture_output=True, text=True, timeout=30)
        self.one_line_error(r, 1, "v: -c failed with status 1: no nest")
        # Pass 16: a last line of 100,000 characters was echoed whole.
        r = subprocess.run(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, sys.argv[1]); import hpc_spikes; "
             "hpc_spikes.run_or_exit([sys.executable, '-c', 'import sys; sys.exit(\"e\" * 100000)'], 'v')",
             READER_DIR], capture_output=True, text=True, timeout=30)
        self.one_line_error(r, 1, "v: -c failed with status 1: 'eeee", "(99700 more characters)")
        self.assertLess(len(r.stderr), 500)

    @unittest.skipUnless(HAVE_NUMPY, "numpy is not installed")
    def test_the_tool_summarises_a_valid_file(self):
        h = header(t_presim_ms=0.0, n_neurons=2**32 - 1,
                   populations=[{"name": "E", "first": 0, "count": 2**32 - 2},
                                {"name": "I", "first": 2**32 - 2, "count": 1}])
        p = self.file("good.spk", spk([(1, 2**32 - 2), (2, 2**32 - 2), (3, 0), (4, 2**32 - 2),
                                        (6, 2**32 - 2)], h))
        r = run(READ_SPIKES, p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("5 spikes of 4294967295 neurons", r.stdout)
        # ISIs 0.1, 0.2, 0.2 ms: sd 0.0471, mean 0.1667; neuron 0 has no ISI.
        lines = r.stdout.splitlines()
        self.assertTrue(lines[2].lstrip().startswith("I ") and "CV ISI 0.283" in lines[2], r.stdout)
        self.assertTrue(lines[3].lstrip().startswith("all ") and "CV ISI 0.283" in lines[3],
                        r.stdout)


    @unittest.skipUnless(HAVE_NUMPY, "numpy is not installed")
    def test_a_partial_file_is_rated_up_to_where_its_run_stopped(self):
        # The rates of a .partial file were taken over the whole run it was
        # meant to be (the header's t_sim_ms): a run stopped by SIGTERM at 441
        # ms of 100 s read 0.16 Hz for 37 Hz. They are over the time its
        # run.json says it stopped at, else up to its last spike.
        d = self.dir.name
        p = self.file("spikes.spk.partial",
                      spk([(10 * k, 5) for k in range(1, 11)], header(t_sim_ms=1000.0)))
        r = run(READ_SPIKES, p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("window (0.0, 10.0] ms (to its last spike", r.stdout)
        self.assertIn("12.500 Hz", r.stdout)
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"run_id": "r4", "pid": 1, "host": "h", "status": "incomplete",
                       "reason": "stopped by SIGTERM", "stopped_at": "20.0 ms",
                       "files": [{"name": "spikes.spk.partial"}]}, f)
        r = run(READ_SPIKES, p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("window (0.0, 20.0] ms (where its run stopped)", r.stdout)
        self.assertIn("6.250 Hz", r.stdout)
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"run_id": "r4", "pid": 1, "host": "h", "status": "incomplete",
                       "reason": "stopped by SIGINT", "stopped_at": "0.0 ms",
                       "files": [{"name": "spikes.spk.partial"}]}, f)
        r = run(READ_SPIKES, p)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("stopped at 0.0 ms: no time to rate", r.stderr)
        self.assertNotIn("warm-up", r.stderr)
        # Another run's manifest beside it says nothing of its end; nor does a
        # file with no spike after its warm-up: no window to rate.
        q = self.file("warm.spk.partial",
                      spk([(10, 5)], header(t_sim_ms=1000.0, t_presim_ms=100.0)))
        r = run(READ_SPIKES, q)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("was not written by the run r4", r.stderr)
        self.assertIn("no spike after the warm-up", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

@unittest.skipUnless(os.environ.get("SPIKES_FROM_RUST"),
                     "SPIKES_FROM_RUST names no directory of brunel's files")
class FilesOfTheRustWriter(unittest.TestCase):
    """Files the brunel binary wrote (tests/python_reader.rs makes them)."""

    def test_a_complete_run_reads_in_full(self):
        d = os.environ["SPIKES_FROM_RUST"]
        p = os.path.join(d, "run", "spikes.spk")
        f = hpc_spikes.read(p)
        with open(p, "rb") as fh:
            hlen = struct.unpack_from("<I", fh.read(16), 12)[0]
        self.assertEqual(len(f) * 8 + 16 + hlen, os.path.getsize(p))
        self.assertGreater(len(f), 100)
        self.assertEqual([p["name"] for p in f.header["populations"]],
                         ["excitatory", "inhibitory"])
        self.assertLess(max(f.ids), f.n_neurons)
        self.assertLessEqual(max(f.ticks), round(f.t_sim_ms / f.dt_ms))
        r = run(READER, p)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"valid, {len(f)} spikes of {f.n_neurons} neurons", r.stdout)

    def test_a_stopped_run_leaves_a_readable_partial_file(self):
        d = os.environ["SPIKES_FROM_RUST"]
        full = hpc_spikes.read(os.path.join(d, "run", "spikes.spk"))
        part = hpc_spikes.read(os.path.join(d, "stopped", "spikes.spk.partial"))
        # The stopped run's spikes are the first ones of the complete run.
        self.assertGreater(len(part), 0)
        self.assertLess(len(part), len(full))
        self.assertEqual(list(part.ticks), list(full.ticks[:len(part)]))
        self.assertEqual(list(part.ids), list(full.ids[:len(part)]))


if __name__ == "__main__":
    unittest.main()
