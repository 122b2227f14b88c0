#!/bin/sh
# The application figure of offloaded collectives (P3DFFT's): time per distributed
# 3-D FFT (examples/fft3d, pencil decomposition, transposes cut into batches) with
#   blocking   a blocking alltoall per batch, no overlap (Inline engine);
#   inline     ialltoall overlapped with the next batch's FFTs, progressed only in
#              the rank's own wait (the baseline of MPI libraries without progress);
#   thread     the same, with the Thread engine's progress thread;
#   proxy      the same, with the node's proxy process moving the data (the DPU's
#              role), with this node's defaults (on a node without a core for the
#              proxy, the ranks copy their own blocks);
#   proxy-all  the same with the proxy making every copy (HPC_PROXY_MIN=0,
#              HPC_PROXY_OWN_COPIES=0), as on a DPU;
#   mpi        the same on Open MPI's MPI_Ialltoall (the Mpi engine, under mpirun;
#              built with the `mpi` feature);
#   mpi-block  Open MPI's blocking alltoall (the Mpi engine, blocking transposes);
# one node, all in one run: ROUNDS rounds, the variants in turn (the order flips
# every round: these machines drift). Each run checks its result against the serial
# FFT (relative error ~1e-15) before it is timed. The table gives the median over
# rounds of each run's median time per transform (the slowest rank's), the best
# single transform, the ranks' thread CPU time per transform, the change against
# `blocking`, and what ran on how many cores.
#
# Usage: [ROUNDS=R] benches/fft3d.sh [N] [ranks] [reps] [batches]
#   (defaults: ROUNDS=3, N=128, 2 ranks, 10 timed transforms, 4 batches)
#   NO_BUILD=1 uses the release binaries already built (benches/offload.sh does),
#   from BIN (default target/release; benches/device.sh points it at its bundle).
#   LAUNCH="CMD ..." starts every run with CMD instead of `hpc run -n N` and
#   mpirun (e.g. the Docker cluster's srun), with BIN the binaries' folder as the
#   launched processes see it: benches/offload-cluster.sh runs this script and
#   benches/offload-cpu.sh so on 2 and 4 nodes of the cluster.
#
# By hand on the Docker cluster (`hpc cluster`; two ranks per node, the
# bytes cross a network), with a build that has `--features mpi` (PMIx bootstrap):
#   cargo build --release -p hpc-cli --features mpi
#   cargo build --release -p hpc-example-fft3d --features mpi
#   target/release/hpc cluster up --nodes 2 --bin target/release
#   for v in "--engine inline --mode blocking" "--engine thread" "--engine proxy" \
#            "--engine mpi"; do
#       target/release/hpc cluster exec srun --mpi=pmix -N 2 -n 4 fft3d --n 128 $v
#   done
#   target/release/hpc cluster down
# (each node's proxy carries its ranks' steps to the other node's proxy).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/.."
NPTS="${1:-128}"
N="${2:-2}"
REPS="${3:-10}"
BATCHES="${4:-4}"
ROUNDS="${ROUNDS:-3}"
RELEASE_PACKAGE=hpc-example-fft3d
. "$HERE/release.sh"
[ "$MPI" = 1 ] || echo "no Open MPI installed: the mpi rows are skipped" >&2
VARIANTS="blocking inline thread proxy proxy-all"
[ "$MPI" = 1 ] && VARIANTS="$VARIANTS mpi mpi-block"
REVERSED=$(echo "$VARIANTS" | tr ' ' '\n' | awk '{ a[NR] = $0 } END { for (i = NR; i > 0; i--) printf "%s ", a[i] }')
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r); fft3d N=$NPTS, $N ranks, $REPS reps, $BATCHES batches, $ROUNDS rounds${LAUNCH:+; launched by: $LAUNCH}"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
COMMON="--n $NPTS --reps $REPS --batches $BATCHES"
one() {
    case $1 in
        blocking) set -- "$1" hpc --engine inline --mode blocking ;;
        inline|thread|proxy) set -- "$1" hpc --engine "$1" ;;
        proxy-all) set -- "$1" hpc-all --engine proxy ;;
        mpi) set -- "$1" mpi --engine mpi ;;
        mpi-block) set -- "$1" mpi --engine mpi --mode blocking ;;
    esac
    v=$1 how=$2
    shift 2
    if [ -n "${LAUNCH:-}" ]; then
        # One launcher for every variant (the Mpi engine too: srun --mpi=pmix).
        case $how in hpc-all) pre="env HPC_PROXY_MIN=0 HPC_PROXY_OWN_COPIES=0" ;; *) pre= ;; esac
        # shellcheck disable=SC2086
        $LAUNCH $pre "$BIN/fft3d" $COMMON "$@"
    elif [ "$how" = hpc ]; then
        # shellcheck disable=SC2086
        "$BIN/hpc" run -n "$N" -- "$BIN/fft3d" $COMMON "$@"
    elif [ "$how" = hpc-all ]; then
        # shellcheck disable=SC2086
        "$BIN/hpc" run -n "$N" -x HPC_PROXY_MIN=0 -x HPC_PROXY_OWN_COPIES=0 -- "$BIN/fft3d" $COMMON "$@"
    else
        # shellcheck disable=SC2086
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            mpirun.openmpi --oversubscribe --bind-to none -n "$N" "$BIN/fft3d" $COMMON "$@"
    fi | sed -n "s/^\(\[0\] \)\{0,1\}result /result variant=$v /p" >>"$OUT"
}
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    r=$((r + 1))
    if [ $((r % 2)) = 1 ]; then order=$VARIANTS; else order=$REVERSED; fi
    for v in $order; do one "$v"; done
    echo "# round $r of $ROUNDS done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
