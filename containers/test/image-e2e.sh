#!/usr/bin/env bash
# End-to-end test of `cargo xtask image`: builds the `hpc` image (features mpi, hybrid
# MPI model) twice and checks the digests match, has skopeo inspect the layout, loads
# the archives into Podman (and Docker when its engine is there), runs `hpc selftest`
# and `hpc doctor` inside, then starts a single-node Slurm cluster and runs
# `srun --mpi=pmix -n 2` with each rank in its own Podman container, next to the same
# binary natively. Optional stage: Apptainer, when `apptainer` is on the PATH.
#
# Usage:  containers/test/image-e2e.sh [WORKDIR]
# Env:    XTASK          xtask binary (default: cargo run -q -p xtask --)
#         HPC_E2E_APP    binary to package (default: hpc; it needs selftest/doctor)
#         CARGO_TARGET_DIR honoured; the base image cache lives under it.
#         HPC_E2E_BIND   1: always test the bind model, 0: never (default: when time allows)
# Prints `result: key=value` lines (timings, sizes, digests) and exits non-zero on the
# first failing check. Needs root, podman, skopeo, mmdebstrap, slurm-wlm, munge
# (`cargo xtask image --setup-tools` installs them).
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
fail() { log "FAIL: $*"; exit 1; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
xtask() {
    if [ -n "${XTASK:-}" ]; then "$XTASK" "$@"; else (cd "$repo" && cargo run -q -p xtask -- "$@"); fi
}
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
: > "$work/results.txt"

# 1. Two builds: the first may be cold (base not cached yet), the second is warm and
# must give the same manifest digest. In a checkout others commit to, HEAD (hence the
# revision label and SOURCE_DATE_EPOCH) or the sources can move between the two: then
# a third build is compared with the second.
build() { # index
    local t
    t=$(date +%s%N)
    log "build $1: cargo xtask image $app --features mpi --format oci,docker"
    xtask image "$app" --features mpi --format oci,docker --out "$work/img$1" >"$work/build$1.log" 2>&1 \
        || { tail -n 30 "$work/build$1.log" >&2; fail "image build $1"; }
    result "build${1}_s=$(( $(ms_since "$t") / 1000 ))"
    result "digest$1=$(json "$work/img$1/image.json" 'd["manifest_digest"]')"
}
build 1
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

# 2. skopeo reads the layout and both archives.
skopeo inspect "oci:$img/oci" > "$work/skopeo.json" || fail "skopeo inspect oci:"
json "$work/skopeo.json" 'd["Labels"]["io.hpc-rs.mpi"]' | grep -qx hybrid || fail "mpi label"
[ "$(json "$work/skopeo.json" 'd["Labels"]["org.opencontainers.image.revision"]')" = "$(git -C "$repo" rev-parse HEAD)" ] \
    || fail "revision label"
skopeo inspect "oci-archive:$img/$app-oci.tar" >/dev/null || fail "skopeo inspect oci-archive:"
skopeo inspect "docker-archive:$img/$app-docker.tar" >/dev/null || fail "skopeo inspect docker-archive:"
log "skopeo: layout and archives accepted"

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

# 4. Docker, when the engine is there.
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    docker load -i "$img/$app-docker.tar" >/dev/null || fail "docker load"
    docker run --rm "$ref" hpc selftest --json | grep -q '"ok":true' || fail "docker run selftest"
    docker run --rm "$ref" hpc doctor --json > "$work/doctor-docker.json" || true
    [ "$(json "$work/doctor-docker.json" 'd["environment"]["runtime"]["kind"]')" = docker ] \
        || fail "doctor in docker does not report Docker"
    docker image rm "$ref" >/dev/null 2>&1 || true
    log "docker: load, selftest, doctor ok"
    result "docker=ok"
else
    log "docker: skipped (no engine)"
    result "docker=skipped"
fi

# 5. Slurm + PMIx: native and in containers.
export HPC_SLURMCTLD_PORT=${HPC_SLURMCTLD_PORT:-16817} HPC_SLURMD_PORT=${HPC_SLURMD_PORT:-16818}
slurm=$work/slurm
trap '"$here/slurm-single-node.sh" stop "$slurm" >/dev/null 2>&1 || true' EXIT
"$here/slurm-single-node.sh" start "$slurm" 2
export SLURM_CONF=$slurm/slurm.conf
spool=$slurm/spool
native=$(json "$img/image.json" 'd["binary_path"]')

# Time from srun's start to the last rank past MPI init and the first barrier.
to_barrier_ms() { # start_ns file
    python3 - "$1" "$2" <<'PY'
import json, sys
start = int(sys.argv[1])
ranks = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
assert len(ranks) == 2 and all(r["ok"] for r in ranks), ranks
assert sorted(r["rank"] for r in ranks) == [0, 1], ranks
print(round((max(int(r["first_barrier_unix_ns"]) for r in ranks) - start) / 1e6))
PY
}
cat > "$work/rank.sh" <<EOF
#!/bin/bash
# One rank in its own container, in the host's network/IPC/PID namespaces.
args=(run --rm --network host --ipc host --pid host -v "$spool:$spool")
for v in \$(compgen -e); do
    case "\$v" in PMIX_*|SLURM_*|OMPI_*|PMI_*) args+=(-e "\$v") ;; esac
