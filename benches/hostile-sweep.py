#!/usr/bin/env python3
"""Every flag of every program, given every hostile value: a hostile pass a script repeats.

For each program (the `hpc` tool's subcommands and the examples), the flags that
take a value are read from the program's own `--help`, and each is given, one at
a time, each of a fixed set of hostile values (NaN, infinities, zero and minus
zero, negative, huge and tiny numbers, a number beyond 64 bits, hexadecimal, an
empty string, 100,000 characters, bytes that are not UTF-8, and for flags that
name a file: a device, a FIFO, a directory, a dangling link), on top of a base
command that keeps the run small. Each case runs under an address-space limit and
a timeout, and is judged by what a hostile pass counts as a fault:

  PANIC    the program panicked (status 101 or "panicked at" in its output)
  CRASH    it died of a signal (the timeout's excepted)
  HANG     no exit within the timeout and not one line of output
  LONG     a line of output longer than 1,000 characters (after `hpc run`'s
           "[R] " tag)
  ALLOC    an allocation failed under the address-space limit
  STATUS   an exit status above 125, or one `hpc run` reserves for itself (124,
           125) from any other program

and prints, besides, the cases whose outcome a reader should look at:

  ACCEPTED a non-finite or empty value for a flag, and the program ended 0
  SLOW     still running at the timeout, with output (a run the value made long)

`--config` gives every key of the shipped `brunel.toml` and `microcircuit.toml`
(down through tables, inline tables and a list's first element; made small
first) each of TOML's extreme numbers, other types, 100,000 characters and
bytes that are not UTF-8 (kinds 3, 6, 8, 11). `--env` gives every variable of the project's table (crates/hpc-env) the same
values, to `hello` and to two ranks of it under `hpc run`. `--streams` runs each
program's base command, `--help` and `--version` with standard output on
`/dev/full` and on a pipe whose reader is gone:

  LOST     on /dev/full it ended 0 (what it wrote is lost and nothing says so)
  UNNAMED  on /dev/full it ended non-zero without naming the stream
  PIPE     on a closed pipe it ended other than 0 (the examples, whose results
           are files, go on quietly) or 141 (`hpc`, as SIGPIPE would end it)

Usage: python3 benches/hostile-sweep.py [--bin DIR] [--only NAME[,NAME]]
                                         [--timeout S] [--jobs N] [--list]
                                         [--env | --config | --streams]

`hpc perftest` runs as two ranks under `hpc run`, as it must (`LAUNCHED`).

`--bin` is the folder of the built programs (default `target/release`; build
them with `cargo build --release -p hpc-cli -p hpc-example-brunel
-p hpc-example-microcircuit -p hpc-example-hpc-benchmark -p hpc-example-fft3d
-p hpc-example-hello`). Exits 1 when any case is a fault.
"""

import argparse
import concurrent.futures
import copy
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib

LINE_CHARS = 1000
ADDRESS_SPACE = 8 << 30

NUMBERS = [
    "nan", "NaN", "inf", "-inf", "-1", "-0", "0", "1e300", "-1e300", "1e-300",
    "18446744073709551616", "0x10", "1_000", "", " 1",
]
TEXTS = ["x" * 100_000, "\udcff\udcfe", "a\nb", "-"]
PATHS = ["/dev/zero", "@FIFO", "@DIR", "@DANGLING", "@LOOP", "/proc/self/mem"]

# Flags whose value names a file or directory, by name.
PATH_FLAG = re.compile(r"(dir|out|input|config|file|path|restart|trace|key|reference|sdk|base|spool)")

