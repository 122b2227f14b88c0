#!/usr/bin/env bash
# End-to-end test of `cargo xtask image` and of the container workflows it packages:
# builds the `hpc` image (features mpi, hybrid MPI model) twice and checks the
# digests match (the first build also writes the SIF), has skopeo inspect the
# layout, loads the archives into Podman and Docker, runs `hpc selftest` and
# `hpc doctor` inside, then starts a single-node Slurm cluster and runs
# `srun --mpi=pmix -n 2` with each rank in its own Podman and Apptainer container
# next to the same binary natively, checks the doctor's report from inside
# Apptainer under srun, submits the generated batch scripts, builds and runs the
# bind-model image (host Open MPI bound in) under Podman and Apptainer, and with
# HPC_TEST_CLUSTER=1 runs both SIFs across the nodes of the Docker cluster.
#
# Every stage runs; a stage that cannot run fails the script with its reason. Each
# stage that passed appends `stage_<name>=ok` to WORKDIR/results.txt, and the test
# that runs this script checks that every stage is there.
#
# Usage:  containers/test/image-e2e.sh [WORKDIR]
# Env:    XTASK          xtask binary (default: cargo run -q -p xtask --)
#         HPC_E2E_APP    binary to package (default: hpc; it needs selftest/doctor)
#         CARGO_TARGET_DIR honoured; the base image cache lives under it.
#         HPC_TEST_CLUSTER=1  also the stage across the Docker cluster's nodes
# Prints `result: key=value` lines (timings, sizes, digests) and exits non-zero on the
# first failing check. Needs root, podman, skopeo, mmdebstrap, slurm-wlm, munge,
# docker and apptainer (`cargo xtask image --setup-tools` installs them).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${1:-$(mktemp -d /tmp/hpc-image-e2e.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
app=${HPC_E2E_APP:-hpc}
t_all=$(date +%s%N)

log() { echo "image-e2e: $*" >&2; }
result() { echo "result: $*"; echo "$*" >> "$work/results.txt"; }
fail() { log "FAIL: $*"; echo "failed: $*" >> "$work/results.txt"; exit 1; }
stage() { log "stage $1: ok"; result "stage_$1=ok"; }
need() { # program reason
    command -v "$1" >/dev/null || fail "$1 is not installed: $2"
}
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
xtask() {
    if [ -n "${XTASK:-}" ]; then "$XTASK" "$@"; else (cd "$repo" && cargo run -q -p xtask -- "$@"); fi
}
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
: > "$work/results.txt"
need podman "the Podman stages (cargo xtask image --setup-tools)"
need skopeo "the layout checks (cargo xtask image --setup-tools)"
need srun "the Slurm stages (apt-get install slurm-wlm)"
need docker "the Docker stage (a Docker Engine must run)"
docker info >/dev/null 2>&1 || fail "docker: the engine does not answer (docker info)"
need apptainer "the Apptainer stages (HPC_TEST_CONTAINERS=1 cargo xtask setup)"

# 1. Two builds: the first may be cold (base not cached yet), the second is warm and
# must give the same manifest digest. In a checkout others commit to, HEAD (hence the
# revision label and SOURCE_DATE_EPOCH) or the sources can move between the two: then
# a third build is compared with the second.
build() { # index [formats]
    local t formats=${2:-oci,docker}
    t=$(date +%s%N)
    log "build $1: cargo xtask image $app --features mpi --format $formats"
    xtask image "$app" --features mpi --format "$formats" --out "$work/img$1" >"$work/build$1.log" 2>&1 \
        || { tail -n 30 "$work/build$1.log" >&2; fail "image build $1"; }
    result "build${1}_s=$(( $(ms_since "$t") / 1000 ))"
    result "digest$1=$(json "$work/img$1/image.json" 'd["manifest_digest"]')"
}
build 1 oci,docker,sif
build 2
grep -q "from the cache" "$work/build2.log" || fail "second build did not reuse the cached base"
same() { [ "$(json "$work/img$1/image.json" 'd["manifest_digest"]')" = "$(json "$work/img$2/image.json" 'd["manifest_digest"]')" ]; }
a=1 b=2
if ! same 1 2; then
    log "digests differ (revision $(json "$work/img1/image.json" 'd["revision"]') -> $(json "$work/img2/image.json" 'd["revision"]')): building a third time"
    build 3
    a=2 b=3
    same 2 3 || fail "not reproducible: builds 2 and 3 differ"
