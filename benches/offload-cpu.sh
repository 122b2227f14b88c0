#!/bin/sh
# What offload buys a rank: the CPU time a rank spends per non-blocking collective
# (post + test + wait, on its thread's CPU clock) while it computes between post and
# wait (OSU's method), for ialltoall, iallgather, ibcast and iallreduce from 4 KiB to
# 4 MiB, with the Inline, Thread and Proxy engines (`hpc run -n N -- offload`,
# benches/src/bin/offload.rs) and Open MPI's own MPI_I* (the Mpi engine under
# mpirun), in one run. ROUNDS rounds alternate ours and Open MPI (the order flips
# every round; inside a run our engines take turns size by size), and the table gives
# the median over rounds of each figure.
#
# Columns: size; the rank's thread CPU time per collective (us) for each engine; the
# Thread engine's process CPU (its progress thread included); Proxy / Inline (the
# target is <= 5% from 64 KiB); the pure wall time of the collective (post and wait
# at once, the slowest rank's) for each engine.
#
# Usage: [ROUNDS=R] benches/offload-cpu.sh [iterations] [ranks]
#   (defaults: ROUNDS=2, 50 iterations (half from 1 MiB), 2 ranks)
#   NO_BUILD=1 uses the release binaries already built (benches/offload.sh does),
#   from BIN (default target/release; benches/device.sh points it at its bundle).
#   EXTRA="--sizes 65536 --colls alltoall" passes options to every run.
#   BEFORE=DIR: the binaries of another build (e.g. main's) run too, alternating
#   with BIN's every round (the order flips), their engines named `inline@before`,
#   `proxy@before`, ...: a before/after comparison from one run (with LAUNCH,
#   DIR as the launched processes see it).
#   LAUNCH="CMD ..." starts every run with CMD instead of `hpc run -n N` and
#   mpirun (e.g. the Docker cluster's srun: benches/offload-cluster.sh), with BIN
#   the binaries' folder as the launched processes see it.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
ITERS="${1:-50}"
N="${2:-2}"
ROUNDS="${ROUNDS:-2}"
EXTRA="${EXTRA:-}"
RELEASE_PACKAGE=hpc-benches
. "$HERE/release.sh"
[ "$MPI" = 1 ] || echo "no Open MPI installed: the MPI_I* column is empty" >&2
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r); $N ranks, $ROUNDS rounds, $ITERS iterations${LAUNCH:+; launched by: $LAUNCH}"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
ours() {
    if [ -n "${LAUNCH:-}" ]; then
        # shellcheck disable=SC2086
        $LAUNCH "$BIN/offload" --iters "$ITERS" $EXTRA >>"$OUT"
        return
    fi
    # shellcheck disable=SC2086
    "$BIN/hpc" run -n "$N" -- "$BIN/offload" --iters "$ITERS" $EXTRA >>"$OUT"
}
theirs() {
    [ "$MPI" = 1 ] || return 0
    if [ -n "${LAUNCH:-}" ]; then
        # shellcheck disable=SC2086
        $LAUNCH "$BIN/offload" --engine mpi --iters "$ITERS" $EXTRA >>"$OUT"
        return
    fi
    # shellcheck disable=SC2086
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        mpirun.openmpi --oversubscribe --bind-to none -n "$N" \
        "$BIN/offload" --engine mpi --iters "$ITERS" $EXTRA >>"$OUT"
}
before() {
    [ -n "${BEFORE:-}" ] || return 0
    if [ -n "${LAUNCH:-}" ]; then
        # shellcheck disable=SC2086
        $LAUNCH "$BEFORE/offload" --iters "$ITERS" $EXTRA
    else
        # shellcheck disable=SC2086
        "$BEFORE/hpc" run -n "$N" -- "$BEFORE/offload" --iters "$ITERS" $EXTRA
    fi | sed 's/^\(\[[0-9]*\] *\)\{0,1\}row \([a-z]*\) /row \2@before /' >>"$OUT"
}
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    r=$((r + 1))
    if [ $((r % 2)) = 1 ]; then ours; before; theirs; else theirs; before; ours; fi
    echo "# round $r of $ROUNDS done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
