#!/usr/bin/env bash
# Runs `hpc doctor --json` inside a Podman, Docker or Apptainer container whose file
# system is a Debian bookworm minbase tree, with the host's `hpc` binary bind-mounted
# in. Apptainer runs the tree as a sandbox directory (unpacked once into the cache).
#
# Usage:
#   containers/test/doctor-in-container.sh [options] BINARY [-- hpc doctor args]
# Options:
#   --engine podman|docker|apptainer
#                            container engine (default: $HPC_CONTAINER_ENGINE or podman)
#   --capture DIR            instead of running the doctor, copy the files it reads
#                            (mountinfo, cgroup, limits, status, env ...) into
#                            DIR/root and DIR/env: a fixture tree
#   --engine-arg ARG         extra argument for `ENGINE run` / `apptainer exec` (repeatable)
#
# The root file system tarball is cached in $HPC_CACHE_DIR (default:
# <repo>/target/hpc-cache); the first run builds it with mmdebstrap (about a minute).
# Podman runs with its own containers.conf/storage.conf under the cache dir
# (runc, cgroupfs, no network namespace, vfs storage), as this kind of machine needs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
engine=${HPC_CONTAINER_ENGINE:-podman}
cache=${HPC_CACHE_DIR:-$repo/target/hpc-cache}
capture=""
engine_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine=$2; shift 2 ;;
        --capture) capture=$2; shift 2 ;;
        --engine-arg) engine_args+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: $0 [options] BINARY [-- args]" >&2; exit 64; }
hpc_bin=$(readlink -f "$1"); shift
[ "${1:-}" = "--" ] && shift
[ -x "$hpc_bin" ] || { echo "not executable: $hpc_bin" >&2; exit 64; }

image=localhost/hpc-doctor-base:bookworm
tarball=$cache/bookworm-minbase.tar
mkdir -p "$cache"

log() { echo "doctor-in-container: $*" >&2; }

# Tests run this script for several engines at once: the cache (tarball, imported
# images, sandbox) is filled under one lock, released before the container runs.
exec 9>"$cache/doctor-base.lock"
flock 9

if [ ! -s "$tarball" ]; then
    command -v mmdebstrap >/dev/null || { log "mmdebstrap missing (apt-get install mmdebstrap)"; exit 69; }
    log "building $tarball with mmdebstrap"
    mmdebstrap --quiet --variant=minbase --format=tar bookworm "$tarball.tmp.$$" >&2
    mv "$tarball.tmp.$$" "$tarball"
fi

case "$engine" in
    podman)
        command -v podman >/dev/null || { log "podman missing (apt-get install podman)"; exit 69; }
        # shellcheck source=containers/test/podman-env.sh
        . "$here/podman-env.sh" "$cache/podman" vfs
        if ! podman image exists "$image"; then
            log "importing $tarball into podman"
            podman import "$tarball" "$image" >&2
        fi
        ;;
    docker)
        command -v docker >/dev/null || { log "docker missing"; exit 69; }
        if ! docker image inspect "$image" >/dev/null 2>&1; then
            log "importing $tarball into docker"
            docker import "$tarball" "$image" >&2
        fi
        ;;
    apptainer)
        command -v apptainer >/dev/null || { log "apptainer missing (HPC_TEST_CONTAINERS=1 cargo xtask setup)"; exit 69; }
        sandbox=$cache/bookworm-minbase-sandbox
        if [ ! -d "$sandbox/usr" ]; then
            log "unpacking $tarball into $sandbox"
            rm -rf "$sandbox.part"
            mkdir -p "$sandbox.part"
            tar -xf "$tarball" -C "$sandbox.part" --exclude='./dev/*'
            mv "$sandbox.part" "$sandbox"
        fi
        ;;
    *) log "unknown engine: $engine"; exit 64 ;;
esac
flock -u 9
exec 9>&-

# The binary is built on the host (Debian bookworm like the image): bind in the
# shared libraries it needs beyond the minbase set (libhwloc, libudev, ...).
lib_binds=()
while read -r lib; do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|ld-linux*|libgcc_s.so*|libpthread.so*|libdl.so*|librt.so*) continue ;;
    esac
    lib_binds+=(-v "$lib:$lib:ro")
done < <(ldd "$hpc_bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')

run=("$engine" run --rm -v "$hpc_bin:/usr/local/bin/hpc:ro" ${lib_binds[@]+"${lib_binds[@]}"}
     ${engine_args[@]+"${engine_args[@]}"})
if [ "$engine" = apptainer ]; then
    # Same binds in Apptainer's spelling; the sandbox directory is the image.
    run=(apptainer exec --bind "$hpc_bin:/usr/local/bin/hpc:ro")
    for ((i = 1; i < ${#lib_binds[@]}; i += 2)); do run+=(--bind "${lib_binds[i]}"); done
    run+=(${engine_args[@]+"${engine_args[@]}"})
    image=$sandbox
fi

if [ -n "$capture" ]; then
    mkdir -p "$capture"
    capture=$(readlink -f "$capture")
    # Copies what the doctor reads into /out/root and the environment into /out/env.
    script='set -u
o=/out/root
for f in /proc/self/mountinfo /proc/self/cgroup /proc/self/status /proc/self/limits \
         /proc/1/cgroup /proc/sys/kernel/yama/ptrace_scope /sys/devices/system/cpu/online \
         /run/.containerenv /.dockerenv /run/systemd/container /run/host/container-manager; do
  [ -e "$f" ] || continue
  mkdir -p "$o$(dirname "$f")"; cat "$f" > "$o$f" 2>/dev/null || true
done
for c in cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us memory/memory.limit_in_bytes cpu.max memory.max; do
  f=/sys/fs/cgroup/$c; [ -e "$f" ] || continue
  mkdir -p "$o$(dirname "$f")"; cat "$f" > "$o$f"
done
env > /out/env'
    if [ "$engine" = apptainer ]; then out=(--bind "$capture:/out"); else out=(-v "$capture:/out"); fi
    "${run[@]}" "${out[@]}" "$image" sh -c "$script"
    log "captured into $capture"
    exit 0
fi

exec "${run[@]}" "$image" /usr/local/bin/hpc doctor "$@"