fi
cmp -s "$work/img$a/$app-oci.tar" "$work/img$b/$app-oci.tar" || fail "oci-archives differ"
img=$work/img1
ref=$(json "$img/image.json" 'd["ref"]')
result "compressed_mb=$(json "$img/image.json" 'round(d["compressed_size"]/1e6, 1)')"
result "app_layer_mb=$(json "$img/image.json" 'round(d["layers"][-1]["size"]/1e6, 1)')"
[ -s "$img/$app.sif" ] || fail "--format sif wrote no $app.sif"
[ "$(json "$img/image.json" 'd["sif"]')" = "$img/$app.sif" ] || fail "image.json does not record the SIF"
result "sif_mb=$(json "$img/image.json" 'round(d["sif_size"]/1e6, 1)')"
stage build

# 2. skopeo reads the layout and both archives.
skopeo inspect "oci:$img/oci" > "$work/skopeo.json" || fail "skopeo inspect oci:"
json "$work/skopeo.json" 'd["Labels"]["io.hpc-rs.mpi"]' | grep -qx hybrid || fail "mpi label"
[ "$(json "$work/skopeo.json" 'd["Labels"]["org.opencontainers.image.revision"]')" = "$(git -C "$repo" rev-parse HEAD)" ] \
    || fail "revision label"
skopeo inspect "oci-archive:$img/$app-oci.tar" >/dev/null || fail "skopeo inspect oci-archive:"
skopeo inspect "docker-archive:$img/$app-docker.tar" >/dev/null || fail "skopeo inspect docker-archive:"
log "skopeo: layout and archives accepted"
stage skopeo

# 3. Podman: load, run the app as a singleton, doctor without a launcher.
# shellcheck source=containers/test/podman-env.sh
. "$here/podman-env.sh" "$work/podman" overlay
if ! podman info >/dev/null 2>&1; then
    log "overlay storage unavailable: using vfs"
    . "$here/podman-env.sh" "$work/podman" vfs
fi
t=$(date +%s%N)
podman load -i "$img/$app-oci.tar" >/dev/null || fail "podman load"
result "podman_load_ms=$(ms_since "$t")"
podman image exists "$ref" || fail "podman named the image otherwise than $ref"
podman run --rm "$ref" hpc selftest --json > "$work/singleton.json" || fail "podman run selftest"
grep -q '"ok":true' "$work/singleton.json" || fail "singleton selftest output"
podman run --rm "$ref" hpc doctor --json > "$work/doctor-podman.json" || true
[ "$(json "$work/doctor-podman.json" 'd["environment"]["runtime"]["kind"]')" = podman ] \
    || fail "doctor in podman does not report Podman"
HPC_ULIMITS="" IMAGE=$ref "$img/podman-run.sh" selftest > "$work/podman-run.out" || fail "generated podman-run.sh"
log "podman: load, selftest (singleton), doctor, podman-run.sh ok"
stage podman

# 4. Docker.
docker load -i "$img/$app-docker.tar" >/dev/null || fail "docker load"
docker run --rm "$ref" hpc selftest --json | grep -q '"ok":true' || fail "docker run selftest"
docker run --rm "$ref" hpc doctor --json > "$work/doctor-docker.json" || true
[ "$(json "$work/doctor-docker.json" 'd["environment"]["runtime"]["kind"]')" = docker ] \
    || fail "doctor in docker does not report Docker"
docker image rm "$ref" >/dev/null 2>&1 || true
# The default archive loads in Docker too (it carries Docker's manifest.json), and the
# generated run script with ENGINE=docker loads and runs the image.
docker load -i "$img/$app-oci.tar" >/dev/null || fail "docker load of the oci-archive"
docker run --rm "$ref" hpc selftest --json | grep -q '"ok":true' || fail "docker run (oci-archive)"
docker image rm "$ref" >/dev/null 2>&1 || true
ENGINE=docker HPC_ULIMITS="" IMAGE=$ref "$img/podman-run.sh" selftest > "$work/docker-run.out" \
    || fail "generated podman-run.sh with ENGINE=docker"
docker image rm "$ref" >/dev/null 2>&1 || true
log "docker: load (both archives), selftest, doctor, podman-run.sh ok"
stage docker

# 5. Slurm + PMIx: native, one Podman container per rank, one Apptainer container
# per rank (the hybrid model: Open MPI inside, PMIx from slurmd), alternated.
# Two free ports of its own (unless given): another test's Slurm may be up meanwhile.
if [ -z "${HPC_SLURMCTLD_PORT:-}" ]; then
    read -r HPC_SLURMCTLD_PORT HPC_SLURMD_PORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("", 0))
