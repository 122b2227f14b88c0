#!/usr/bin/env bash
# "Container performance equals native", measured: hpc perftest (shm and tcp latency
# and bandwidth between two ranks) and the Brunel example's simulate time, natively
# and in Podman, Docker and Apptainer, in one run, with every ratio to native.
#
#   benches/containers/run.sh [ROUNDS]          (default 3 rounds)
#
# The same two binaries (`hpc`, `brunel`, release) run everywhere: they are built
# once, packed into one image by `cargo xtask image brunel --features mpi --with-hpc
# --format oci,docker,sif` (the hybrid image: Open MPI inside, as deployed; the runs
# here start through `hpc run`), and the native runs use the copies taken right after
# that build.
# In every runtime both ranks run in one container under `hpc run -n 2 --bind core`
# (each rank pinned to its own core), so what differs is only the container: its
# namespaces, cgroup, seccomp filter and /dev/shm. Each runtime runs as it does out of
# the box here: Podman with the test containers.conf (runc, cgroupfs, its own network
# namespace with only loopback), Docker with its defaults (bridge network namespace,
# default seccomp profile, 64 MiB /dev/shm), Apptainer with its defaults (the host's
# network, IPC and /dev/shm; no seccomp filter, no cgroup).
#
# The machine may be busy (builds of others): the runtimes alternate within each
# round, their order rotating from round to round, and each figure is the median over
# the rounds. Load averages before and after every round are printed with the table.
#
# Env: HPC_BENCH_RUNTIMES (default "native podman docker apptainer"; also
#      podman-noseccomp, docker-noseccomp, docker-hostnet: one isolation taken away,
#      to find what a missed target costs),
#      HPC_BENCH_ONLY (default "shm_lat shm_bw tcp_lat tcp_bw brunel": the metrics),
#      HPC_BENCH_WORK (default target/bench-containers), CARGO_TARGET_DIR.
# Needs root, podman, docker, apptainer (HPC_TEST_CONTAINERS=1 cargo xtask setup).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
rounds=${1:-3}
runtimes=${HPC_BENCH_RUNTIMES:-native podman docker apptainer}
work=${HPC_BENCH_WORK:-$repo/target/bench-containers}
mkdir -p "$work"
work=$(cd "$work" && pwd)
log() { echo "bench-containers: $*" >&2; }
die() { log "error: $*"; exit 1; }
for r in $runtimes; do
    case $r in
        native) ;;
        podman|docker|apptainer|podman-*|docker-*) command -v "${r%%-*}" >/dev/null || die "${r%%-*} is not installed" ;;
        *) die "unknown runtime $r" ;;
    esac
done

# 1. One image with both binaries; native copies of the very same files.
img=$work/img
formats=oci
case " $runtimes " in *" docker"*) formats+=,docker ;; esac
case " $runtimes " in *" apptainer "*) formats+=,sif ;; esac
log "building the image (cargo xtask image brunel --features mpi --with-hpc --format $formats)"
cargo run -q -p xtask -- image brunel --features mpi --with-hpc --format "$formats" --out "$img" >"$work/image.log" 2>&1 \
    || { tail -n 30 "$work/image.log" >&2; die "image build failed"; }
bin_dir=$(python3 -c 'import json,sys,os; print(os.path.dirname(json.load(open(sys.argv[1]))["binary_path"]))' "$img/image.json")
mkdir -p "$work/native"
cp "$bin_dir/brunel" "$bin_dir/hpc" "$work/native/"
ref=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ref"])' "$img/image.json")
case " $runtimes " in *" podman"*)
    # shellcheck source=containers/test/podman-env.sh
    . "$repo/containers/test/podman-env.sh" "$work/podman" overlay
    podman info >/dev/null 2>&1 || . "$repo/containers/test/podman-env.sh" "$work/podman" vfs
    podman load -i "$img/brunel-oci.tar" >/dev/null ;;
esac
case " $runtimes " in *" docker"*) docker load -i "$img/brunel-docker.tar" >/dev/null ;; esac