python3 - "$OUT" "$N" <<'PY'
import sys, statistics as st
out, ranks = sys.argv[1], int(sys.argv[2])
runs = {}
for line in open(out):
    kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
    runs.setdefault(kv["variant"], []).append(kv)
order = [v for v in ("blocking", "inline", "thread", "proxy", "proxy-all", "mpi", "mpi-block") if v in runs]
if not order:
    sys.exit("no result lines: every run failed")
first = runs[order[0]][0]
print(f"# fft3d {first['n']}^3 complex, grid {first['grid']}, {first['ranks']} ranks, "
      f"{first['batches']} batches per transpose, {first['reps']} transforms per run; "
      f"median over {len(runs[order[0]])} runs")
nodes = int(first.get("nodes", 1))
proxies = "1 proxy process" if nodes == 1 else f"{nodes} proxy processes (one per node)"
helpers = {"thread": f", {ranks} progress threads", "proxy": f", {proxies}",
           "proxy-all": f", {proxies}"}
base = st.median(float(r["median_ms"]) for r in runs.get("blocking", runs[order[0]]))
print(f"{'variant':10} {'engine':7} {'transposes':10} {'ms/FFT':>8} {'best ms':>8} {'cpu ms':>8} "
      f"{'vs blocking':>11} {'max rel err':>11} {'cores':>5}  processes")
for v in order:
    rs = runs[v]
    t = st.median(float(r["median_ms"]) for r in rs)
    best = min(float(r["min_ms"]) for r in rs)
    cpu = st.median(float(r["cpu_ms"]) for r in rs)
    err = max(float(r["rel_err"]) for r in rs)
    print(f"{v:10} {rs[0]['engine']:7} {rs[0]['mode']:10} {t:8.2f} {best:8.2f} {cpu:8.2f} "
          f"{100 * (t / base - 1):+10.1f}% {err:11.1e} {rs[0]['cores']:>5}  {ranks} ranks{helpers.get(v, '')}")
print("# Published with DPU offload (Graham et al., ISC 2024: P3DFFT++, MPI_Ialltoallv offloaded")
print("# to BlueField DPUs): 14-49% lower time than host-based MPI.")
PY
