#!/usr/bin/env bash
# The troubleshooting table of the Apptainer + Open MPI + PMIx workflow, reproduced:
# each row is a real broken run of the images `image-e2e.sh` built, under the
# single-node Slurm it started, and each is diagnosed by `hpc doctor` inside the same
# broken container (or, where the program cannot start at all, by the rank's own
# error). For every row the script keeps, under WORKDIR/rows/:
#   NAME.log          what the ranks print, both streams (the symptom a user sees;
#                     UCX, for one, logs to standard output)
#   NAME.rc           srun's exit status
#   NAME.doctor.json  `hpc doctor --json` of rank 0 in the same container, same flags
#                     (NAME.doctor.<task>.out: each rank's own output)
# and checks the symptom and the diagnosis; the Rust test that runs image-e2e.sh
# checks the files again, row by row.
#
# Usage: containers/test/troubleshoot.sh WORKDIR HYBRID_IMAGE_DIR BIND_IMAGE_DIR
# Needs SLURM_CONF pointing at a running cluster (image-e2e.sh exports it) and
# apptainer on the PATH.
set -euo pipefail

work=$1 img=$2 bind=$3
app=${HPC_E2E_APP:-hpc}
rows=$work/rows
mkdir -p "$rows"
sif=$img/$app.sif
bsif=$bind/$app.sif
log() { echo "troubleshoot: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
[ -n "${SLURM_CONF:-}" ] || fail "SLURM_CONF is not set (run from image-e2e.sh)"
[ -s "$sif" ] && [ -s "$bsif" ] || fail "no SIFs in $img and $bind"

# bounded SECONDS CMD...: CMD, ended after SECONDS (status 124) when it has not
# ended by itself; before it is ended, the processes of the job that are still there
# (srun, slurmstepd, apptainer, the ranks) go to standard error with where each waits,
# so that a hang shows what hung.
bounded() {
    local limit=$1; shift
    "$@" &
    local pid=$! ticks=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$ticks" -ge $((limit * 10)) ]; then
            log "still running after ${limit}s: $*"
            ps -eo pid,ppid,stat,etime,wchan:32,args | grep -E 'srun|slurmstepd|apptainer|starter|hpc ' | grep -v grep >&2 || true
            kill -TERM "$pid" 2>/dev/null || true
            sleep 5
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            return 124
        fi
        sleep 0.1
        ticks=$((ticks + 1))
    done
    wait "$pid"
}

# run NAME SRUN_MPI [env and apptainer flags...] -- : runs the selftest on 2 ranks and
# the doctor on 2 ranks in the same way, bounded in time.
run_row() {
    local name=$1 mpi=$2 image=$3; shift 3
    local envs=() flags=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        case "$1" in *=*) envs+=("$1") ;; *) flags+=("$1") ;; esac
        shift
    done
    local rc=0
    bounded 120 env ${envs[@]+"${envs[@]}"} srun --mpi="$mpi" -n 2 \
        apptainer exec ${flags[@]+"${flags[@]}"} "$image" hpc selftest --json --expect-size 2 --transport \
        > "$rows/$name.log" 2>&1 || rc=$?
    echo "$rc" > "$rows/$name.rc"
    if [ "$rc" = 124 ]; then
        log "$name: what the ranks printed:"
        tail -n 40 "$rows/$name.log" >&2
        fail "$name: the broken run hung for 120 s instead of failing"
    fi
    # One output file per task: the two ranks' reports would interleave on one stream.
    env ${envs[@]+"${envs[@]}"} timeout 120 srun --mpi="$mpi" -n 2 --output="$rows/$name.doctor.%t.out" --error="$rows/$name.doctor.%t.err" \
        apptainer exec ${flags[@]+"${flags[@]}"} "$image" hpc doctor --json 2>/dev/null || true
    python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=1)' \
        "$rows/$name.doctor.0.out" "$rows/$name.doctor.json" || true
}
# has_finding NAME ID SEVERITY
has_finding() {
    python3 - "$rows/$1.doctor.json" "$2" "$3" <<'PY' || fail "$1: the doctor does not report $2 ($3)"
import json, sys
d = json.load(open(sys.argv[1]))
hits = [f for f in d["findings"] if f["id"] == sys.argv[2] and f["severity"] == sys.argv[3]]
assert hits, [(f["id"], f["severity"]) for f in d["findings"]]
PY
}
symptom() { # NAME TEXT
    grep -qF -- "$2" "$rows/$1.log" || { tail -n 20 "$rows/$1.log" >&2; fail "$1: the ranks do not say: $2"; }
}
failed() { # NAME
    [ "$(cat "$rows/$1.rc")" != 0 ] || fail "$1: the broken run succeeded"
}