print(*[x.getsockname()[1] for x in s])')
fi
export HPC_SLURMCTLD_PORT HPC_SLURMD_PORT=${HPC_SLURMD_PORT:-$((HPC_SLURMCTLD_PORT + 1))}
slurm=$work/slurm
# A cluster of its own name and folder: the other cluster tests may run meanwhile.
export HPC_CLUSTER_NAME=${HPC_CLUSTER_NAME:-hpc-e2e} HPC_CLUSTER_DIR=${HPC_CLUSTER_DIR:-$work/cluster}
# The node file system's cache (and its build lock) shared with the cluster tests.
export HPC_CACHE_DIR=${HPC_CACHE_DIR:-$repo/target/cluster-cache}
cdir=$HPC_CLUSTER_DIR
# `hpc cluster` of the packaged build (HPC_E2E_APP is hpc for this stage).
hpc_cluster() { "$(dirname "${native:?}")/hpc" cluster "$@"; }
cleanup() {
    "$here/slurm-single-node.sh" stop "$slurm" >/dev/null 2>&1 || true
    if [ "${HPC_TEST_CLUSTER:-}" = 1 ] && [ -n "${native:-}" ]; then hpc_cluster down >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
"$here/slurm-single-node.sh" start "$slurm" 2
export SLURM_CONF=$slurm/slurm.conf
spool=$slurm/spool
native=$(json "$img/image.json" 'd["binary_path"]')
sif=$img/$app.sif

# Time from srun's start to the last rank past MPI init and the first barrier.
to_barrier_ms() { # start_ns file
    python3 - "$1" "$2" <<'PY'
import json, sys
start = int(sys.argv[1])
ranks = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
assert len(ranks) == 2 and all(r["ok"] for r in ranks), ranks
assert sorted(r["rank"] for r in ranks) == [0, 1], ranks
assert all("PMIx" in r["bootstrap"] for r in ranks), ranks
print(round((max(int(r["first_barrier_unix_ns"]) for r in ranks) - start) / 1e6))
PY
}
# The JSON reports of several files (one per rank) as one JSON list.
reports() { # files...
    python3 -c 'import json, sys; print(json.dumps([json.load(open(f)) for f in sys.argv[1:]]))' "$@"
}
cat > "$work/rank.sh" <<RANK
#!/bin/bash
# One rank in its own container, in the host's network/IPC/PID namespaces.
args=(run --rm --network host --ipc host --pid host -v "$spool:$spool")
for v in \$(compgen -e); do
    case "\$v" in PMIX_*|SLURM_*|OMPI_*|PMI_*) args+=(-e "\$v") ;; esac
done
exec podman "\${args[@]}" "$ref" "\$@"
RANK
chmod +x "$work/rank.sh"
apptainer exec "$sif" hpc selftest --json > "$work/apptainer-singleton.json" || fail "apptainer exec (singleton)"
grep -q '"ok":true' "$work/apptainer-singleton.json" || fail "apptainer singleton selftest output"
for i in 1 2 3; do
    line="run$i"
    for how in native podman apptainer; do
        case $how in
            native) cmd=("$native") ;;
            podman) cmd=("$work/rank.sh" hpc) ;;
            apptainer) cmd=(apptainer exec "$sif" hpc) ;;
        esac
        t=$(date +%s%N)
        srun --mpi=pmix -n 2 "${cmd[@]}" selftest --json --expect-size 2 > "$work/$how$i.json" \
            || fail "srun --mpi=pmix -n 2 ($how)"
        ms=$(to_barrier_ms "$t" "$work/$how$i.json") || fail "srun $how: the ranks did not all start through PMIx"
        line+=" ${how}_barrier_ms=$ms ${how}_total_ms=$(ms_since "$t")"
    done
    result "$line"
done
result "bootstrap_in_container=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["bootstrap"])' "$work/apptainer1.json")"
srun --mpi=pmix -n 1 "$work/rank.sh" hpc doctor --json > "$work/doctor-srun.json" || true
[ "$(json "$work/doctor-srun.json" 'd["environment"]["runtime"]["kind"]')" = podman ] \
    || fail "doctor under srun does not report Podman"
[ "$(json "$work/doctor-srun.json" '"pmix" in d["environment"]["launcher"]["kinds"]')" = True ] \
    || fail "doctor under srun does not report the PMIx launcher"
stage slurm_podman

# The doctor inside Apptainer, under srun with PMIx, on both ranks.
# One output file per task: two ranks' reports would interleave on one stream.
srun --mpi=pmix -n 2 --output="$work/doctor-apptainer.%t.out" --error="$work/doctor-apptainer.%t.err" apptainer exec "$sif" hpc doctor --json || true
reports "$work"/doctor-apptainer.[01].out > "$work/doctor-apptainer.json" \
    || fail "doctor inside Apptainer under srun printed no JSON reports"