done
exec podman "\${args[@]}" "$ref" "\$@"
EOF
chmod +x "$work/rank.sh"
for i in 1 2 3; do
    t=$(date +%s%N)
    srun --mpi=pmix -n 2 "$native" selftest --json --expect-size 2 > "$work/native$i.json" || fail "native srun"
    native_ms=$(to_barrier_ms "$t" "$work/native$i.json")
    native_total=$(ms_since "$t")
    t=$(date +%s%N)
    srun --mpi=pmix -n 2 "$work/rank.sh" hpc selftest --json --expect-size 2 > "$work/podman$i.json" \
        || fail "srun + podman"
    podman_ms=$(to_barrier_ms "$t" "$work/podman$i.json")
    podman_total=$(ms_since "$t")
    result "run$i native_barrier_ms=$native_ms native_total_ms=$native_total podman_barrier_ms=$podman_ms podman_total_ms=$podman_total"
done
result "bootstrap_in_container=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["bootstrap"])' "$work/podman1.json")"
srun --mpi=pmix -n 1 "$work/rank.sh" hpc doctor --json > "$work/doctor-srun.json" || true
[ "$(json "$work/doctor-srun.json" 'd["environment"]["runtime"]["kind"]')" = podman ] \
    || fail "doctor under srun does not report Podman"
[ "$(json "$work/doctor-srun.json" '"pmix" in d["environment"]["launcher"]["kinds"]')" = True ] \
    || fail "doctor under srun does not report the PMIx launcher"
log "srun --mpi=pmix: native and per-rank podman ok; doctor reports Podman + PMIx"

# The generated batch script, as a user would submit it (one node, two tasks).
(cd "$img" && HPC_ULIMITS="" SLURMD_SPOOL=$spool sbatch --wait -N 1 -n 2 --ntasks-per-node=2 \
    --output="$work/sbatch-%j.out" slurm-podman.sbatch selftest --json --expect-size 2 >/dev/null) \
    || { cat "$work"/sbatch-*.out >&2 || true; fail "sbatch slurm-podman.sbatch"; }
[ "$(grep -c '"ok":true' "$work"/sbatch-*.out)" = 2 ] || fail "sbatch output"
log "sbatch slurm-podman.sbatch ok"

# 6. MPI model "bind": no MPI in the image, the host's Open MPI bound in by the
# generated batch script. Needs a second (minbase) base: about 2 more minutes when it
# is not cached, so by default it runs only while the test is within 5 minutes
# (HPC_E2E_BIND=1 forces it, 0 skips it).
bind=${HPC_E2E_BIND:-auto}
if [ "$bind" = auto ]; then
    if [ $(( $(ms_since "$t_all") / 1000 )) -lt 300 ]; then bind=1; else bind=0; fi
fi
if [ "$bind" = 1 ]; then
    t=$(date +%s%N)
    xtask image "$app" --features mpi --mpi bind --name "$app-bind" --out "$work/bind" \
        >"$work/build-bind.log" 2>&1 || { tail -n 30 "$work/build-bind.log" >&2; fail "bind image build"; }
    result "bind_build_s=$(( $(ms_since "$t") / 1000 ))"
    result "bind_compressed_mb=$(json "$work/bind/image.json" 'round(d["compressed_size"]/1e6, 1)')"
    podman load -i "$work/bind/$app-oci.tar" >/dev/null 2>&1 || fail "podman load (bind)"
    (cd "$work/bind" && HPC_ULIMITS="" SLURMD_SPOOL=$spool sbatch --wait -N 1 -n 2 --ntasks-per-node=2 \
        --output="$work/bind-%j.out" slurm-podman.sbatch selftest --json --expect-size 2 >/dev/null) \
        || { cat "$work"/bind-*.out >&2 || true; fail "sbatch slurm-podman.sbatch (bind)"; }
    [ "$(grep -c '"ok":true' "$work"/bind-*.out)" = 2 ] || fail "bind sbatch output"
    podman image rm -f "localhost/$app-bind:latest" >/dev/null 2>&1 || true
    log "bind model: sbatch with the host's Open MPI bound in ok"
    result "bind=ok"
else
    log "bind model: skipped (HPC_E2E_BIND=1 to force)"
    result "bind=skipped"
fi

# 7. Apptainer (optional: not packaged for bookworm, see the platform notes).
if command -v apptainer >/dev/null; then
    (cd "$img" && apptainer build --force "$app.sif" "$app.def") >/dev/null || fail "apptainer build"
    srun --mpi=pmix -n 2 apptainer exec "$img/$app.sif" hpc selftest --json --expect-size 2 \
        > "$work/apptainer.json" || fail "srun apptainer exec"
    result "apptainer=ok"
else
    log "apptainer: skipped (not installed; see containers/README.md)"
    result "apptainer=skipped"
fi

podman image rm -f "$ref" >/dev/null 2>&1 || true
result "total_s=$(( $(ms_since "$t_all") / 1000 ))"
log "all checks passed ($work)"
