# Sourced by the benches that run on the Docker cluster (`hpc cluster`), from the
# repository root.

# check_nodes LIST MIN: every entry of LIST is a count of nodes in 1..8; sets
# max_nodes to the largest, which must be at least MIN. Exits 2 naming --nodes.
check_nodes() {
    local n
    max_nodes=0
    for n in $1; do
        case $n in ''|*[!0-9]*) echo "--nodes: $n is not a number" >&2; exit 2 ;; esac
        [ "$n" -ge 1 ] && [ "$n" -le 8 ] || { echo "--nodes: $n is not in 1..8" >&2; exit 2; }
        [ "$n" -gt "$max_nodes" ] && max_nodes=$n
    done
    [ "$max_nodes" -ge "$2" ] || { echo "--nodes: give at least one count of $2 or more nodes" >&2; exit 2; }
}

# bench_cluster NAME [reuse]: the bench's own cluster of $max_nodes nodes running the
# binaries in $bin, beside the tests' clusters (HPC_CLUSTER_NAME and HPC_CLUSTER_DIR
# default to hpc-NAME-bench and <target>/cluster-NAME-bench); defines `cluster`
# (`hpc cluster` of $bin) and `shared` (the nodes' /shared). Taken down at exit
# unless KEEP=1; with `reuse` and KEEP=1, one that is already up is used as it is.
bench_cluster() {
    local target
    target=$(readlink -f "${CARGO_TARGET_DIR:-target}")
    export HPC_CLUSTER_NAME=${HPC_CLUSTER_NAME:-hpc-$1-bench}
    export HPC_CLUSTER_DIR=${HPC_CLUSTER_DIR:-$target/cluster-$1-bench}
    export HPC_CACHE_DIR=${HPC_CACHE_DIR:-$target/cluster-cache}
    cluster() { "$bin/hpc" cluster "$@"; }
    if [ "${KEEP:-0}" != 1 ]; then trap 'cluster down >/dev/null 2>&1 || true' EXIT; fi
    if [ "${2:-}" = reuse ] && [ "${KEEP:-0}" = 1 ] && docker inspect "$HPC_CLUSTER_NAME-node$max_nodes" >/dev/null 2>&1; then
        echo "using the cluster $HPC_CLUSTER_NAME that is up" >&2
    else
        cluster up --nodes "$max_nodes" --bin "$bin" >&2
    fi
    shared=$HPC_CLUSTER_DIR/shared
}