# Base commands: each keeps a run small, with its output in a scratch folder ({D}).
PROGRAMS = {
    "brunel": ["--order", "50", "--t-sim", "20", "--no-pin", "-q", "--no-plot", "--out", "{D}/out"],
    "microcircuit": ["--n-scaling", "0.02", "--k-scaling", "0.02", "--t-presim", "0", "--t-sim", "20",
                     "--no-pin", "-q", "--no-plot", "--out", "{D}/out"],
    "hpc_benchmark": ["--t-presim", "0", "--no-pin", "--no-plot", "-q", "--scale", "0.02", "--t-sim", "20",
                      "--out", "{D}/out"],
    "fft3d": ["--n", "8", "--reps", "1", "--warmup", "0"],
    "hpc run": ["-n", "1", "--", "true"],
    "hpc topo": [],
    "hpc doctor": [],
    "hpc selftest": [],
    "hpc perftest": ["send_lat", "--iters", "10", "--size", "8"],
    "hpc trace merge": ["{D}/none", "-o", "{D}/merged.json"],
    "hpc trace svg": ["{TRACE}", "-o", "{D}/t.svg"],
    "hpc new": ["{D}/app"],
    "hpc man": ["--dir", "{D}/man"],
    "hpc proxy": [],
}

# Programs that run only as ranks of a job: each case is started by the launcher.
LAUNCHED = {"hpc perftest": ["{BIN}/hpc", "run", "-n", "2", "--timeout", "10", "--"]}

# A merged trace of one span, for `hpc trace svg`.
TRACE = '{"traceEvents":[{"name":"a","ph":"X","ts":0,"dur":1000,"pid":0,"tid":0}]}'

FLAG_LINE = re.compile(r"^\s+(?:-(\w), )?--([a-z0-9][a-z0-9-]*)(?:[ =]<([^>]+)>|=?([A-Z_]+))?")


def limit():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    os.setsid()


def run(argv, timeout, cwd, env=None, stdout=subprocess.PIPE):
    """Runs argv under the limits; returns (status or None on timeout, output
    bytes: standard output and error, or standard error alone when `stdout` is
    given)."""
    argv = [a if isinstance(a, bytes) else os.fsencode(a) for a in argv]
    err = subprocess.STDOUT if stdout == subprocess.PIPE else subprocess.PIPE
    try:
        p = subprocess.Popen(argv, stdout=stdout, stderr=err, stdin=subprocess.DEVNULL,
                             preexec_fn=limit, cwd=cwd, env=env)
    except OSError as e:
        sys.exit("cannot start %s: %s" % (argv[0].decode(errors="replace"), e))
    try:
        out, errs = p.communicate(timeout=timeout)
        status = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, errs = p.communicate()
        status = None
    return status, (out if stdout == subprocess.PIPE else errs) or b""


def command(bindir, name):
    """The program and its subcommands: `hpc trace svg` is `BIN/hpc trace svg`."""
    words = name.split()
    return [os.path.join(bindir, words[0])] + words[1:]


def flags_of(bindir, name):
    """The flags of a program that take a value, from its own --help."""
    _, out = run(command(bindir, name) + ["--help"], 30, None)
    flags = []
    for line in out.decode(errors="replace").splitlines():
        m = FLAG_LINE.match(line)
        if not m or m.group(2) in ("help", "version"):
            continue
        value = m.group(3) or m.group(4)
        if value:
            flags.append((m.group(2), value))
    return flags


def values_for(flag, value_name):
    if PATH_FLAG.search(flag) or PATH_FLAG.search(value_name.lower()):
        return PATHS + TEXTS + ["", "-1"]
    return NUMBERS + TEXTS


class Scratch:
    """A scratch folder for one case, with a trace file for `hpc trace svg`,
    removed after it; `fill` makes a value's file (`@FIFO`, `@DIR`, ...) in it."""

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="sweep-")
        self.trace = os.path.join(self.dir, "trace.json")
        with open(self.trace, "w") as f:
            f.write(TRACE)
        return self

    def __exit__(self, *_):
        shutil.rmtree(self.dir, ignore_errors=True)

    def fill(self, value):
        path = os.path.join(self.dir, value[1:].lower())
        if value == "@FIFO":
            os.mkfifo(path)
        elif value == "@DIR":
            os.mkdir(path)
        elif value == "@DANGLING":
            os.symlink(os.path.join(self.dir, "missing"), path)
        elif value == "@LOOP":
            os.symlink(path, path)
        else:
            return value
        return path

    def args(self, bindir, words):
        return [w.replace("{D}", self.dir).replace("{TRACE}", self.trace).replace("{BIN}", bindir)
                for w in words]


