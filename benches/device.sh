#!/usr/bin/env bash
# The measurements that need a GPU machine with spare cores, in one script:
#   1. the GPU allreduce (hpc-gpu): correctness against a float64 reference from
#      1 element to 2^28, reduce kernel vs device-to-device copy, busbw for NCCL
#      and the native kernels;
#   2. the overlap of offloaded collectives with spare cores (OSU's method; Thread
#      and Proxy engines pinned to progress cores, beside Open MPI's MPI_I*);
#   3. strong and weak scaling of the examples from 1 to 16 ranks (NEST's
#      hpc_benchmark among them, weak), and the full-scale microcircuit on 1 to 16
#      threads of one rank;
#   4. what offload buys with spare cores: the rank CPU time per collective of every
#      engine (benches/offload-cpu.sh) and the time per distributed 3-D FFT with
#      blocking and overlapped transposes (benches/fft3d.sh).
#
# Such a machine usually has no Rust toolchain, no Debian packages and no network,
# so the work is split in two:
#
#   benches/device.sh pack [--dev FEATURES] [DIR]
#                                     here: build release binaries and bundle them
#                                     with every shared library they need (hwloc,
#                                     Open MPI and its runtime, ...) into DIR
#                                     (default .device/, about 56 MiB of the 60 allowed);
#                                     --dev: dev-profile binaries instead (for `dry`)
#   benches/device.sh run [--dry] [--bundle DIR] [--report FILE]
#                                     there: run the three sets from the bundle and
#                                     print one report (also written to FILE)
#   benches/device.sh dry [--features LIST]
#                                     here (CI): pack --dev, then `run --dry` from the
#                                     bundle inside a bare Debian root file system
#                                     (no hwloc, no MPI installed) when mmdebstrap is
#                                     there, so the bundle is known to be complete.
#                                     Its binaries are the dev-profile ones that a
#                                     test run with LIST (CI: all features) built, so
#                                     it needs no release build of its own
#
# `run` finishes in well under 10 minutes on 16 cores; each part has its own time
# budget and a part that cannot run says why (no GPU, no NCCL: native kernels only,
# too few cores for spare progress cores) instead of failing the others. `--dry`
# shrinks every part (sizes, ranks, iterations) to check the script on a small
# machine; its figures mean nothing.
#
# Exit status: 0 when every part that could run passed, 1 when one failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

die() { echo "device.sh: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# pack
# ---------------------------------------------------------------------------

# Debian packages whose files make up the Open MPI runtime (launcher, components,
# help texts) in the bundle; their libraries are found through ldd too.
MPI_PACKAGES="openmpi-bin openmpi-common libopenmpi3 libpmix2"

# Libraries that every Linux machine has (and must not be shadowed by copies).
is_system_lib() {
    case "$(basename "$1")" in
        linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libutil.so*|libresolv.so*|libgcc_s.so*|libstdc++.so*|libcuda.so*|libnvidia*) return 0 ;;
    esac
    return 1
}

# Copies every non-system shared library that $1 needs into $2.
copy_libs() {
    local bin=$1 dest=$2 lib
    ldd "$bin" 2>/dev/null | awk '/=> \// { print $3 }' | while read -r lib; do
        is_system_lib "$lib" && continue
        # Open MPI's own libraries are already in the bundle's relocated tree.
        [ -n "$(find "$(dirname "$dest")/mpi" -name "$(basename "$lib")" -print -quit 2>/dev/null)" ] && continue
        [ -e "$dest/$(basename "$lib")" ] || cp -L "$lib" "$dest/"
    done
}

# The programs of the bundle: binaries of the workspace, and one example.
BINS="hpc overlap offload brunel fft3d hpc_benchmark"
EXAMPLES="gpu_check"

# build_release: the device's binaries, optimised, each package with the features it
# needs there. Prints the directory they are in.
build_release() {
    local target=$1
    echo "== building release binaries" >&2
    (cd "$root" && cargo build --release -q -p hpc-cli --features mpi)
    (cd "$root" && cargo build --release -q -p hpc-benches --features mpi --bin overlap --bin offload)
    (cd "$root" && cargo build --release -q -p hpc-example-brunel)
    (cd "$root" && cargo build --release -q -p hpc-example-fft3d --features mpi)
    (cd "$root" && cargo build --release -q -p hpc-example-hpc-benchmark)
    (cd "$root" && cargo build --release -q -p hpc-gpu --example gpu_check)
    if [ -n "$MICROCIRCUIT" ]; then
        (cd "$root" && cargo build --release -q -p hpc-example-microcircuit)
    fi
    echo "$target/release"
}

