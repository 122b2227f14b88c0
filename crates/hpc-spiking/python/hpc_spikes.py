#!/usr/bin/env python3
"""Read and check a spike file of the spiking examples (format "hpc-rs spikes", v1).

The one Python reader of the format, standard library only; `read_spikes.py`
beside it (the examples' summary tool) reads through it. It accepts exactly what the
Rust reader, `hpc_spiking::spikes::decode_spikes`, accepts:

    offset  size  content
    0       8     magic b"HPCSPIKE"
    8       4     format version, u32 LE (1)
    12      4     header length H, u32 LE (at most the bytes that follow)
    16      H     UTF-8 JSON object: n_neurons (integer < 2^32), dt_ms (> 0),
                  t_sim_ms (>= 0, the end of the run), populations
                  [{name, first, count}] (contiguous id ranges from 0 covering
                  n_neurons), ...
    16+H    8*k   k records (tick: u32 LE, node_id: u32 LE); time_ms = tick * dt_ms

Every id is below n_neurons, the records are sorted by tick, then id, each
spike once, no tick is 0 (a spike at tick t happened at the end of step t; the
first step ends at tick 1) and no tick is past the run: at most
ceil(t_sim_ms / dt_ms) + 1 (the writers round durations to whole steps). The records fill the file to its end; only a `.partial` file (a run
that is writing it or was interrupted) may end in an incomplete record, which is
dropped. Nothing is allocated by a number read from the file: every size comes
from the file's length.

    python3 hpc_spikes.py FILE...     # check, one line per file; exit 1 if one is bad
    from hpc_spikes import read; f = read(path); f.header, f.ticks, f.ids
"""
import array
import json
import errno
import math
import operator
import os
import stat
import sys
import unicodedata
from itertools import islice

MAGIC = b"HPCSPIKE"
VERSION = 1

# An array type of 4-byte unsigned integers ('I' on every common platform).
_U32 = next(c for c in "ILH" if array.array(c).itemsize == 4)


class SpikeFileError(ValueError):
    """What is wrong with a spike file, in one line."""


class SpikeFile:
    """A checked spike file.

    header: the header's JSON object; n_neurons, dt_ms, t_sim_ms: its numbers;
    ticks, ids: the records' columns (array of unsigned 32-bit integers);
    dropped_bytes: bytes of an incomplete last record dropped (a .partial file).
    """

    def __init__(self, header, ticks, ids, dropped_bytes):
        self.header = header
        self.n_neurons = header["n_neurons"]
        self.dt_ms = float(header["dt_ms"])
        self.t_sim_ms = float(header["t_sim_ms"])
        self.ticks = ticks
        self.ids = ids
        self.dropped_bytes = dropped_bytes

    def __len__(self):
        return len(self.ticks)

    def times_ms(self):
        """Spike times in ms (tick * dt_ms), a list of floats."""
        dt = self.dt_ms
        return [t * dt for t in self.ticks]


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


SHOWN_CHARS = 40  # as hpc_env::SHOWN_CHARS