def without(base, flag):
    """The base command without a flag of the same name (and its value)."""
    out, skip = [], False
    for i, a in enumerate(base):
        if skip:
            skip = False
            continue
        if a == "--" + flag:
            skip = i + 1 < len(base) and not base[i + 1].startswith("-")
            continue
        out.append(a)
    return out


RANK_TAG = re.compile(r"^\[\d+\] ")

# Flags whose value is any text (a log filter, a title, a name): no value is refused.
FREE_TEXT = {"log", "title", "name"}


def judge(status, out, value, name="", flag=""):
    text = out.decode(errors="replace")
    # `hpc run` forwards a rank's lines as they are, after its "[R] " tag.
    long_line = max((len(RANK_TAG.sub("", line, 1)) for line in text.splitlines()), default=0)
    faults = []
    if status == 101 or "panicked at" in text:
        faults.append("PANIC")
    elif status is not None and status < 0:
        faults.append("CRASH")
    if status is None and not text.strip():
        faults.append("HANG")
    if long_line > LINE_CHARS:
        faults.append("LONG %d" % long_line)
    if "memory allocation of" in text or "failed to allocate" in text:
        faults.append("ALLOC")
    # `hpc run` gives 124 and 125 for the launcher's own ends, as its help says.
    launcher = name == "hpc run" or name in LAUNCHED
    if status is not None and (status > 125 or status in (124, 125) and not launcher):
        faults.append("STATUS")
    notes = []
    if status == 0 and value in ("nan", "NaN", "inf", "-inf", "") and flag not in FREE_TEXT:
        notes.append("ACCEPTED")
    if status is None and text.strip():
        notes.append("SLOW")
    return faults, notes, text


def last_line(text):
    return text.strip().splitlines()[-1][:160] if text.strip() else ""


def flag_case(bindir, name, base, flag, value, timeout):
    with Scratch() as sc:
        argv = command(bindir, name) + sc.args(bindir, without(base, flag))
        tail = []
        if "--" in argv:
            i = argv.index("--")
            argv, tail = argv[:i], argv[i:]
        argv = argv + ["--%s=%s" % (flag, sc.fill(value))] + tail
        argv = sc.args(bindir, LAUNCHED.get(name, [])) + argv
        status, out = run(argv, timeout, sc.dir)
        faults, notes, text = judge(status, out, value, name, flag)
        return "%s --%s=%s" % (name, flag, shown(value)), status, faults, notes, last_line(text)


def env_case(bindir, name, base, var, value, timeout):
    with Scratch() as sc:
        v = os.fsencode(sc.fill(value))
        pair = os.fsencode(var) + b"=" + v
        argv = [os.path.join(bindir, base[0])] + sc.args(bindir, base[1:])
        argv = [pair if a == "{VAR}" else a for a in argv]
        env = dict(os.environb)
        env[os.fsencode(var)] = v
        status, out = run(argv, timeout, sc.dir, env=env)
        faults, notes, text = judge(status, out, None, name)
        return "%s %s=%s" % (name, var, shown(value)), status, faults, notes, last_line(text)


