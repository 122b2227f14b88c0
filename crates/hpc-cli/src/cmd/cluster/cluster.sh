#!/usr/bin/env bash
# The orchestration of `hpc cluster` (crates/hpc-cli/src/cmd/cluster.rs, which embeds
# this file and runs it with bash): a small Slurm + PMIx cluster of Docker containers
# on one machine: one controller (ctl: slurmctld, munge) and N compute nodes (node1..:
# slurmd, munge, Open MPI, PMIx), each a host with its own address on a private
# (internal) Docker network, with the binaries of --bin mounted at /opt/hpc/bin and a
# shared folder at /shared.
#
# `hpc cluster` checks the arguments and the environment, resolves the work and cache
# folders, writes slurm.conf and node-init.sh into the work folder, then runs:
#   up --nodes N --bin DIR [--apptainer DIR] [--dpus]   start (rebuilds nothing that exists)
#   image                                               build the node image only
#   down                                                remove everything it made
#   status                                              containers and sinfo
#   exec --timeout S CMD...                             CMD on the controller (e.g. srun ...),
#                                                       for at most S seconds
#   stop-node|kill-node|cut-node|heal-node NAME
# with HPC_CLUSTER_NAME (container and network name prefix), HPC_CLUSTER_DIR (work
# folder, absolute) and HPC_CACHE_DIR (node file system cache, absolute) set.
#
# --apptainer DIR: Apptainer on every node, as on an HPC cluster: DIR holds
# bin/apptainer (or the wrapper) and rootfs/, mounted read-only at /opt/apptainer with
# /opt/apptainer/bin on the PATH. Apptainer mounts
# its images and enters namespaces as root, so the nodes then get every capability
# the engine can grant and the loop devices, as the hosts they stand for would give
# it (`mount` is in the node image for the wrapper).
# --dpus: beside each compute node nodeI a `dpu` container nodeI-dpu, the DPU's own Linux:
# on the network only (no /shared, no /cluster, its own /dev/shm), with the binaries
# read-only, running the standing DPU service `hpc proxy --dpu-service 0.0.0.0:7471
# --key-file /etc/hpc/dpu.key`, which starts each node's collectives proxy in `dpu`
# placement when the node's first rank asks and proves the key. The key (32 random
# bytes, made once per work dir: $work/dpu.key, mode 0400) is mounted read-only as
# that one file into each dpu container, and the compute nodes read it from
# /cluster/dpu.key: they get HPC_COLL_PROXY_DPU_HOST={host}-dpu and
# HPC_COLL_PROXY_DPU_KEY_FILE=/cluster/dpu.key, so a job needs only
# HPC_COLL_PROXY_PLACEMENT=dpu (and the Proxy engine). `kill-node nodeI-dpu` kills one.
# libfabric1 is there for binaries built with the `ofi` feature (HPC_TRANSPORT=ofi
# across the nodes; libfabric is loaded at run time, its tcp provider needs nothing
# more). libpmix-dev is there for its unversioned libpmix.so, which Slurm's mpi/pmix plugin
# dlopens; without it `srun --mpi=pmix` fails with "can not load PMIx library".
# No registry is needed: the node image is made with mmdebstrap and `docker import`.
# A second `up` after a crash first removes what the crashed one left.
set -euo pipefail

work=${HPC_CLUSTER_DIR:?set by hpc cluster}
cache=${HPC_CACHE_DIR:?set by hpc cluster}
prefix=${HPC_CLUSTER_NAME:?set by hpc cluster}
net=$prefix-net
packages="slurm-wlm,munge,mount,openmpi-bin,libopenmpi3,libpmix2,libpmix-dev,libhwloc15,libudev1,libibverbs1,libfabric1,iproute2,procps,iputils-ping,ca-certificates"
tag=$(printf '%s' "$packages" | sha256sum | cut -c1-12)
image=hpc-cluster-node:$tag