python3 - "$work/doctor-apptainer.json" <<'PY' || fail "doctor inside Apptainer under srun"
import json, sys
reports = json.load(open(sys.argv[1]))
assert len(reports) == 2, f"{len(reports)} reports"
for d in reports:
    e = d["environment"]
    rt = e["runtime"]
    assert rt["kind"] == "apptainer", rt
    assert rt["confidence"] == "strong", rt
    sources = {x["source"] for x in rt["evidence"]}
    assert {"/.singularity.d", "env:APPTAINER_CONTAINER"} <= sources, sources
    assert rt["details"]["image"].endswith(".sif"), rt["details"]
    la = e["launcher"]
    assert {"slurm", "pmix"} <= set(la["kinds"]), la
    assert la["slurm"]["mpi_type"] == "pmix", la
    assert la["size"] == 2 and la["local_size"] == 2, la
    assert la["pmix_server_tmpdir_visible"] is True, la
    assert d["summary"]["errors"] == 0, d["findings"]
assert sorted(d["environment"]["launcher"]["rank"] for d in reports) == [0, 1]
PY
log "srun --mpi=pmix: native, per-rank Podman and Apptainer ok; doctor reports Apptainer + Slurm + PMIx"
stage apptainer_srun

# The generated batch scripts, as a user would submit them (one node, two tasks).
(cd "$img" && HPC_ULIMITS="" SLURMD_SPOOL=$spool sbatch --wait -N 1 -n 2 --ntasks-per-node=2 \
    --output="$work/sbatch-%j.out" slurm-podman.sbatch selftest --json --expect-size 2 >/dev/null) \
    || { cat "$work"/sbatch-*.out >&2 || true; fail "sbatch slurm-podman.sbatch"; }
[ "$(grep -c '"ok":true' "$work"/sbatch-*.out)" = 2 ] || fail "sbatch output"
(cd "$img" && sbatch --wait -N 1 -n 2 --ntasks-per-node=2 \
    --output="$work/sbatch-apptainer-%j.out" slurm-apptainer.sbatch selftest --json --expect-size 2 >/dev/null) \
    || { cat "$work"/sbatch-apptainer-*.out >&2 || true; fail "sbatch slurm-apptainer.sbatch"; }
[ "$(grep -c '"ok":true' "$work"/sbatch-apptainer-*.out)" = 2 ] || fail "sbatch slurm-apptainer.sbatch output"
log "sbatch slurm-podman.sbatch and slurm-apptainer.sbatch ok"
stage sbatch

# 6. MPI model "bind": no MPI in the image, the host's Open MPI bound in by the
# generated batch scripts, in Podman and in Apptainer.
t=$(date +%s%N)
bind=$work/bind
xtask image "$app" --features mpi --mpi bind --name "$app-bind" --format oci,sif --out "$bind" \
    >"$work/build-bind.log" 2>&1 || { tail -n 30 "$work/build-bind.log" >&2; fail "bind image build"; }
result "bind_build_s=$(( $(ms_since "$t") / 1000 ))"
result "bind_compressed_mb=$(json "$bind/image.json" 'round(d["compressed_size"]/1e6, 1)')"
[ -n "$(json "$bind/image.json" '",".join(d["bind_paths"])')" ] || fail "the bind image lists no host paths to bind"
podman load -i "$bind/$app-oci.tar" >/dev/null 2>&1 || fail "podman load (bind)"
(cd "$bind" && HPC_ULIMITS="" SLURMD_SPOOL=$spool sbatch --wait -N 1 -n 2 --ntasks-per-node=2 \
    --output="$work/bind-%j.out" slurm-podman.sbatch selftest --json --expect-size 2 >/dev/null) \
    || { cat "$work"/bind-*.out >&2 || true; fail "sbatch slurm-podman.sbatch (bind)"; }
[ "$(grep -c '"ok":true' "$work"/bind-*.out)" = 2 ] || fail "bind sbatch output"
podman image rm -f "localhost/$app-bind:latest" >/dev/null 2>&1 || true
(cd "$bind" && sbatch --wait -N 1 -n 2 --ntasks-per-node=2 \
    --output="$work/bind-apptainer-%j.out" slurm-apptainer.sbatch selftest --json --expect-size 2 >/dev/null) \
    || { cat "$work"/bind-apptainer-*.out >&2 || true; fail "sbatch slurm-apptainer.sbatch (bind)"; }
[ "$(grep -c '"ok":true' "$work"/bind-apptainer-*.out)" = 2 ] || fail "bind slurm-apptainer.sbatch output"
grep -q 'Open MPI v4' "$work"/bind-apptainer-*.out || fail "bind model: the ranks did not report the host's Open MPI"
log "bind model: the host's Open MPI bound in, sbatch with Podman and with Apptainer ok"
stage bind