def stream_case(bindir, name, extra, sink, timeout):
    """A program's base command (or `extra`) with standard output on `sink`:
    `/dev/full` must end non-zero naming the stream; a closed pipe must end 0
    (the examples, whose results are files, go on quietly) or 141 (`hpc`, as
    SIGPIPE would end it)."""
    with Scratch() as sc:
        argv = command(bindir, name) + sc.args(bindir, extra or STREAM_BASES[name])
        if sink == "/dev/full":
            with open("/dev/full", "wb") as full:
                status, err = run(argv, timeout, sc.dir, stdout=full)
        else:
            r, w = os.pipe()
            os.close(r)
            try:
                status, err = run(argv, timeout, sc.dir, stdout=w)
            finally:
                os.close(w)
        faults, notes, text = judge(status, err, None, name)
        faults = [f for f in faults if f != "STATUS" or status != 141]
        named = "standard output" in text or "stdout" in text
        if sink == "/dev/full" and status == 0:
            faults.append("LOST")
        elif sink == "/dev/full" and status is not None and not named:
            faults.append("UNNAMED")
        elif sink != "/dev/full" and status not in (0, 141):
            faults.append("PIPE")
        return "%s %s > %s" % (name, " ".join(extra), sink), status, faults, notes, last_line(text)


def shown(value):
    if len(value) > 20:
        return "%s…(%d)" % (value[:8], len(value))
    return repr(value)


ENV_VAR = re.compile(r'^\s+[A-Z][a-z]+ [A-Z_0-9]+ = "(HPC_[A-Z_0-9]+)"', re.M)

# Where each variable is given: to one program directly, and to two ranks by the launcher.
ENV_BASES = {
    "hello": ["hello"],
    "hpc run -n 2": ["hpc", "run", "-n", "2", "-x", "{VAR}", "--", "{BIN}/hello"],
}