log() { printf 'hpc cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Every docker call is bounded: hpc cluster asked the daemon for its version
# (bounded) before this script, but a daemon that answered that and hangs on the
# rest held `status`, `down` and `up` in a `docker ps` without end. A call that
# does not end within its limit (docker_limit seconds, 30; `import` of the node
# file system 600) is stopped and named, with the status 124. The command a user
# gives to `exec` has its own bound (--timeout) and is run by `command docker`.
# The message goes to the script's own standard error (fd 8), not to the one
# a call was given: `docker image inspect … 2>/dev/null` ended the script with
# 124 and nothing said.
docker_limit=${docker_limit:-30}
case $docker_limit in '' | *[!0-9]* | 0) docker_limit=30 ;; esac
exec 8>&2
docker() {
    local limit=$docker_limit rc=0
    [ "${1:-}" = import ] && limit=$((docker_limit * 20))
    timeout -k 10 "$limit" docker "$@" 8>&- || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        log "error: docker $1 did not end within ${limit}s and was stopped: the Docker daemon does not answer; check it (systemctl status docker)" 2>&8
        exit 124
    fi
    return "$rc"
}

# This cluster's containers, matched by whole name: another cluster's name may begin
# with this one's (hpc-cluster and hpc-cluster-dpu run side by side in the tests), and
# `down` must not take that one's containers along.
names_re="^$(printf '%s' "$prefix" | sed 's/[.]/\\./g')-(ctl|node[0-9]+(-dpu)?)\$"
containers() { docker ps -a --filter "label=org.hpc-rs.cluster=1" --filter "name=$names_re" --format '{{.Names}}'; }

build_image() {
    if docker image inspect "$image" >/dev/null 2>&1; then return; fi
    command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: apt-get install mmdebstrap"
    mkdir -p "$cache"
    # Two clusters coming up at once (HPC_CLUSTER_NAME) make the image once.
    # The lock is a regular file of the cache's, opened without truncating:
    # a link there had its target emptied, a FIFO held the open without end.
    local lock=$cache/.build.lock
    if [ -L "$lock" ] || { [ -e "$lock" ] && [ ! -f "$lock" ]; }; then
        die "$lock is not a regular file (a link, a FIFO, a device?): remove it"
    fi
    exec 9>>"$lock"
    flock 9
    if docker image inspect "$image" >/dev/null 2>&1; then exec 9>&-; return; fi
    local tar=$cache/node-$tag.tar
    if [ ! -s "$tar" ]; then
        log "building the node file system with mmdebstrap (a few minutes, once)"
        local t0=$SECONDS
        # A failed build leaves no part of the file system behind.
        mmdebstrap --quiet --variant=minbase --format=tar --include="$packages" bookworm "$tar.part.tar" >&2 \
            || { rm -f "$tar.part.tar"; die "mmdebstrap failed (is the Debian mirror reachable?)"; }
        mv "$tar.part.tar" "$tar"
        log "node file system built in $((SECONDS - t0))s"
    fi
    log "importing $image"
    docker import --change 'CMD ["/bin/sh"]' "$tar" "$image" >/dev/null
    exec 9>&-
}

down() {
    local names
    names=$(containers)
    if [ -n "$names" ]; then
        # shellcheck disable=SC2086
        docker rm -f $names >/dev/null
    fi
    docker network rm "$net" >/dev/null 2>&1 || true
    log "down"
}

