#!/bin/sh
# Overlap of non-blocking collectives with computation (OSU's method, the figure of
# MVAPICH2-DPU): hpc-collectives' Inline, Thread and Proxy engines through `hpc run`,
# then the MPI library's own MPI_I* collectives (Debian Open MPI) through mpirun, in
# one run on the same machine.
# Usage: [ROUNDS=R] benches/overlap.sh [iterations] [ranks]   (defaults: 1, 100, 2)
set -eu
cd "$(dirname "$0")/.."
ITERS="${1:-100}"
N="${2:-2}"
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
BIN="$CARGO_TARGET_DIR/release"
if command -v mpirun.openmpi >/dev/null 2>&1; then
    cargo build --release -q -p hpc-benches --features mpi --bin overlap
    cargo build --release -q -p hpc-cli
    MPI=1
else
    echo "no Open MPI installed: the MPI_I* reference is skipped" >&2
    cargo build --release -q -p hpc-benches --bin overlap
    cargo build --release -q -p hpc-cli
    MPI=0
fi
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
# ROUNDS > 1 alternates our engines and Open MPI that many times (the machine's
# speed drifts between minutes) and ends with the best pure time of each engine
# against Open MPI's best blocking time, row by row.
ROUNDS="${ROUNDS:-1}"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    r=$((r + 1))
    [ "$ROUNDS" -gt 1 ] && echo "# round $r of $ROUNDS"
    "$BIN/hpc" run -n "$N" -- "$BIN/overlap" --iters "$ITERS" | tee -a "$OUT"
    if [ "$MPI" = 1 ]; then
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            mpirun.openmpi --oversubscribe --bind-to none -n "$N" \
            "$BIN/overlap" --engine mpi --iters "$ITERS" | grep -v '^# overlap\|^engine' | tee -a "$OUT"
    fi
done
if [ "$MPI" = 1 ] && [ "$ROUNDS" -gt 1 ]; then
    echo "# best of $ROUNDS rounds: pure time over Open MPI's blocking collective"
    sed 's/^\[[0-9]*\] *//' "$OUT" | awk '
        $1 ~ /^(inline|thread|proxy|mpi)$/ && $3 ~ /^[0-9]+$/ {
            k = $2 " " $3
            if ($1 == "mpi") { if (!(k in ref) || $4 < ref[k]) ref[k] = $4 }
            else { e = $1 " " k; if (!(e in best) || $5 < best[e]) best[e] = $5; seen[e] = 1 }
        }
        END {
            printf "%-7s %-11s %8s %10s %10s %7s\n", "engine", "collective", "bytes", "pure", "mpi-block", "ratio"
            for (e in seen) { split(e, f, " "); k = f[2] " " f[3]
                if (k in ref) printf "%-7s %-11s %8s %10.1f %10.1f %7.2f\n", f[1], f[2], f[3], best[e], ref[k], best[e] / ref[k] }
        }' | sort -k1,1 -k2,2 -k3,3n
fi