def shown(value, limit=SHOWN_CHARS):
    """A value from a file for a message: its repr, cut after `limit` characters
    with the count of those left out (as hpc_env::shown), so that a name or a
    reason of 100,000 characters is not echoed whole."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(text) if isinstance(value, str) else text
    return f"{text[:limit]!r}... ({len(text) - limit} more characters)"


def shown_path(path):
    """A path for a message, as hpc_io::message::path writes one: as it is,
    unless it holds a control character (a line break, a terminal's escape)
    or a byte that is not UTF-8 (a surrogate of os.fsdecode): then quoted,
    those escaped. Written raw, such a name broke the message's line or drew
    on the terminal, and one not UTF-8 ended in a UnicodeEncodeError's
    traceback where standard output is strict UTF-8 (a UTF-8 locale)."""
    text = os.fsdecode(path)
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in text):
        return repr(text)
    return text


def _word(value, limit=200):
    """A string or number of a file (a population's name, run.json's run_id or
    reason) for a message: as written when it is at most `limit` characters, else
    cut as shown() cuts it; quoted (its control characters escaped) when it holds
    a line break or a terminal's escape, so that the message stays one line."""
    plain = isinstance(value, str) or (
        isinstance(value, (int, float)) and not isinstance(value, bool))
    if plain and len(str(value)) <= limit and not any(
            unicodedata.category(c) == "Cc" for c in str(value)):
        return str(value)
    return shown(value, limit)


def _number(header, key):
    """header[key] as a float, or None when it is missing or not a number."""
    x = header.get(key)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        return float(x)
    except OverflowError:
        return math.inf


# Python's json module accepts more than JSON (and than serde_json, which the Rust
# reader uses): NaN and Infinity, numbers beyond f64 (read as inf or as big
# integers), unpaired surrogates in strings and deeper nesting. These refuse what
# serde_json refuses.
MAX_DEPTH = 127  # serde_json's recursion limit: 128 nested arrays or objects fail


def _refuse_constant(name):
    raise ValueError(f"{name} is not JSON")


def _float(text):
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(f"number out of range: {text[:20]}")
    return x


def _int(text):
    x = int(text)
    if x == 0 and text.startswith("-"):
        # serde_json reads -0 as the float -0.0, no integer (an id or a count
        # written so is refused by the Rust reader).
        return -0.0
    if abs(x) >= 2**64:  # serde_json reads it as an f64, which must be finite
        _float(text)
    return x


def _depth(value):
    """Nesting depth of arrays and objects (a scalar is 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        deepest = max(deepest, d)
        todo.extend((x, d + 1) for x in items)
    return deepest


def _check_header(raw):
    try:
        text = raw.decode("utf-8")
        header = json.loads(text, parse_constant=_refuse_constant, parse_float=_float,
                            parse_int=_int)
        if _depth(header) > MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} deep")
        # An escaped unpaired surrogate ("\\ud800") is no Unicode text.
        json.dumps(header, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError, RecursionError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpikeFileError(f"the header is not valid: {msg}") from None
    if not isinstance(header, dict):
        raise SpikeFileError("the header is not valid: not a JSON object")
    n = header.get("n_neurons")
    if not (_is_int(n) and 0 <= n < 2**32):
        raise SpikeFileError("the header is not valid: no n_neurons below 2^32")
    dt = _number(header, "dt_ms")
    if dt is None or not (dt > 0 and math.isfinite(dt)):
        raise SpikeFileError("the header is not valid: no positive dt_ms")
    t_sim = _number(header, "t_sim_ms")
    if t_sim is None or not (t_sim >= 0 and math.isfinite(t_sim)):
        raise SpikeFileError("the header is not valid: no t_sim_ms >= 0")
    pops = header.get("populations")
    if not isinstance(pops, list):
        raise SpikeFileError("the header is not valid: no populations list")
    end = 0
    for i, p in enumerate(pops):
        ok = (isinstance(p, dict) and isinstance(p.get("name"), str)
              and _is_int(p.get("first")) and _is_int(p.get("count"))
              and 0 <= p["first"] < 2**64 and 0 <= p["count"] < 2**64)
        if not ok:
            raise SpikeFileError(
                f"the header is not valid: population {i} is not {{name, first, count}}")
        if p["first"] != end:
            raise SpikeFileError(
                f"the header is not valid: population {i} ({_word(p['name'], SHOWN_CHARS)}) starts at "
                f"{p['first']}, not at {end} where the previous one ends")
        end += p["count"]
    if end != n:
        raise SpikeFileError(
            f"the header is not valid: the populations cover ids 0..{end}, "
            f"not the {n} neurons of n_neurons")
    return header


def tick_limit(dt_ms, t_sim_ms):
    """The last tick a run of t_sim_ms in steps of dt_ms can write: ceil(t_sim_ms /
    dt_ms) + 1 (2^33, above every u32, when that is larger)."""
    q = t_sim_ms / dt_ms
    return math.ceil(q) + 1 if q < 2**33 else 2**33


def _first(flags):
    """Index of the first true value."""
    return next(i for i, f in enumerate(flags) if f)


def _out_of_order(ticks, ids):
    """Index of the first record that is not after the previous one (by tick, then
    id), or None."""
    if array.array("Q").itemsize == 8:
        # Keys tick << 32 | id as unsigned 64-bit integers, compared at C speed.
        words = array.array(_U32, bytes(8 * len(ticks)))
        hi, lo = (1, 0) if sys.byteorder == "little" else (0, 1)
        words[hi::2], words[lo::2] = ticks, ids
        keys = array.array("Q", words.tobytes())
        del words
        if not any(map(operator.ge, keys, islice(keys, 1, None))):
            return None
    pairs = zip(ticks, islice(ticks, 1, None), ids, islice(ids, 1, None))
    return next((i + 1 for i, (t0, t1, i0, i1) in enumerate(pairs)
                 if t1 < t0 or (t1 == t0 and i1 <= i0)), None)


def decode(data, partial_ok=False):
    """Check the bytes of a spike file and return its SpikeFile.

    Raises SpikeFileError naming the first problem. With partial_ok, an
    incomplete last record is dropped (counted in dropped_bytes) instead of refused.
    """
    if len(data) < 16:
        raise SpikeFileError(
            f"{len(data)} bytes is too short for a spike file (16 bytes of header at least)")
    if data[:8] != MAGIC:
        raise SpikeFileError('not a spike file (it does not start with "HPCSPIKE")')
    version = int.from_bytes(data[8:12], "little")
    if version != VERSION:
        raise SpikeFileError(f"format version {version}, this reader knows version {VERSION}")
    hlen = int.from_bytes(data[12:16], "little")
    available = len(data) - 16
    if hlen > available:
        raise SpikeFileError(
            f"the header claims {hlen} bytes but only {available} follow (truncated or damaged)")
    hend = 16 + hlen
    header = _check_header(bytes(data[16:hend]))
    body_len = len(data) - hend
    rest = body_len % 8
    if rest and not partial_ok:
        raise SpikeFileError(f"the records end {rest} bytes into a record (truncated mid-record)")
    words = array.array(_U32)
    words.frombytes(data[hend:len(data) - rest])
    if sys.byteorder != "little":
        words.byteswap()
    ticks, ids = words[0::2], words[1::2]
    del words
    n = header["n_neurons"]
    limit = tick_limit(float(header["dt_ms"]), float(header["t_sim_ms"]))
    # The first bad record of each kind; the scans run at C speed, and only a file
    # with a bad record is walked again to find where.
    found = []
    if ids and max(ids) >= n:
        found.append((_first(v >= n for v in ids), 0))
    unsorted = _out_of_order(ticks, ids)
    if unsorted is not None:
        found.append((unsorted, 1))
    # Sorted ticks start with their smallest.
    if ticks and (ticks[0] if unsorted is None else min(ticks)) == 0:
        found.append((ticks.index(0), 2))
    # Sorted ticks end in their largest.
    if ticks and (ticks[-1] if unsorted is None else max(ticks)) > limit:
        found.append((_first(v > limit for v in ticks), 3))
    if found:
        # The Rust reader checks record by record: the id, then the order, then
        # tick 0, then the end of the run.
        i, kind = min(found)
        if kind == 0:
            raise SpikeFileError(
                f"record {i} names neuron {ids[i]}, but the file has {n} neurons (ids 0..{n})")
        if kind == 1 and ticks[i] < ticks[i - 1]:
            raise SpikeFileError(
                f"record {i} has tick {ticks[i]}, before the previous record's tick {ticks[i - 1]}")
        if kind == 1:
            raise SpikeFileError(
                f"record {i} has neuron {ids[i]} at tick {ticks[i]}, not after the previous "
                f"record's neuron {ids[i - 1]} at that tick (records are sorted by tick, then "
                f"id, each spike once)")
        if kind == 2:
            raise SpikeFileError(
                f"record {i} has neuron {ids[i]} at tick 0, which no run writes (its first "
                f"step ends at tick 1)")
        raise SpikeFileError(
            f"record {i} has tick {ticks[i]}, after the end of the run "
            f"(tick {limit} at most, by the header's t_sim_ms and dt_ms)")
    return SpikeFile(header, ticks, ids, rest)


# The most bytes read() reads (as hpc_io::read::MAX_DATA_BYTES): a mistaken path
# (a disk image) is refused rather than read into memory.
MAX_BYTES = 64 << 30

_KINDS = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket")]


def mem_available():
    """The memory the kernel says is available without swapping (MemAvailable of
    /proc/meminfo, as hpc_io::read::mem_available), in bytes; None when unknown."""
    try:
        # A procfs file says it is 0 bytes long: read up to a bound instead.
        with open("/proc/meminfo", "rb") as f:
            text = f.read(1 << 20).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            try:
                return int(line.split()[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


# The reader holds about this many times a spike file's size at once (the bytes,
# the two columns, the order check's keys).
MEMORY_PER_BYTE = 3


def read_regular(path, max_bytes=MAX_BYTES, follow=True, head=None):
    """The bytes of the regular file at path, at most max_bytes.

    The file is opened without blocking (a FIFO opens at once, no writer is waited
    for) and looked at with fstat: anything but a regular file (a FIFO, /dev/zero, a
    directory) raises SpikeFileError naming what it is, and so does a file larger
    than max_bytes, before anything is read. follow=False also refuses a symbolic
    link (OSError ELOOP). head(first_bytes, size), when given, is called with the
    first 16 bytes and the file's size before the rest is read (to refuse what is
    no spike file, or too large for the memory, before reading it). Other failures
    raise OSError.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    # Looked at before it is wrapped: os.fdopen of a directory raised its own
    # IsADirectoryError, naming the descriptor ("Is a directory: 3").
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a file")
        raise SpikeFileError(f"{shown_path(path)} is {kind}, not a regular file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > max_bytes:
            raise SpikeFileError(
                f"{shown_path(path)} is {st.st_size} bytes, more than the {max_bytes} accepted")
        if head is not None:
            first = f.read(min(16, st.st_size))
            head(first, st.st_size)
            return first + f.read(st.st_size - len(first))
        # Bounded by the size fstat saw: a file that grows while it is read is
        # read as it was.
        return f.read(st.st_size)


# The most bytes read_json() reads (as hpc_io::read::MAX_METADATA_BYTES): a
# summary, a result line, a configuration.
MAX_METADATA_BYTES = 16 << 20


def stamp(path):
    """What tells the file at path from another written there later: its
    device, inode, modification time (ns) and size, as lstat gives them;
    None when there is none. Taken before a program is run to write the
    file, for written_since."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def written_since(path, before):
    """Raise SpikeFileError (a ValueError) unless the file at path was written
    since its stamp() was `before`: a program that ends with status 0 and
    writes nothing (/bin/true, a wrapper that fails quietly) left the file
    of an earlier run in a kept directory (a validate.py --keep) to be read
    as its own."""
    if before is not None and stamp(path) == before:
        raise SpikeFileError(f"{shown_path(path)} is the file an earlier run left there: "
                             "this run did not write it")


def read_json(path, max_bytes=MAX_METADATA_BYTES):
    """The JSON value of the regular file at path (a summary.json, a NEST script's
    --json), read with read_regular: a FIFO, a device or a directory raises
    SpikeFileError (a ValueError) naming what it is, at once, and so does a file
    over max_bytes, before it is read (json.load(open(path)) waited for a FIFO's
    writer without end and read /dev/zero until memory ran out)."""
    return json.loads(read_regular(path, max_bytes))


def read(path, partial_ok=None):
    """Read and check a spike file; errors (SpikeFileError, OSError) name the file.

    partial_ok: whether an incomplete last record is dropped instead of refused;
    by default only for a file named *.partial.
    """
    if partial_ok is None:
        partial_ok = os.fsdecode(path).endswith(".partial")

    def head(first, size):
        # What is no spike file (a disk image named by mistake) is refused by
        # its first bytes, and one larger than the memory by its size, before
        # the rest is read (a 60 GiB file was read whole to find it no spike file).
        if len(first) >= 8 and first[:8] != MAGIC:
            decode(first)
        available = mem_available()
        if available is not None and size * MEMORY_PER_BYTE > available:
            raise SpikeFileError(
                f"{shown_path(path)} is {size} bytes: reading it needs about {size * MEMORY_PER_BYTE} "
                f"bytes of memory, {available} are available")

    try:
        data = read_regular(path, head=head)
        return decode(data, partial_ok)
    except SpikeFileError as e:
        if str(e).startswith(f"{shown_path(path)} is "):
            raise  # read_regular's own words name the file already
        raise SpikeFileError(f"{shown_path(path)} is not a valid spike file: {e}") from None


def _problem(path, e):
    """One line for what read(path) raised."""
    if isinstance(e, SpikeFileError):
        return str(e)
    if isinstance(e, MemoryError):
        return f"{shown_path(path)}: not enough memory to read it"
    return f"cannot read {shown_path(path)}: {e.strerror or e}"


def say(text, prog):
    """Print a line to standard output, flushed: a closed pipe (`| head -1`) ends
    the program quietly with status 141 (what a shell reports for SIGPIPE, as hpc
    does), any other failed write (a full disk, >/dev/full) with one line naming
    standard output and status 1, never a traceback."""
    try:
        print(text, flush=True)
    except OSError as e:
        # What is left in the buffer cannot be written either: drop it, so that
        # Python's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if isinstance(e, BrokenPipeError):
            sys.exit(141)
        print(f"{prog}: cannot write to standard output: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)


def read_or_exit(path, prog):
    """read(path), or a one-line message on stderr and exit status 1."""
    try:
        return read(path)
    except (SpikeFileError, OSError, MemoryError) as e:
        print(f"{prog}: {_problem(path, e)}", file=sys.stderr)
        sys.exit(1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    prog = "hpc_spikes.py"
    if not argv or any(a.startswith("-") for a in argv):
        print(f"usage: {prog} FILE...  (checks spike files, one line each)", file=sys.stderr)
        return 2
    status = 0
    for path in argv:
        try:
            f = read(path)
        except (SpikeFileError, OSError, MemoryError) as e:
            print(f"{prog}: {_problem(path, e)}", file=sys.stderr)
            status = 1
            continue
        span = f"ticks {f.ticks[0]}..{f.ticks[-1]}" if len(f) else "no spikes"
        dropped = f", {f.dropped_bytes} bytes of an incomplete record dropped" \
            if f.dropped_bytes else ""
        say(f"{shown_path(path)}: valid, {len(f)} spikes of {f.n_neurons} neurons, {span}{dropped}", prog)
    return status


if __name__ == "__main__":
    sys.exit(main())


# The tools' common entry points: the run directory's word on a file, and the
# records as numpy arrays (numpy is imported only by these).


def _check_manifest(run):
    """Raise ValueError unless run has the shape hpc_io::rundir writes (a damaged or
    hand-made run.json is "cannot be read", never a traceback): an object whose
    files are objects with a string name and whose status is a known word."""
    if not isinstance(run, dict):
        raise ValueError("not a JSON object")
    files = run.get("files")
    if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) for f in files):
        raise ValueError("its files are not a list of {name, ...} objects")
    if run.get("status") not in ("running", "complete", "incomplete"):
        raise ValueError(f"its status {str(run.get('status'))[:40]!r} is not "
                         "running, complete or incomplete")
    # A stop time of null is none, as hpc_io::rundir reads it (it writes none by
    # leaving the field out; a null made the whole run.json unreadable here).
    if run["status"] == "incomplete" and not (
            isinstance(run.get("reason"), str)
            and isinstance(run.get("stopped_at") or "", str)):
        raise ValueError("an incomplete run without a reason (and stopped_at) in words")


def _lock_held(run_dir):
    """Whether a process holds the run directory's run.lock (as hpc_io::rundir's
    inspect finds out: a shared lock tried without waiting, released at once).
    True when it cannot be told (no lock file, not a regular file, no flock): the
    manifest's "running" is then taken at its word."""
    import fcntl
    try:
        fd = os.open(os.path.join(run_dir, "run.lock"),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return True
        return False
    finally:
        os.close(fd)


def check_run(path):
    """Warn (on stderr) when the run directory's run.json does not vouch for `path`:
    the file is not the run's, or the run is still running, was killed or stopped
    early. Returns the warning, or None."""
    if not os.path.lexists(path):
        return None  # reading it says so; no word on a file that is not there
    manifest = os.path.join(os.path.dirname(path) or ".", "run.json")
    try:
        # Bounded, never blocking on a FIFO, never following a symbolic link (as
        # the Rust reader, hpc_io::rundir).
        run = json.loads(read_regular(manifest, 16 << 20, follow=False))
        _check_manifest(run)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError, SpikeFileError) as e:
        # RecursionError: JSON nested deeper than Python's recursion limit.
        msg = f"{shown_path(manifest)} cannot be read ({e}): {shown_path(path)} is not vouched for"
    else:
        name = os.path.basename(path)
        status = run.get("status")
        # The manifest's words, cut: a hand-edited run.json may hold anything there.
        run_id, pid, host = (_word(run.get(k)) for k in ("run_id", "pid", "host"))
        if name not in [f.get("name") for f in run.get("files", [])]:
            msg = f"{shown_path(path)} was not written by the run {run_id} of {shown_path(manifest)} (an older or foreign file)"
        elif status == "running" and not _lock_held(os.path.dirname(manifest)):
            msg = (f"{shown_path(path)}: its run {run_id} (pid {pid} on {host}) "
                   f"ended without finishing: it was killed, or it failed and could not mark "
                   f"{shown_path(manifest)} (a full disk?); take it as incomplete")
        elif status == "running":
            msg = f"{shown_path(path)}: its run {run_id} (pid {pid} on {host}) is still running"
        elif status == "incomplete":
            where = f" at {_word(run['stopped_at'])}" if run.get("stopped_at") else ""
            msg = f"{shown_path(path)}: its run is incomplete: {_word(run.get('reason'))}{where}"
        else:
            # The size the run listed, as hpc_io::rundir::check_file compares it:
            # a file replaced or changed since (another run's spike file copied
            # over it) was read as this run's without a word.
            listed = next(f for f in run["files"] if f.get("name") == name).get("size")
            try:
                size = os.stat(path).st_size
            except OSError:
                return None  # reading it says so
            if not (_is_int(listed) and listed != size):
                return None
            msg = (f"{shown_path(path)} is {size} bytes, but its run's manifest says {listed} "
                   f"(changed since the run {run_id} wrote it)")
    print(f"warning: {msg}", file=sys.stderr)
    return msg