# build_dev FEATURES: the same programs in the dev profile, in one build of the
# whole workspace with FEATURES (comma-separated, as `cargo xtask test` passes its
# all-features list), so that a test run with those features has already built
# them and this build only checks that they are fresh. Prints their directory.
build_dev() {
    local target=$1 features=$2 sel=() b
    echo "== building dev-profile binaries (workspace, features: ${features:-default})" >&2
    for b in $BINS $MICROCIRCUIT; do sel+=(--bin "$b"); done
    for b in $EXAMPLES; do sel+=(--example "$b"); done
    (cd "$root" && cargo build -q --workspace ${features:+--features "$features"} "${sel[@]}")
    echo "$target/debug"
}

# pack [--dev FEATURES] [DIR]: release binaries (what a device runs), or with
# --dev the dev-profile ones of a test build (what CI's dry run checks the script
# and the bundle's libraries with). The 60 MiB limit holds the release bundle; a
# dev-profile bundle's binaries are several times larger, so there only the rest
# (libraries and the Open MPI runtime) is held to it.
pack() {
    local dev=0 features="" out="" bin
    while [ $# -gt 0 ]; do
        case $1 in
            --dev) dev=1; features=${2-}; [ $# -ge 2 ] || die "pack: --dev needs a feature list (may be empty)"; shift ;;
            -*) die "pack: unknown argument $1" ;;
            *) out=$1 ;;
        esac
        shift
    done
    out=${out:-$root/.device}
    # A relative $CARGO_TARGET_DIR is the caller's: cargo builds from the root.
    local target=${CARGO_TARGET_DIR:-$root/target}
    case $target in /*) ;; *) target=$PWD/$target ;; esac
    export CARGO_TARGET_DIR=$target
    command -v ldd >/dev/null || die "pack needs ldd"
    MICROCIRCUIT=""
    if (cd "$root" && cargo metadata --no-deps --format-version 1 | grep -q '"name":"hpc-example-microcircuit"'); then
        MICROCIRCUIT=microcircuit
    fi
    if [ "$dev" = 1 ]; then bin=$(build_dev "$target" "$features"); else bin=$(build_release "$target"); fi
    local progs=() b
    for b in $BINS $MICROCIRCUIT; do progs+=("$bin/$b"); done
    for b in $EXAMPLES; do progs+=("$bin/examples/$b"); done

    echo "== bundling into $out" >&2
    rm -rf "$out"
    mkdir -p "$out/bin" "$out/lib"
    # The Open MPI runtime, relocated under $out/mpi (found through OPAL_PREFIX).
    if command -v dpkg >/dev/null && dpkg -s openmpi-bin >/dev/null 2>&1; then
        local pkg f
        for pkg in $MPI_PACKAGES; do
            dpkg -L "$pkg" | while read -r f; do
                [ -f "$f" ] || continue
                case "$f" in /usr/share/doc/*|/usr/share/man/*|/usr/share/lintian/*) continue ;; esac
                mkdir -p "$out/mpi$(dirname "$f")"
                cp -L "$f" "$out/mpi$f"
            done
        done
        # Libraries that Open MPI's own components load (UCX, libfabric, ...).
        find "$out/mpi" -name '*.so*' -type f | while read -r f; do copy_libs "$f" "$out/lib"; done
        copy_libs "$(readlink -f /usr/bin/orterun)" "$out/lib"
    else
        echo "   Open MPI is not installed here: the bundle has no MPI reference" >&2
    fi
    local p
    for p in "${progs[@]}"; do
        cp "$p" "$out/bin/"
        # Symbols too, not only debug info: the bundle travels under a size limit
        # (a panic still says where; a backtrace on the device shows addresses).
        strip --strip-all "$out/bin/$(basename "$p")" 2>/dev/null || true
        copy_libs "$p" "$out/lib"
    done
    cp "$0" "$out/device.sh"
    cp "$here/offload-cpu.sh" "$here/fft3d.sh" "$here/release.sh" "$out/"
    (cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown) >"$out/COMMIT"
    local size rest
    size=$(du -sm "$out" | cut -f1)
    rest=$(du -sm --exclude=bin "$out" | cut -f1)
    echo "== bundle: $(ls "$out/bin" | tr '\n' ' ')+ $(ls "$out/lib" | wc -l) libraries, ${size} MiB (${rest} MiB without the binaries)" >&2
    if [ "$dev" = 1 ]; then
        [ "$rest" -le 60 ] || die "the bundle's libraries and MPI runtime are ${rest} MiB, over the 60 MiB the whole bundle may take"
    else
        [ "$size" -le 60 ] || die "the bundle is ${size} MiB, over the 60 MiB it may take"
    fi
}

# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------

REPORT=/dev/null
say() { printf '%s\n' "$*" | tee -a "$REPORT"; }
FAILED=()

# part NAME SECONDS FUNCTION: runs one part (this script again, in its own process
# under `timeout`) within its own budget, recording failures.
part() {
    local name=$1 secs=$2 fn=$3
    say ""
    say "## $name"
    local t0=$SECONDS rc=0
    timeout --kill-after=10 "$secs" bash "$here/$(basename "$0")" __part "$fn" 2>&1 | tee -a "$REPORT" \
        || rc=${PIPESTATUS[0]}
    case $rc in
        0) say "($name: done in $((SECONDS - t0)) s)" ;;
        3) say "($name: SKIPPED, reason above)" ;;
        124|137) say "($name: FAILED: over its budget of ${secs} s)"; FAILED+=("$name") ;;
        *) say "($name: FAILED with status $rc)"; FAILED+=("$name") ;;
    esac
}

machine() {
    echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), bundle $(cat "$BUNDLE/COMMIT" 2>/dev/null)"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
        nvidia-smi | awk -F'CUDA Version: ' 'NF > 1 { split($2, a, " "); print "cuda (driver): " a[1] }'
        if command -v nvcc >/dev/null 2>&1; then nvcc --version | tail -1 | sed 's/^/nvcc: /'; fi
    else
        echo "gpu: none (nvidia-smi missing or finds no device)"
    fi
}

# Puts the CUDA libraries that cudarc loads by name (libnvrtc.so, libnccl.so) on
# the library path: toolkits and pip wheels install them under versioned names.
cuda_libs() {
    local shim="$WORK/cuda-libs" name f
    mkdir -p "$shim"
    for name in libnvrtc libnccl libcublas; do
        f=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
                /usr/local/lib /opt -name "$name.so*" -type f 2>/dev/null | sort -V | tail -1 || true)
        [ -n "$f" ] || continue
        ln -sf "$f" "$shim/$name.so"
        ln -sf "$f" "$shim/$(basename "$f")"
        # NVRTC also needs its builtins library beside it.
        for b in "$(dirname "$f")"/libnvrtc-builtins.so*; do [ -e "$b" ] && ln -sf "$b" "$shim/"; done
    done
    export LD_LIBRARY_PATH="$shim:$LD_LIBRARY_PATH"
}

gpu_part() {
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
        echo "no NVIDIA GPU or driver here (nvidia-smi -L fails)."
        echo "what still ran: gpu_check started and gave its error for a machine without CUDA:"
        "$BUNDLE/bin/gpu_check" --backend native --max-log2 4 2>&1 | tail -2 || true
        return 3
    fi
    cuda_libs
    local max=28 ranks="2 4"
    if [ "$DRY" = 1 ]; then max=12; ranks="2"; fi
    local nccl=auto
    if ! ls "$WORK/cuda-libs"/libnccl.so >/dev/null 2>&1; then
        echo "no libnccl found: native kernels only"
        nccl=native
    fi
    echo "### 1 rank, backend $nccl, 1 .. 2^$max elements"
    "$BUNDLE/bin/gpu_check" --backend "$nccl" --max-log2 "$max"
    if [ "$nccl" = auto ]; then
        echo "### 1 rank, native kernels"
        "$BUNDLE/bin/gpu_check" --backend native --max-log2 "$max"
    fi
    for k in $ranks; do
        echo "### $k ranks on one GPU, native kernels"
        "$BUNDLE/bin/hpc" run -n "$k" -- "$BUNDLE/bin/gpu_check" --backend native --max-log2 "$((max - 2))"
    done
}

overlap_part() {
    local cores n iters sizes
    cores=$(nproc)
    if [ "$DRY" = 1 ]; then
        n=2; iters=5; sizes=65536
        echo "dry run: $n ranks, $iters iterations, 64 KiB only"
    else
        # One compute core and one progress core per rank, the proxy sharing them.
        n=$((cores / 2)); [ "$n" -gt 8 ] && n=8
        iters=200; sizes=1024,65536,262144,1048576,4194304
        if [ "$n" -lt 2 ]; then
            echo "$cores cores: no spare core for progress beside 2 ranks"
            return 3
        fi
    fi
    local common=(--iters "$iters" --sizes "$sizes")
    local prog=(--bind core --progress 1)
    [ "$cores" -ge $((2 * n)) ] || { echo "$cores cores for $n ranks: progress cores are shared"; prog=(); }
    # Ours and Open MPI's alternate (the machine's speed drifts between minutes).
    local rounds=2 r
    [ "$DRY" = 1 ] && rounds=1
    for r in $(seq "$rounds"); do
        echo "### round $r of $rounds: engines inline, thread and proxy (hpc run -n $n ${prog[*]} --proxy)"
        "$BUNDLE/bin/hpc" run -n "$n" "${prog[@]}" --proxy -- "$BUNDLE/bin/overlap" "${common[@]}"
        if [ -x "$BUNDLE/mpi/usr/bin/orterun" ]; then
            echo "### round $r of $rounds: Open MPI's MPI_I* (mpirun -n $n --bind-to core)"
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                "$BUNDLE/mpi/usr/bin/orterun" --oversubscribe --bind-to core -n "$n" \
                "$BUNDLE/bin/overlap" --engine mpi "${common[@]}"
        else
            echo "no Open MPI in the bundle: the MPI_I* reference is missing"
        fi
    done
}

offload_part() {
    local cores n iters sizes rounds=1 npts=128 reps=5
    cores=$(nproc)
    if [ "$DRY" = 1 ]; then
        n=2; iters=3; sizes=65536; npts=16; reps=2
        echo "dry run: $n ranks, $iters iterations, 64 KiB only, a 16^3 FFT"
    else
        # Half the cores for ranks: the other half is spare for progress threads
        # and the proxy, as a DPU's cores would be.
        n=$((cores / 2)); [ "$n" -gt 8 ] && n=8
        iters=10; sizes=4096,65536,1048576,4194304
        if [ "$n" -lt 2 ]; then
            echo "$cores cores: no spare core for progress beside 2 ranks"
            return 3
        fi
    fi
    echo "### rank CPU per collective, $n ranks (offload-cpu.sh)"
    BIN="$BUNDLE/bin" NO_BUILD=1 ROUNDS=$rounds EXTRA="--sizes $sizes" \
        sh "$BUNDLE/offload-cpu.sh" "$iters" "$n"
    echo "### 3-D FFT of ${npts}^3, $n ranks (fft3d.sh)"
    BIN="$BUNDLE/bin" NO_BUILD=1 ROUNDS=$rounds sh "$BUNDLE/fft3d.sh" "$npts" "$n" "$reps"
}

# One scaling row: case, ranks, program args... ; appends "case ranks simulate_s
# rtf spikes" to $WORK/scaling from the run's summary.json.
scale_row() {
    local label=$1 n=$2; shift 2
    local out="$WORK/scale-$label-$n"
    # THREADS=1: one rank of N threads (bound to N cores) instead of N ranks.
    local launch=(-n "$n")
    [ "${THREADS:-0}" = 1 ] && launch=(-n 1 --threads "$n")
    if ! "$BUNDLE/bin/hpc" run "${launch[@]}" --bind core -- "$@" --out "$out" --quiet --no-plot >"$out.log" 2>&1; then
        echo "$label on $n ranks failed:"; tail -5 "$out.log"; return 1
    fi
    python3 - "$label" "$n" "$out/summary.json" >>"$WORK/scaling" <<'PY'
import json, sys
s = json.load(open(sys.argv[3]))
bio = s["params"]["t_sim"] / 1000.0 if "params" in s else s["t_sim_ms"] / 1000.0
if "stdp_synapses" in s:
    # hpc_benchmark: spikes of its recorded excitatory neurons.
    t = s["simulate_s"]
    spikes = s["recorded_spikes"]
elif "simulate_recorded_s" in s:
    # microcircuit: t_sim is the time after the warm-up, timed on its own.
    t = s["simulate_recorded_s"]
    spikes = s["stats"]["spikes_total"]
else:
    t = s["simulate_s"]
    spikes = s["stats"]["spikes"] if "stats" in s else s["spikes"]
print(sys.argv[1], sys.argv[2], f"{t:.4f}", f"{t / bio:.4f}", spikes)
PY
}

scaling_part() {
    local cores ranks=() t_sim order=2500 k
    cores=$(nproc)
    if [ "$DRY" = 1 ]; then t_sim=50; ranks=(1 2); else t_sim=1000; fi
    if [ ${#ranks[@]} -eq 0 ]; then
        for k in 1 2 4 8 16; do [ "$k" -le "$cores" ] && ranks+=("$k"); done
    fi
    : >"$WORK/scaling"
    for k in "${ranks[@]}"; do
        scale_row "brunel-strong" "$k" "$BUNDLE/bin/brunel" --order "$order" --t-sim "$t_sim"
    done
    for k in "${ranks[@]}"; do
        # Weak scaling: 12,500 neurons per rank at the fixed in-degrees of order 2500.
        scale_row "brunel-weak" "$k" "$BUNDLE/bin/brunel" --order "$((order * k))" \
            --ce 1000 --ci 250 --t-sim "$t_sim"
    done
    if [ -x "$BUNDLE/bin/microcircuit" ]; then
        local full=1.0 weak=0.0625 mt=$((t_sim / 2))
        if [ "$DRY" = 1 ]; then full=0.02; weak=0.01; fi
        for k in "${ranks[@]}"; do
            scale_row "microcircuit-strong" "$k" "$BUNDLE/bin/microcircuit" --n-scaling "$full" \
                --k-scaling "$full" --t-presim 100 --t-sim "$mt" --threads 1
        done
        # Strong scaling in threads: one rank, the full-scale model on 1-16 threads
        # (the figure beside NEST's published 0.53 on 256 cores).
        for k in "${ranks[@]}"; do
            THREADS=1 scale_row "microcircuit-threads" "$k" "$BUNDLE/bin/microcircuit" \
                --n-scaling "$full" --k-scaling "$full" --t-presim 100 --t-sim "$mt" --threads "$k"
        done
        for k in "${ranks[@]}"; do
            local s
            s=$(awk -v w="$weak" -v k="$k" 'BEGIN { v = w * k; if (v > 1) v = 1; print v }')
            scale_row "microcircuit-weak" "$k" "$BUNDLE/bin/microcircuit" --n-scaling "$s" \
                --k-scaling 1.0 --t-presim 100 --t-sim "$mt" --threads 1
        done
    else
        echo "no microcircuit binary in the bundle: Brunel only"
    fi
    # NEST's weak-scaling benchmark, as NEST runs it: the scale grows with the ranks
    # (half a unit, 5,625 neurons, 63 million synapses with STDP on E->E, per rank),
    # the in-degree stays 11,250.
    local per=0.5 bt=$((t_sim / 10))
    if [ "$DRY" = 1 ]; then per=0.02; bt=$((t_sim / 2)); fi
    for k in "${ranks[@]}"; do
        scale_row "hpc_benchmark-weak" "$k" "$BUNDLE/bin/hpc_benchmark" \
            --scale "$(awk -v w="$per" -v k="$k" 'BEGIN { print w * k }')" \
            --t-presim 20 --t-sim "$bt" --threads 1
    done
    # Efficiency against the one-rank run of the same case: strong T1 / (P * TP),
    # weak T1 / TP.
    awk '
        { t[$1, $2] = $3; if ($2 == 1) one[$1] = $3 }
        { rows[NR] = $0 }
        END {
            print "P: ranks, or for the -threads cases threads of one rank"
            printf "%-20s %5s %11s %8s %12s %10s\n", "case", "P", "simulate_s", "rtf", "spikes", "efficiency"
            for (i = 1; i <= NR; i++) {
                split(rows[i], f, " ")
                e = "-"
                if (f[1] in one) {
                    if (f[1] ~ /strong|threads/) e = sprintf("%.2f", one[f[1]] / (f[2] * f[3]))
                    else e = sprintf("%.2f", one[f[1]] / f[3])
                }
                printf "%-20s %5s %11s %8s %12s %10s\n", f[1], f[2], f[3], f[4], f[5], e
            }
        }' "$WORK/scaling"
}

run() {
    DRY=0
    BUNDLE=$here
    [ -x "$BUNDLE/bin/hpc" ] || BUNDLE=$root/.device
    while [ $# -gt 0 ]; do
        case $1 in
            --dry) DRY=1 ;;
            --bundle) BUNDLE=$(cd "$2" && pwd); shift ;;
            --report) REPORT=$2; : >"$REPORT"; shift ;;
            *) die "run: unknown argument $1" ;;
        esac
        shift
    done
    [ -x "$BUNDLE/bin/hpc" ] || die "no bundle at $BUNDLE (make one with: benches/device.sh pack)"
    export LD_LIBRARY_PATH="$BUNDLE/lib:$BUNDLE/mpi/usr/lib/x86_64-linux-gnu:$BUNDLE/mpi/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OPAL_PREFIX="$BUNDLE/mpi/usr"
    export PATH="$BUNDLE/bin:$BUNDLE/mpi/usr/bin:$PATH"
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    export BUNDLE DRY WORK
    # Open MPI's reference on one node: its shared-memory transport, as Debian
    # configures it (the bundle has no /etc/openmpi).
    export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
    # One node: no remote shell is ever started, but Open MPI wants to find one.
    export OMPI_MCA_plm_rsh_agent=false
    export PMIX_MCA_mca_base_component_path="$BUNDLE/mpi/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix"
    local budget_gpu=180 budget_overlap=120 budget_scaling=240 budget_offload=60
    if [ "$DRY" = 1 ]; then budget_gpu=60; budget_overlap=120; budget_scaling=120; fi
    say "# device report$([ "$DRY" = 1 ] && echo " (dry run: the figures mean nothing)")"
    machine | tee -a "$REPORT"
    part "GPU allreduce" "$budget_gpu" gpu_part
    part "Overlap with spare cores" "$budget_overlap" overlap_part
    part "Scaling of the examples" "$budget_scaling" scaling_part
    part "Rank CPU per collective and the 3-D FFT" "$budget_offload" offload_part
    say ""
    if [ ${#FAILED[@]} -gt 0 ]; then
        say "FAILED: ${FAILED[*]}"
        exit 1
    fi
    say "all parts that could run passed"
}

# ---------------------------------------------------------------------------
# dry: pack, then run --dry from the bundle on a root file system without our
# packages (the bundle must carry everything but the C library).
# ---------------------------------------------------------------------------

dry() {
    # The features of the dev-profile build: those the device's programs need, or
    # (--features, from `cargo xtask test`) the test step's, whose build made them.
    local features=hpc-cli/mpi,hpc-benches/mpi,hpc-example-fft3d/mpi
    while [ $# -gt 0 ]; do
        case $1 in
            --features) [ $# -ge 2 ] || die "dry: --features needs a list"; features=$2; shift ;;
            *) die "dry: unknown argument $1" ;;
        esac
        shift
    done
    local bundle=$root/.device
    pack --dev "$features" "$bundle"
    if [ "$(id -u)" != 0 ] || ! command -v mmdebstrap >/dev/null 2>&1; then
        echo "== no bare root file system (needs root and mmdebstrap): running the bundle here" >&2
        run --dry --bundle "$bundle"
        return
    fi
    # A relative $CARGO_TARGET_DIR is the caller's: cargo builds from the root.
    local target=${CARGO_TARGET_DIR:-$root/target}
    case $target in /*) ;; *) target=$PWD/$target ;; esac
    export CARGO_TARGET_DIR=$target
    local base="$target/device-rootfs.tar"
    if [ ! -s "$base" ]; then
        echo "== making a bare Debian root file system (once; cached in $base)" >&2
        mmdebstrap --quiet --variant=minbase --include=python3,procps bookworm "${base%.tar}.tmp.tar" \
            && mv "${base%.tar}.tmp.tar" "$base"
    fi
    local rootfs
    rootfs=$(mktemp -d)
    tar -C "$rootfs" -xf "$base"
    mkdir -p "$rootfs/bundle"
    cp -a "$bundle/." "$rootfs/bundle/"
    echo "== running the bundle in a bare root file system (no hwloc, no MPI installed)" >&2
    local rc=0
    unshare --mount --pid --fork sh -c '
        set -e
        r=$1
        mount --bind /dev "$r/dev"; mount -t proc proc "$r/proc"; mount -t sysfs sys "$r/sys"
        mount -t tmpfs tmpfs "$r/tmp"; mount -t tmpfs tmpfs "$r/dev/shm"
        cp /etc/hosts "$r/etc/hosts"
        exec chroot "$r" /bundle/device.sh run --dry --bundle /bundle' sh "$rootfs" || rc=$?
    rm -rf "$rootfs"
    return $rc
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    pack) pack "$@" ;;
    run) run "$@" ;;
    dry) dry "$@" ;;
    __part) "$1" ;;
    *) echo "usage: benches/device.sh pack [--dev FEATURES] [DIR] | run [--dry] [--bundle DIR] [--report FILE] | dry [--features LIST]" >&2; exit 2 ;;
esac