# 7. Across nodes: both SIFs on the Docker cluster (Slurm + PMIx, one container per
# node, Apptainer on every node), when the cluster tests are on.
if [ "${HPC_TEST_CLUSTER:-}" = 1 ]; then
    appt=$(readlink -f "$(command -v apptainer)")
    appt_dir=$(dirname "$(dirname "$appt")")
    [ -d "$appt_dir/rootfs" ] \
        || fail "cluster stage: $appt is not the wrapper of a Debian tree (no $appt_dir/rootfs for the nodes to mount)"
    t=$(date +%s%N)
    hpc_cluster up --nodes 2 --bin "$(dirname "$native")" --apptainer "$appt_dir" >"$work/cluster-up.log" 2>&1 \
        || { tail -n 30 "$work/cluster-up.log" >&2; fail "cluster up with Apptainer"; }
    result "cluster_up_s=$(( $(ms_since "$t") / 1000 ))"
    rm -f "$cdir"/shared/bind-*.out
    cp "$sif" "$cdir/shared/$app.sif"
    cp "$bind/$app.sif" "$cdir/shared/$app-bind.sif"
    cp "$bind/slurm-apptainer.sbatch" "$cdir/shared/bind.sbatch"
    # The nodes' slurmd spool (PMIx server files) is not under /tmp: bound in.
    hpc_cluster exec srun --mpi=pmix -N 2 -n 2 apptainer exec --bind /var/spool/slurmd "/shared/$app.sif" \
        hpc selftest --json --expect-size 2 --expect-nodes 2 --transport > "$work/cluster-hybrid.json" \
        || fail "cluster: srun --mpi=pmix -N 2 apptainer exec (hybrid)"
    python3 - "$work/cluster-hybrid.json" <<'PY' || fail "cluster: hybrid ranks"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert len(r) == 2 and all(x["ok"] and x["nodes"] == 2 for x in r), r
assert len({x["node_name"] for x in r}) == 2, r
assert all(set(x["transport"].values()) == {"tcp"} for x in r), r
PY
    hpc_cluster exec sbatch --wait -N 2 -n 2 --ntasks-per-node=1 --output=/shared/bind-%j.out \
        --export="ALL,SIF=/shared/$app-bind.sif" /shared/bind.sbatch selftest --json --expect-size 2 --expect-nodes 2 \
        >/dev/null || { cat "$cdir"/shared/bind-*.out >&2 || true; fail "cluster: sbatch slurm-apptainer.sbatch (bind)"; }
    [ "$(grep -c '"ok":true' "$cdir"/shared/bind-*.out)" = 2 ] || fail "cluster: bind output"
    hpc_cluster exec srun --mpi=pmix -N 2 -n 2 --output=/shared/doctor.%t.out --error=/shared/doctor.%t.err \
        apptainer exec --bind /var/spool/slurmd "/shared/$app.sif" hpc doctor --json || true
    reports "$cdir"/shared/doctor.[01].out > "$work/cluster-doctor.json" || fail "cluster: doctor printed no JSON"
    python3 - "$work/cluster-doctor.json" <<'PY' || fail "cluster: doctor inside Apptainer across nodes"
import json, sys
reps = json.load(open(sys.argv[1]))
assert len(reps) == 2, len(reps)
for d in reps:
    e = d["environment"]
    assert e["runtime"]["kind"] == "apptainer", e["runtime"]
    assert {"slurm", "pmix"} <= set(e["launcher"]["kinds"]), e["launcher"]
    assert e["launcher"]["local_size"] == 1 and e["launcher"]["size"] == 2, e["launcher"]
    assert e["launcher"]["pmix_server_tmpdir_visible"] is True, e["launcher"]
    assert d["summary"]["errors"] == 0, d["findings"]
assert len({d["environment"]["launcher"]["rank"] for d in reps}) == 2
PY
    hpc_cluster down >/dev/null 2>&1 || true
    log "cluster: hybrid and bind SIFs across 2 nodes under srun --mpi=pmix ok"
    stage cluster_apptainer
fi

# 8. The troubleshooting table: real broken runs, each diagnosed (rows/ in WORKDIR).
"$here/troubleshoot.sh" "$work" "$img" "$bind" || fail "troubleshooting rows"
stage troubleshoot

podman image rm -f "$ref" >/dev/null 2>&1 || true
result "total_s=$(( $(ms_since "$t_all") / 1000 ))"
log "all checks passed ($work)"