sed 's/^\[[0-9]*\] *//' "$OUT" | grep '^# \(inline\|thread\|proxy\|mpi\|offload\|a read\)' | sort -u
python3 - "$OUT" <<'PY'
import re, sys, statistics as st
rows = {}
clk = []
for line in open(sys.argv[1]):
    m = re.search(r"clock costs ([0-9.]+) us; about (\d+) of them", line)
    if m:
        clk.append(float(m.group(1)) * int(m.group(2)))
    f = re.sub(r"^\[\d+\]\s*", "", line).split()
    if len(f) >= 8 and f[0] == "row":
        rows.setdefault((f[2], int(f[3]), f[1]), []).append([float(x) for x in f[4:]])
known = ("inline", "thread", "proxy", "mpi")
names = {k[2] for k in rows}
engines = [e for e in known if e in names] + [f"{e}@before" for e in known if f"{e}@before" in names]
def med(k, i):
    v = rows.get(k)
    return st.median(x[i] for x in v) if v else None
def fmt(x, w=8, p=1):
    return f"{'-':>{w}}" if x is None else f"{x:>{w}.{p}f}"
def size(b):
    return f"{b // 1048576} MiB" if b >= 1048576 else f"{b // 1024} KiB"
print("# rank CPU per collective (us, thread CPU clock: post + tests + wait), median over rounds;")
print("# thr-proc = the Thread engine's process CPU (its progress thread too); wall = pure time (us)")
head = f"{'collective':11} {'size':>7} " + " ".join(f"{'cpu-' + e:>9}" for e in engines)
clock = st.median(clk) if clk else 0.0
print(f"# net = both less the clock reads inside the window (about {clock:.1f} us per figure)")
ab = "proxy@before" in names and "inline@before" in names
head += f" {'thr-proc':>9} {'proxy/inl':>9} {'net':>6} "
if ab:
    head += f"{'p/i@bef':>9} "
head += " ".join(f"{'wall-' + e:>10}" for e in engines)
print(head)
for c in ("ialltoall", "iallgather", "ibcast", "iallreduce"):
    for b in sorted({k[1] for k in rows if k[0] == c}):
        line = f"{c:11} {size(b):>7} " + " ".join(fmt(med((c, b, e), 0), 9, 2) for e in engines)
        line += " " + fmt(med((c, b, "thread"), 1), 9, 2)
        inl, prx = med((c, b, "inline"), 0), med((c, b, "proxy"), 0)
        ratio = f"{100 * prx / inl:8.1f}%" if inl and prx is not None else f"{'-':>9}"
        net = f"{'-':>6}"
        if inl and prx is not None and inl > clock:
            net = f"{100 * max(prx - clock, 0) / (inl - clock):5.1f}%"
        line += f" {ratio} {net} "
        if ab:
            ib, pb = med((c, b, "inline@before"), 0), med((c, b, "proxy@before"), 0)
            line += (f"{100 * pb / ib:8.1f}% " if ib and pb is not None else f"{'-':>9} ")
        line += " ".join(fmt(med((c, b, e), 2), 10, 1) for e in engines)
        print(line)
if any(len(v[0]) >= 7 for v in rows.values()):
    print("# where the Proxy engine's rank CPU goes (us, median over rounds): the post, the")
    print("# tests during the compute, the wait, and the rest (the scope's own bookkeeping)")
    builds = ["proxy"] + (["proxy@before"] if "proxy@before" in names else [])
    print(f"{'collective':11} {'size':>7} " + " ".join(
        f"{h + ('' if p == 'proxy' else '@bef'):>10}" for p in builds for h in ("post", "tests", "wait", "rest")))
    for c in ("ialltoall", "iallgather", "ibcast", "iallreduce"):
        for b in sorted({k[1] for k in rows if k[0] == c and k[2] == "proxy"}):
            line = f"{c:11} {size(b):>7}"
            for p in builds:
                k = (c, b, p)
                if k not in rows:
                    line += " " + " ".join(f"{'-':>10}" for _ in range(4))
                    continue
                post, tests, wait, cpu = med(k, 4), med(k, 5), med(k, 6), med(k, 0)
                line += f" {post:10.2f} {tests:10.2f} {wait:10.2f} {cpu - post - tests - wait:10.2f}"
            print(line)
PY
