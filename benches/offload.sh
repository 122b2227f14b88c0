#!/bin/sh
# What offload buys, in one run: the rank CPU time per collective of every engine
# (benches/offload-cpu.sh) and the time per distributed 3-D FFT with blocking and
# overlapped transposes (benches/fft3d.sh), from one build.
# Usage: benches/offload.sh          (ROUNDS, as in the two scripts)
set -eu
cd "$(dirname "$0")/.."
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
if command -v mpirun.openmpi >/dev/null 2>&1; then
    cargo build --release -q -p hpc-cli -p hpc-benches -p hpc-example-fft3d \
        --features hpc-benches/mpi,hpc-example-fft3d/mpi
else
    cargo build --release -q -p hpc-cli -p hpc-benches -p hpc-example-fft3d
fi
export NO_BUILD=1
echo "## Rank CPU per collective (benches/offload-cpu.sh)"
benches/offload-cpu.sh "${OFFLOAD_ITERS:-50}" "${RANKS:-2}"
echo
echo "## Time per 3-D FFT (benches/fft3d.sh)"
benches/fft3d.sh "${FFT_N:-128}" "${RANKS:-2}" "${FFT_REPS:-10}"
