#!/bin/bash
# Runs {{app}} from the image on this node with Podman or Docker, with InfiniBand
# passthrough and the settings MPI needs. Loads the archive when the image is missing.
# Made by `cargo xtask image` from hpc-image's templates/podman-run.sh.
#   ./podman-run.sh [app arguments]            ENGINE=docker ./podman-run.sh ...
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ENGINE=${ENGINE:-podman}
# Docker by its name or a path to it (`ENGINE=/usr/bin/docker`): each choice below
# is made by the name alone.
engine_name=$(basename "$ENGINE")
IMAGE=${IMAGE:-{{image}}}
# Its words, split at blanks and never expanded as file names (a `*` stays a `*`).
read -r -a ulimits <<< "${HPC_ULIMITS---ulimit memlock=-1:-1}"

# Both archives load in Podman and in Docker 20 or later (the oci-archive carries
# Docker's manifest.json too); Docker is offered its own format first.
archives=("$here/{{app}}-oci.tar" "$here/{{app}}-docker.tar")
if [ "$engine_name" = docker ]; then
    archives=("$here/{{app}}-docker.tar" "$here/{{app}}-oci.tar")
fi
if ! "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1; then
    for a in "${archives[@]}"; do
        if [ -f "$a" ]; then "$ENGINE" load -i "$a"; break; fi
    done
fi

# Host IPC/PID/network: shared memory between ranks and the launcher's PMIx server.
args=(run --rm --ipc host --pid host --network host "${ulimits[@]}")
# InfiniBand: the verbs and RDMA CM devices.
for d in /dev/infiniband/uverbs* /dev/infiniband/rdma_cm; do
    if [ -e "$d" ]; then args+=(--device "$d"); fi
done
for v in $(compgen -e); do
    case "$v" in PMIX_*|SLURM_*|OMPI_*|PMI_*|HPC_*) args+=(-e "$v") ;; esac
done
if [ "$engine_name" = docker ]; then
    args+=({{docker_gpu}})
else
    args+=({{podman_gpu}})
fi
args+=({{podman_binds}})
exec "$ENGINE" "${args[@]}" "$IMAGE" {{app}} "$@"