def stop_time_ms(path):
    """Where the run that wrote `path` stopped, in ms, when its run.json says so
    (an incomplete run that lists the file, whose stopped_at is "<number> ms",
    as the examples write it: "--stop-at", a signal); else None. Read as
    check_run reads it."""
    manifest = os.path.join(os.path.dirname(path) or ".", "run.json")
    try:
        run = json.loads(read_regular(manifest, 16 << 20, follow=False))
        _check_manifest(run)
    except (OSError, ValueError, RecursionError, SpikeFileError):
        return None
    if os.path.basename(path) not in [f.get("name") for f in run["files"]]:
        return None  # another run's manifest
    at = run.get("stopped_at") if run.get("status") == "incomplete" else None
    if not (isinstance(at, str) and at.endswith(" ms")):
        return None
    try:
        t = float(at[:-3])
    except ValueError:
        return None
    return t if math.isfinite(t) and t >= 0 else None


def read_arrays(path):
    """Return (header dict, spike times in ms, node ids) of a checked spike file, as
    numpy arrays (float64, int64); raises SpikeFileError or OSError."""
    check_run(path)
    return arrays(read(path))


def read_arrays_or_exit(path, prog):
    """read_arrays(path), or a one-line message naming the problem and exit status 1."""
    check_run(path)
    return arrays(read_or_exit(path, prog))


