# Sourced by the benchmarks that compare in alternation (before-after.sh,
# collcost-abba.sh, dpu.sh). `abba ROUNDS FN ITEM...` calls `FN ROUND ITEM`
# for each item, in the order given in odd rounds and the other way round in
# even ones (A B, B A, A B, ...), so that the machine's drift weighs on every
# item alike, and says when each round is done and the load then.
abba() {
    abba_n=$1 abba_fn=$2
    shift 2
    abba_r=0
    while [ "$abba_r" -lt "$abba_n" ]; do
        abba_r=$((abba_r + 1))
        abba_order="$*"
        if [ $((abba_r % 2)) = 0 ]; then
            abba_order=""
            for abba_i in "$@"; do abba_order="$abba_i $abba_order"; done
        fi
        for abba_i in $abba_order; do
            "$abba_fn" "$abba_r" "$abba_i"
        done
        echo "# round $abba_r of $abba_n done, load $(cut -d' ' -f1 /proc/loadavg)"
    done
}