wait_idle() {
    local nodes=$1 deadline=$((SECONDS + 90)) idle
    while :; do
        idle=$(docker exec "$prefix-ctl" sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle' || true)
        [ "$idle" -ge "$nodes" ] && return 0
        [ $SECONDS -lt $deadline ] || { docker exec "$prefix-ctl" sinfo -N 2>&1 | sed 's/^/  /' >&2; die "nodes not idle after 90s (see $work/shared/log)"; }
        sleep 0.5
    done
}

# A key of the work folder ($1, $2 random bytes), made once, mode 0400: a
# regular file only, made new (never written through a link or into a FIFO
# planted at its name: ">" wrote the key wherever a link there pointed).
new_key() {
    local f=$1
    if [ -L "$f" ] || { [ -e "$f" ] && [ ! -f "$f" ]; }; then
        die "$f is not a regular file (a link, a FIFO, a device?): remove it"
    fi
    if [ ! -s "$f" ]; then
        rm -f "$f"
        (umask 077 && set -C && head -c "$2" /dev/urandom > "$f")
    fi
    chmod 0400 "$f"
}

up() {
    local nodes=2 bin="" apptainer="" dpus=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) nodes=$2; shift 2 ;;
            --dpus) dpus=1; shift ;;
            --bin) bin=$2; shift 2 ;;
            --apptainer) apptainer=$2; shift 2 ;;
            *) die "unknown option $1" ;;
        esac
    done
    # hpc cluster checked the arguments (and wrote slurm.conf for this many nodes).
    [ -n "$bin" ] && [ -f "$work/slurm.conf" ] || die "run by hpc cluster only"
    local t0=$SECONDS
    build_image
    # A previous cluster of this name, or what a crashed one left (its network alone
    # makes `docker network create` fail).
    if [ -n "$(containers)" ] || docker network inspect "$net" >/dev/null 2>&1; then
        log "removing a previous cluster"
        down
    fi
    mkdir -p "$work/shared/log"
    chmod 0777 "$work/shared"
    new_key "$work/munge.key" 1024
    if [ -n "$dpus" ]; then new_key "$work/dpu.key" 32; fi
    docker network create --internal --label org.hpc-rs.cluster=1 "$net" >/dev/null
    local common=(--detach --label org.hpc-rs.cluster=1 --network "$net"
        --shm-size 512m --cap-add SYS_PTRACE --init
        -v "$work:/cluster:ro" -v "$work/shared:/shared" -v "$(readlink -f "$bin"):/opt/hpc/bin:ro"
        -e PATH=/opt/hpc/bin${apptainer:+:/opt/apptainer/bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        -e SLURM_CONF=/cluster/slurm.conf
        -e OMPI_ALLOW_RUN_AS_ROOT=1 -e OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
    if [ -n "$apptainer" ]; then
        # What Apptainer needs as root on a host: every capability (mounts, namespaces,
        # the overlay's DAC overrides), no seccomp/AppArmor filter, the loop devices
        # for SIF images (and the right to make more). Not --privileged: an engine
        # that itself runs without CAP_SYS_RESOURCE (as here) cannot grant it.
        common+=(--cap-add ALL --cap-drop SYS_RESOURCE
            --security-opt seccomp=unconfined --security-opt apparmor=unconfined
            --device-cgroup-rule 'b 7:* rmw' --device /dev/loop-control
            -v "$(readlink -f "$apptainer"):/opt/apptainer:ro")
        for d in /dev/loop[0-9]*; do
            if [ -b "$d" ]; then common+=(--device "$d"); fi
        done
    fi
    # With DPUs, every host names its DPU and the key its service asks for; srun
    # hands the controller's environment to the ranks, so it has the settings too.
    local node_env=()
    if [ -n "$dpus" ]; then
        node_env=(-e 'HPC_COLL_PROXY_DPU_HOST={host}-dpu' -e HPC_COLL_PROXY_DPU_KEY_FILE=/cluster/dpu.key)
    fi
    docker run "${common[@]}" "${node_env[@]}" --name "$prefix-ctl" --hostname ctl --network-alias ctl "$image" /cluster/node-init.sh ctl >/dev/null
    for i in $(seq 1 "$nodes"); do
        docker run "${common[@]}" "${node_env[@]}" --name "$prefix-node$i" --hostname "node$i" --network-alias "node$i" \
            "$image" /cluster/node-init.sh compute >/dev/null
    done
    if [ -n "$dpus" ]; then
        # The DPU's own Linux: the network, the binaries and the service's key,
        # nothing of its node's (no /shared, /cluster, munge or Slurm; a /dev/shm
        # of its own).
        for i in $(seq 1 "$nodes"); do
            docker run --detach --label org.hpc-rs.cluster=1 --network "$net" --init \
                --name "$prefix-node$i-dpu" --hostname "node$i-dpu" --network-alias "node$i-dpu" \
                -v "$(readlink -f "$bin"):/opt/hpc/bin:ro" -e PATH=/opt/hpc/bin:/usr/sbin:/usr/bin:/sbin:/bin \
                -v "$work/dpu.key:/etc/hpc/dpu.key:ro" -e HPC_LOG=info \
                "$image" /opt/hpc/bin/hpc proxy --dpu-service 0.0.0.0:7471 \
                --key-file /etc/hpc/dpu.key >/dev/null
        done
        local deadline=$((SECONDS + 60))
        for i in $(seq 1 "$nodes"); do
            until docker exec "$prefix-node$i-dpu" ss -ltn 2>/dev/null | grep -q ':7471 '; do
                [ $SECONDS -lt $deadline ] || { docker logs "$prefix-node$i-dpu" 2>&1 | tail -5 >&2; die "node$i-dpu: no DPU service after 60s"; }
                sleep 0.2
            done
        done
    fi
    wait_idle "$nodes"
    log "up: ctl + $nodes compute nodes${dpus:+, each with its dpu}${apptainer:+ with Apptainer} in $((SECONDS - t0))s"
}

# What a user would look at when a job does not end: the queue, the nodes, the
# processes on each node, and the end of the daemons' logs.
diagnose() {
    docker ps -a --filter "label=org.hpc-rs.cluster=1" --filter "name=$names_re" --format '{{.Names}} {{.Status}}'
    docker exec "$prefix-ctl" squeue -o '%.8i %.10j %.8T %.10M %.6D %R' 2>&1 || true
    docker exec "$prefix-ctl" sinfo -N -o '%N %T %E' 2>&1 || true
    local c
    for c in $(containers); do
        echo "--- $c: processes"
        docker exec "$c" ps -eo pid,ppid,stat,etime,wchan:24,args --sort=pid 2>&1 | grep -v ' ps -eo ' | tail -n 25 || true
    done
    local f
    for f in "$work"/shared/log/*.log; do
        [ -f "$f" ] || continue
        echo "--- $f (last 15 lines)"
        tail -n 15 "$f"
    done
}

# exec [--timeout S] CMD...: CMD on the controller; when it has not ended after S
# seconds, the cluster's state goes to standard error while the job is still there
# to be seen, then CMD gets SIGTERM (srun then cancels its step) and the status is
# 124, so that a job waiting for a node or a rank that never comes fails with what
# it waited for instead of hanging its caller.
exec_on_ctl() {
    local limit=600 rc=0
    if [ "${1:-}" = --timeout ]; then limit=$2; shift 2; fi
    # Without a cluster, docker's "No such container" and its status 1 read as the
    # command's own failure: said, with a status no command of the cluster gives.
    # A daemon that does not answer is said so (by the bounded call), not taken
    # for a cluster that is not up.
    local running="" inspected=0
    running=$(docker inspect -f '{{.State.Running}}' "$prefix-ctl" 2>/dev/null) || inspected=$?
    if [ "$inspected" -eq 124 ]; then
        return 124
    fi
    if [ "$running" != true ]; then
        log "error: cluster $prefix is not up (its controller $prefix-ctl is not running): start it with hpc cluster up"
        return 125
    fi
    # The command's pid inside the container, in a file named for this call, so
    # that the right one is ended when several run at once.
    local token=hpc-exec.$$.$RANDOM
    command docker exec -e SLURM_CONF=/cluster/slurm.conf -w /shared "$prefix-ctl" \
        sh -c 'echo $$ > "/run/$0"; exec "$@"' "$token" timeout -k 10 $((limit + 60)) "$@" &
    local pid=$! ticks=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$ticks" -ge $((limit * 10)) ]; then
            log "error: '$*' did not end within ${limit}s; the cluster as it stands:"
            diagnose >&2
            docker exec "$prefix-ctl" sh -c 'kill -TERM "$(cat "/run/$0")"' "$token" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            return 124
        fi
        sleep 0.1
        ticks=$((ticks + 1))
    done
    wait "$pid" || rc=$?
    return "$rc"
}

status() {
    docker ps -a --filter "label=org.hpc-rs.cluster=1" --filter "name=$names_re" --format 'table {{.Names}}\t{{.Status}}'
    docker exec "$prefix-ctl" sinfo -N 2>/dev/null || true
}

cmd=${1:-}
[ -n "$cmd" ] && shift
case "$cmd" in
    up) up "$@" ;;
    image) build_image ;;
    down) down ;;
    status) status ;;
    exec) exec_on_ctl "$@" ;;
    stop-node) docker stop -t 0 "$prefix-$1" >/dev/null ;;
    kill-node) docker kill "$prefix-$1" >/dev/null ;;
    cut-node) docker network disconnect "$net" "$prefix-$1" ;;
    heal-node) docker network connect --alias "$1" "$net" "$prefix-$1" ;;
    *) die "unknown command '$cmd' (run by hpc cluster only)" ;;
esac