# 2. What every runtime runs: four perftests and one Brunel simulation (1 s of
# biological time, 12,500 neurons, 2 ranks), printed with markers for the parser.
only=${HPC_BENCH_ONLY:-shm_lat shm_bw tcp_lat tcp_bw brunel}
read -r -d '' job <<JOB || true
set -e
H=\${HPC:-hpc}
B=\${BRUNEL:-brunel}
run() { "\$H" run -n 2 --bind core -- "\$@"; }
for m in $only; do
    echo "@@ \$m"
    case \$m in
        shm_lat) run "\$H" perftest send_lat --backend shm -s 8 -n 20000 ;;
        shm_bw)  run "\$H" perftest write_bw --backend shm -s 1048576 -n 2000 ;;
        tcp_lat) run "\$H" perftest send_lat --backend tcp -s 8 -n 5000 ;;
        tcp_bw)  run "\$H" perftest write_bw --backend tcp -s 1048576 -n 500 ;;
        brunel)  run "\$B" --out /tmp/hpc-bench-brunel --no-spikes --no-plot ;;
        *) echo "unknown metric \$m" >&2; exit 64 ;;
    esac
done
JOB

run_in() { # runtime
    case $1 in
        native) HPC=$work/native/hpc BRUNEL=$work/native/brunel bash -c "$job" ;;
        podman) podman run --rm "$ref" sh -c "$job" ;;
        docker) docker run --rm "$ref" sh -c "$job" ;;
        # Variants that each take one isolation away, to find the cause of a miss.
        podman-noseccomp) podman run --rm --security-opt seccomp=unconfined "$ref" sh -c "$job" ;;
        docker-noseccomp) docker run --rm --security-opt seccomp=unconfined "$ref" sh -c "$job" ;;
        docker-hostnet) docker run --rm --network host --ipc host "$ref" sh -c "$job" ;;
        apptainer) apptainer exec "$img/brunel.sif" sh -c "$job" ;;
    esac
}

conditions=$work/conditions.txt
{
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
    echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
    for r in $runtimes; do
        case $r in
            podman) echo "podman: $(podman --version) (runc, cgroupfs, network namespace with loopback only)" ;;
            docker) echo "docker: $(docker --version) (defaults: bridge network, default seccomp, 64 MiB /dev/shm)" ;;
            podman-noseccomp) echo "podman-noseccomp: as podman, --security-opt seccomp=unconfined" ;;
            docker-noseccomp) echo "docker-noseccomp: as docker, --security-opt seccomp=unconfined" ;;
            docker-hostnet) echo "docker-hostnet: as docker, --network host --ipc host" ;;
            apptainer) echo "apptainer: $(apptainer --version) (defaults)" ;;
        esac
    done
    echo "revision: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates examples || echo ' (modified)')"
} > "$conditions"

: > "$work/samples.txt"
set -- $runtimes
n=$#
for ((round = 1; round <= rounds; round++)); do
    # Rotate the order so that no runtime always runs first or last.
    order=()
    for ((i = 0; i < n; i++)); do
        idx=$(( (i + round - 1) % n + 1 ))
        order+=("${!idx}")
    done
    echo "round $round: order ${order[*]}, load before $(cut -d' ' -f1-3 /proc/loadavg)" >> "$conditions"
    for r in "${order[@]}"; do
        log "round $round/$rounds: $r"
        out=$work/round$round-$r.out
        run_in "$r" > "$out" 2>&1 || { tail -n 30 "$out" >&2; die "$r failed in round $round"; }
        python3 "$repo/benches/containers/report.py" parse "$r" "$round" "$out" "$only" >> "$work/samples.txt"
    done
    echo "round $round: load after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$conditions"
done

cmd="benches/containers/run.sh $rounds"
[ -z "${HPC_BENCH_RUNTIMES:-}" ] || cmd="HPC_BENCH_RUNTIMES=\"$runtimes\" $cmd"
[ -z "${HPC_BENCH_ONLY:-}" ] || cmd="HPC_BENCH_ONLY=\"$only\" $cmd"
python3 "$repo/benches/containers/report.py" table "$work/samples.txt" "$conditions" "$cmd" | tee "$work/table.md"
