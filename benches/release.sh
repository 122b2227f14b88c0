# Sourced by the benchmarks that run this workspace's release build with Open
# MPI beside it where it is installed (fft3d.sh, offload-cpu.sh), from the
# repository's root: sets CARGO_TARGET_DIR (default target, exported), BIN
# (default its release folder) and MPI (1 where mpirun.openmpi is installed),
# and builds hpc-cli and the package named, with that package's mpi feature
# where MPI=1, unless NO_BUILD=1.
: "${CARGO_TARGET_DIR:=target}"
export CARGO_TARGET_DIR
BIN="${BIN:-$CARGO_TARGET_DIR/release}"
if command -v mpirun.openmpi >/dev/null 2>&1; then MPI=1; else MPI=0; fi
if [ "${NO_BUILD:-0}" != 1 ]; then
    if [ "$MPI" = 1 ]; then
        cargo build --release -q -p hpc-cli -p "$RELEASE_PACKAGE" --features "$RELEASE_PACKAGE/mpi"
    else
        cargo build --release -q -p hpc-cli -p "$RELEASE_PACKAGE"
    fi
fi