def arrays(f):
    """(header, times in ms, ids) of an SpikeFile, as numpy arrays."""
    import numpy as np

    ticks = np.array(f.ticks, dtype=np.uint32)
    ids = np.array(f.ids, dtype=np.uint32).astype(np.int64)
    return f.header, ticks * f.dt_ms, ids


# What the tools write and run, checked the same way.


# The folders of the system's devices and files, where no tool's output is made
# (as hpc_io::atomic::rename_over refuses them).
_SYSTEM_DIRS = ("/dev", "/proc", "/sys")


def _unreplaceable(path):
    """Why a file written whole and renamed over path must not be (a device, a
    FIFO, a socket or a directory at path or at the end of a link there; a name
    in /dev, /proc or /sys: as root, --json /dev/null replaced the machine's null
    device with a regular file), as the end of a sentence about path; else None."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            st = os.stat(path)
    except OSError:
        st = None  # missing, or a link to nothing: the rename makes the file
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a file")
        return f"is {kind}, not a regular file: not written over"
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for d in _SYSTEM_DIRS:
        if folder == d or folder.startswith(d + "/"):
            return f"is in {d}, the system's folder: not written over"
    return None


def check_output(path, inputs=()):
    """Raise SpikeFileError when path exists and is not a regular file or a symbolic
    link to one, or lies in /dev, /proc or /sys: writing or renaming onto it would
    block on a FIFO or replace a device (as hpc_io::atomic::rename_over refuses);
    or when it is one of the files `inputs` (the spike file a tool reads would be
    replaced by what it writes)."""
    problem = _unreplaceable(path)
    if problem is not None:
        raise SpikeFileError(f"{shown_path(path)} {problem}")
    for i in inputs:
        try:
            same = os.path.samefile(path, i)
        except OSError:
            continue
        if same:
            raise SpikeFileError(f"{shown_path(path)} is the input {i}: not written over "
                                 "(choose another output)")


def result_line(r, keys, prog):
    """The JSON object of the last line that the finished command `r`
    (run_or_exit's) printed, holding a finite number at each of `keys`: NEST's
    result line of a nest_*.py. Anything else (no line, no JSON, a field missing)
    ends the program with one line naming the command and that last line, status
    1 (not a traceback)."""
    lines = r.stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    try:
        n = json.loads(last)
    except (ValueError, RecursionError):
        n = None
    missing = "a JSON object" if not isinstance(n, dict) else next(
        (k for k in keys if isinstance(n.get(k), bool) or not isinstance(n.get(k), (int, float))
         or not math.isfinite(n[k])), None)
    if missing is not None:
        name = os.path.basename(os.fsdecode(r.args[1] if len(r.args) > 1 else r.args[0]))
        print(f"{prog}: {name} printed no result line (no finite number {missing}"
              if missing != "a JSON object" else
              f"{prog}: {name} printed no result line (its last line is not a JSON object",
              end="", file=sys.stderr)
        print(f"): {_word(last or '(nothing)', 300)}", file=sys.stderr)
        sys.exit(1)
    return n


def write_replacing(path, data, prog):
    """Write the bytes `data` to `path`: into a temporary file of its own in
    path's folder (made exclusively: a link planted at path, or at a fixed
    temporary name beside it, is never written through), synced, then renamed
    over path. A device, a FIFO or a directory at path (or at the end of a link
    there), and a name in /dev, /proc or /sys, are refused, not replaced. On
    failure the temporary file is removed and the program ends with one line
    naming path, status 1 (not a traceback)."""
    import tempfile

    problem = _unreplaceable(path)
    if problem is not None:
        print(f"{prog}: {shown_path(path)} {problem}", file=sys.stderr)
        sys.exit(1)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                                   prefix="." + os.path.basename(path) + ".", suffix=".tmp")
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as an ordinary new file, not mkstemp's 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        print(f"{prog}: cannot write {shown_path(path)}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)


def append_line(path, line, prog):
    """Append the text `line` and a line break to the file at path (made when
    missing, with the umask's mode), as a results file gathers one row a run. The
    file is opened without following a symbolic link planted at its name (which
    open(path, "a") appended to, whatever it pointed to) and without blocking, and
    must be a regular file (a FIFO or a device is refused, not written into). On
    failure the program ends with one line naming path, status 1, and the part
    of the row written (a disk full in the middle of it) is cut off again, so that
    no half row is left for the next reader."""
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    fd = None
    end = None
    try:
        fd = os.open(path, flags, 0o666)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a file")
            print(f"{prog}: cannot append to {shown_path(path)}: it is {kind}, not a regular file",
                  file=sys.stderr)
            sys.exit(1)
        end = st.st_size
        data = (line + "\n").encode()
        # One write of the whole row (O_APPEND: two runs' rows do not mix).
        while data:
            data = data[os.write(fd, data):]
        os.fsync(fd)
    except OSError as e:
        if end is not None:
            try:
                os.ftruncate(fd, end)
            except OSError:
                pass
        reason = e.strerror or e
        if e.errno == errno.ELOOP:
            reason = "it is a symbolic link (a results file is never written through one)"
        elif e.errno == errno.ENXIO:  # a FIFO without a reader, opened without blocking
            try:
                mode = os.stat(path).st_mode
                kind = next((k for test, k in _KINDS if test(mode)), "not a file")
                reason = f"it is {kind}, not a regular file"
            except OSError:
                pass
        print(f"{prog}: cannot append to {shown_path(path)}: {reason}", file=sys.stderr)
        sys.exit(1)
    finally:
        if fd is not None:
            os.close(fd)


def run_or_exit(cmd, prog):
    """subprocess.run(cmd) capturing its output; when it cannot start or fails, one
    line naming the command, its status and its last line of stderr, and exit
    status 1 (not a traceback)."""
    import subprocess

    # The script a Python interpreter runs is the command's name.
    first = os.path.basename(os.fsdecode(cmd[0]))
    name = os.path.basename(os.fsdecode(cmd[1])) \
        if first.startswith("python") and len(cmd) > 1 else first
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        print(f"{prog}: cannot run {cmd[0]}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        # A last line of 100,000 characters is not echoed whole.
        print(f"{prog}: {name} failed with status {r.returncode}: {_word(last, 300)}",
              file=sys.stderr)
        sys.exit(1)
    return r
