# Sourced by the benches that run on the Docker cluster (`hpc cluster`):
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
