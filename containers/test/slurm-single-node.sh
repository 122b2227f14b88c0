#!/usr/bin/env bash
# A throw-away single-node Slurm cluster (slurmctld + slurmd + munged) in a work
# directory, for tests: srun --mpi=pmix works against it. Nothing is installed as a
# service; the daemons are started here and stopped by their pids.
#
# Usage:
#   containers/test/slurm-single-node.sh start  WORKDIR [CPUS]
#   containers/test/slurm-single-node.sh status WORKDIR
#   containers/test/slurm-single-node.sh stop   WORKDIR
#   containers/test/slurm-single-node.sh env    WORKDIR   # prints `export SLURM_CONF=...`
#
# After `start`, use it with:  export SLURM_CONF=WORKDIR/slurm.conf; srun -n 2 ...
# Ports: HPC_SLURMCTLD_PORT / HPC_SLURMD_PORT (default 6817 / 6818); pick others when
# several such clusters share a machine.
# Needs root and the Debian packages slurm-wlm (slurmctld, slurmd, slurm-client) and
# munge. The munge key in /etc/munge is made when missing. A munged that is already
# running (started by someone else) is used as it is and never stopped by this script.
# Multi-node variants: one slurmd per container or host, each with `-N <NodeName>`,
# the same slurm.conf listing every NodeName, and a shared munge key.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,21p' "$0" >&2; exit 64; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
conf=$dir/slurm.conf
export SLURM_CONF=$conf

log() { echo "slurm-single-node: $*" >&2; }

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    local cpus=${1:-$(nproc)}
    for p in slurmctld slurmd munged sinfo srun; do
        command -v "$p" >/dev/null || { log "$p missing: apt-get install slurm-wlm munge"; exit 69; }
    done
    mkdir -p "$dir/state" "$dir/spool"
    cat > "$conf" <<CONF
ClusterName=ci
SlurmctldHost=localhost
SlurmctldPort=${HPC_SLURMCTLD_PORT:-6817}
SlurmdPort=${HPC_SLURMD_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=localhost CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
    # munge: key and socket directory, then the daemon unless one is running.
    install -d -o munge -g munge -m 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey -c -f
        chown munge:munge /etc/munge/munge.key
    fi
    if ! munge -n </dev/null >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
        # Its pid file, not pgrep: munged processes of containers are visible too.
        cat /run/munge/munged.pid > "$dir/munged.pid"
    fi
    # Slurm's daemons share a port with another cluster's without an error (the
    # kernel then splits the connections between them): refuse a port in use.
    local port name
    for name in slurmctld:${HPC_SLURMCTLD_PORT:-6817} slurmd:${HPC_SLURMD_PORT:-6818}; do
        port=${name#*:}
        pid_alive "$dir/${name%%:*}.pid" && continue
        if ! python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection may linger
s.bind(("", int(sys.argv[1])))' "$port" 2>/dev/null; then
            log "port $port for ${name%%:*} is in use (another Slurm?): choose others with HPC_SLURMCTLD_PORT / HPC_SLURMD_PORT"
            exit 1
        fi
    done
    pid_alive "$dir/slurmctld.pid" || slurmctld
    pid_alive "$dir/slurmd.pid" || slurmd -N localhost
    for _ in $(seq 1 100); do
        state=$(sinfo -h -o %T 2>/dev/null || true)
        case "$state" in
            idle*|mixed*|allocated*)
                log "up ($state), SLURM_CONF=$conf"; return 0 ;;
        esac
        sleep 0.2
    done
    log "slurm did not come up; logs:"
    tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    exit 1
}

stop() {
    for d in slurmd slurmctld munged; do
        local pf=$dir/$d.pid
        if pid_alive "$pf"; then
            local pid
            pid=$(cat "$pf")
            kill "$pid"
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        fi
        rm -f "$pf"
    done
    log "stopped"
}

status() {
    local rc=0
    for d in munged slurmctld slurmd; do
        if pid_alive "$dir/$d.pid"; then
            echo "$d: running (pid $(cat "$dir/$d.pid"))"
        elif [ "$d" = munged ] && munge -n </dev/null >/dev/null 2>&1; then
            echo "munged: running (not started by this script)"
        else
            echo "$d: stopped"
            rc=3
        fi
    done
    [ -f "$conf" ] && echo "node: $(sinfo -h -o '%N %T %c' 2>/dev/null || echo unreachable)"
    return $rc
}

case "$cmd" in
    start) start "${3:-}" ;;
    stop) stop ;;
    status) status ;;
    env) echo "export SLURM_CONF=$conf" ;;
    *) log "unknown command $cmd (start|stop|status|env)"; exit 64 ;;
esac