def env_vars():
    """Every variable of the project's table (crates/hpc-env)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "crates", "hpc-env", "src", "lib.rs")) as f:
        return ENV_VAR.findall(f.read())


# Base commands that write to standard output (the flags' bases are quiet where they can be).
STREAM_BASES = {
    "brunel": ["--order", "50", "--t-sim", "20", "--no-pin", "--no-plot", "--out", "{D}/out"],
    "microcircuit": ["--n-scaling", "0.02", "--k-scaling", "0.02", "--t-presim", "0", "--t-sim", "20",
                     "--no-pin", "--no-plot", "--out", "{D}/out"],
    "hpc_benchmark": ["--t-presim", "0", "--no-pin", "--no-plot", "--scale", "0.02", "--t-sim", "20",
                      "--out", "{D}/out"],
    "fft3d": ["--n", "8", "--reps", "1", "--warmup", "0"],
    "hello": [],
    "hello --help": [],
    "hpc run": ["-n", "2", "--", "{BIN}/hello"],
    "hpc topo": [],
    "hpc doctor": [],
    "hpc selftest": [],
    "hpc new": ["{D}/app"],
    "hpc man": [],
    "hpc completions": ["bash"],
}


# The shipped configuration files, made small (the keys set here), and the
# command that reads them ({CONFIG}).
CONFIGS = {
    "brunel": ("examples/brunel/brunel.toml", {"order": 50, "t_sim": 20.0},
               ["--config", "{CONFIG}", "--no-pin", "-q", "--no-plot", "--out", "{D}/out"]),
    "microcircuit": ("examples/microcircuit/microcircuit.toml",
                     {"n_scaling": 0.02, "k_scaling": 0.02, "t_presim": 0.0, "t_sim": 20.0},
                     ["--config", "{CONFIG}", "--no-pin", "-q", "--no-plot", "--out", "{D}/out"]),
}

# What a key's value is replaced with: TOML's numbers at their extremes, other
# types, and text beyond reason ("RAW" is bytes that are not UTF-8 in a string).
CONFIG_VALUES = [float("nan"), float("inf"), float("-inf"), -1, -0.0, 0, 1e300, -1e300, 1e-300,
                 2 ** 64, 2 ** 63 - 1, "x" * 100_000, "", [], {}, True, [1e300] * 3, "RAW"]


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{ " + ", ".join("%s = %s" % (k, toml_value(x)) for k, x in v.items()) + " }"


def toml_text(doc):
    lines = ["%s = %s" % (k, toml_value(v)) for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append("[%s]" % k)
            lines += ["%s = %s" % (kk, toml_value(vv)) for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def leaves(doc, path=()):
    """Every key's path, down through tables and inline tables; a list is a
    leaf and so is its first element."""
    for k, v in doc.items():
        if isinstance(v, dict):
            yield from leaves(v, path + (k,))
        else:
            yield path + (k,)
            if isinstance(v, list) and v:
                yield path + (k, 0)


def replaced(doc, path, value):
    doc = copy.deepcopy(doc)
    at = doc
    for k in path[:-1]:
        at = at[k]
    at[path[-1]] = value
    return doc


def config_case(bindir, name, path, value, timeout):
    file, small, base = CONFIGS[name]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, file), "rb") as f:
        doc = tomllib.load(f)
    doc.update(small)
    with Scratch() as sc:
        config = os.path.join(sc.dir, "c.toml")
        text = toml_text(replaced(doc, path, "\0RAW\0" if value == "RAW" else value)).encode()
        with open(config, "wb") as f:
            f.write(text.replace(b'"\\u0000RAW\\u0000"', b'"\xff\xfe"'))
        argv = command(bindir, name) + [a.replace("{CONFIG}", config) for a in sc.args(bindir, base)]
        status, out = run(argv, timeout, sc.dir)
        v = value if isinstance(value, str) else toml_value(value)
        faults, notes, text = judge(status, out, v if v in ("nan", "inf", "-inf", "") else None, name)
        key = ".".join(str(k) for k in path)
        return "%s config %s = %s" % (name, key, shown(v)), status, faults, notes, last_line(text)


def cases_of(args, only):
    """(label, worker, its arguments) of every case the options ask for."""
    keep = lambda name: not only or name in only
    if args.env:
        values = NUMBERS + TEXTS + ["@DIR", "/dev/zero"]
        return [(env_case, (n, b, var, v)) for n, b in ENV_BASES.items() if keep(n)
                for var in env_vars() for v in values]
    if args.config:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cases = []
        for n, (file, _, _) in CONFIGS.items():
            if keep(n):
                with open(os.path.join(root, file), "rb") as f:
                    doc = tomllib.load(f)
                cases += [(config_case, (n, path, v)) for path in leaves(doc) for v in CONFIG_VALUES]
        return cases
    if args.streams:
        return [(stream_case, (n, extra, sink)) for n in STREAM_BASES if keep(n)
                for extra in ([], ["--help"], ["--version"])
                if not (extra and n.startswith("hello") or extra == ["--version"] and " " in n)
                for sink in ("/dev/full", "closed pipe")]
    return [(flag_case, (n, b, f, v)) for n, b in PROGRAMS.items() if keep(n)
            for f, value_name in flags_of(args.bin, n) for v in values_for(f, value_name)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="target/release")
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=float, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--env", action="store_true", help="the HPC_ variables instead of the flags")
    ap.add_argument("--config", action="store_true",
                    help="every key of the shipped configuration files, instead of the flags")
    ap.add_argument("--streams", action="store_true",
                    help="standard output on a full device and a closed pipe, instead of the flags")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    for program in {name.split()[0] for name in PROGRAMS} | {"hello"}:
        if not os.access(os.path.join(args.bin, program), os.X_OK):
            sys.exit("no program %s in %s: build the programs first (see --help)" % (program, args.bin))
    cases = cases_of(args, set(filter(None, args.only.split(","))))
    if args.list:
        for worker, a in cases:
            print(worker.__name__, *(shown(x) if isinstance(x, str) else x for x in a))
        print(len(cases), "cases")
        return 0
    faults = notes = 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(worker, args.bin, *a, args.timeout) for worker, a in cases]
        for fut in futures:
            label, status, fs, ns, last = fut.result()
            if fs or ns:
                print("%-8s %s  status %s  %s" % (",".join(fs + ns), label, status, last), flush=True)
            faults += bool(fs)
            notes += bool(ns) and not fs
    print("%d cases, %d faults, %d to look at" % (len(cases), faults, notes))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