# 1. "MPI job hangs in initialisation: PMIx server connection failed -> check
# srun --mpi=pmix". srun without a PMIx server for the ranks.
run_row no-pmix none "$sif" --
failed no-pmix
symptom no-pmix "OMPI was not built with SLURM's PMI support"
has_finding no-pmix launch.slurm-no-pmix error
log "row no-pmix: srun --mpi=none -> launch.slurm-no-pmix"

# 2. The same failure from the container side: --contain gives the container its own
# /tmp, and the PMIx server's data store in the slurmd spool disappears from view.
run_row contain-pmix pmix "$sif" --contain --
symptom contain-pmix "PMIX ERROR"
has_finding contain-pmix launch.pmix-dir-hidden error
log "row contain-pmix: apptainer exec --contain -> launch.pmix-dir-hidden"

# 3. Bind model without the host's MPI bound in (the host/container MPI contract
# broken): the binary cannot even load, the loader names the library.
run_row bind-no-host-mpi pmix "$bsif" --
failed bind-no-host-mpi
symptom bind-no-host-mpi "libmpi.so.40: cannot open shared object file"
apptainer run-help "$bsif" | grep -q "APPTAINER_BIND=" || fail "bind-no-host-mpi: the SIF's help does not give the binds"
log "row bind-no-host-mpi: no binds -> the loader names libmpi.so.40; run-help gives APPTAINER_BIND"

# 4. A tiny /dev/shm (1 MiB bound over it): Open MPI's shared-memory transport cannot
# make its segment.
tiny=$work/tiny-shm
mkdir -p "$tiny"
mount -t tmpfs -o size=1m hpc-tiny-shm "$tiny"
trap 'umount "$tiny" 2>/dev/null || true' EXIT
run_row tiny-shm pmix "$sif" --bind "$tiny:/dev/shm" --
umount "$tiny"
trap - EXIT
symptom tiny-shm "not enough space for /dev/shm"
has_finding tiny-shm shm.too-small error
log "row tiny-shm: 1 MiB /dev/shm -> shm.too-small"

# 5. UCX_TLS naming a transport that is absent (an InfiniBand setting on a node
# without InfiniBand), with Open MPI's UCX layer selected, as large-job tuning
# guides advise (OMPI_MCA_pml=ucx).
run_row ucx-tls-absent pmix "$sif" OMPI_MCA_pml=ucx UCX_TLS=rc --
failed ucx-tls-absent
symptom ucx-tls-absent "transport 'rc' is not available"
has_finding ucx-tls-absent net.rdma-requested-absent error
log "row ucx-tls-absent: UCX_TLS=rc without RDMA -> net.rdma-requested-absent"

# 6. An image told to use InfiniBand where the container sees no /dev/infiniband.
run_row ib-missing pmix "$sif" HPC_TRANSPORT=verbs --
failed ib-missing
symptom ib-missing "no RDMA device"
has_finding ib-missing net.rdma-requested-absent error
log "row ib-missing: HPC_TRANSPORT=verbs without /dev/infiniband -> net.rdma-requested-absent"

# 7. "Performance drops: a slower transport than needed -> check the transport
# settings": Open MPI forced onto TCP between ranks of one node. It runs; the doctor
# names the cost. Over the loopback interface only: the tcp BTL otherwise offers the
# peer every address of the host, Docker bridges included, and the cluster tests that
# run beside this one create and remove those meanwhile (a connection to a vanishing
# bridge stalled MPI_Comm_dup past the start-up watchdog once).
run_row tcp-only pmix "$sif" OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo --
[ "$(cat "$rows/tcp-only.rc")" = 0 ] || fail "tcp-only: the run should work, only slower"
has_finding tcp-only net.ompi-tcp-only warning
log "row tcp-only: OMPI_MCA_btl=tcp,self -> net.ompi-tcp-only"

log "all rows reproduced and diagnosed ($rows)"
