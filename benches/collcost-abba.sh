#!/bin/sh
# Cost of one small collective, two builds side by side: each directory holds
# an `hpc` and a `collcost` binary (benches/src/bin/collcost.rs) of one build.
# The runs alternate A B B A ... (one round: both builds, 1 rank then 2 ranks;
# the order flips every round), so that the machine's drift weighs on both.
# Prints, per row, each build's thread CPU time per collective (the median
# over batches, then over rounds), the ratio B/A, the same for the best round's
# quiet batches (the lowest 10th percentile over rounds: with two ranks on a
# loaded machine a rank's CPU time includes its spin for a displaced peer, which
# the best round escapes), the wall time, and in how many rounds B was slower
# than A (paired by round).
# Usage: benches/collcost-abba.sh DIR_A DIR_B [rounds] [collcost options...]
#   (defaults: 6 rounds; --batch 20 --batches 300)
set -eu
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
R="${3:-6}"
# Checked before the first run (0, -1 or x rounds ran nothing, then the table's
# Python failed on a file no round wrote).
case $R in
'' | *[!0-9]*) rounds_ok=false ;;
*) [ "${#R}" -le 6 ] && [ "$((10#$R))" -ge 1 ] && rounds_ok=true || rounds_ok=false ;;
esac
$rounds_ok || { echo "collcost-abba.sh: rounds $R: give a whole number of rounds, 1 to 999999" >&2; exit 2; }
shift 2
[ $# -gt 0 ] && shift
OPTS="${*:---batch 20 --batches 300}"
for d in "$A" "$B"; do
    for b in hpc collcost; do
        [ -x "$d/$b" ] || { echo "no $d/$b" >&2; exit 2; }
    done
done
# KEEP=DIR keeps each run's output there.
if [ -n "${KEEP:-}" ]; then
    OUT=$KEEP
    mkdir -p "$OUT"
else
    OUT=$(mktemp -d)
    trap 'rm -rf "$OUT"' EXIT
fi
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
echo "A: $A"
echo "B: $B"
echo "collcost $OPTS, $R rounds"
# side ROUND SIDE: one round of one build, 1 rank then 2 ranks.
side() {
    if [ "$2" = A ]; then D=$A; else D=$B; fi
    for n in 1 2; do
        # shellcheck disable=SC2086
        "$D/hpc" run -n "$n" -- "$D/collcost" $OPTS > "$OUT/$2-$n-$1.txt"
    done
}
. "$(dirname "$0")/abba.sh"
abba "$R" side A B
python3 - "$OUT" "$R" <<'PY'
import sys, re, statistics as st
out, R = sys.argv[1], int(sys.argv[2])
rows = {}
for side in "AB":
    for n in (1, 2):
        for r in range(1, R + 1):
            for line in open(f"{out}/{side}-{n}-{r}.txt"):
                f = re.sub(r"^\[\d+\]\s*", "", line).split()
                if len(f) == 8 and f[0] in ("inline", "thread", "proxy") and f[2].isdigit():
                    k = (n, f[0], f[1], int(f[2]))
                    rows.setdefault(k, {"A": {}, "B": {}})[side][r] = [float(x) for x in f[3:]]
print("# us per collective; thr = thread CPU time, median over batches and rounds; best = the")
print("# lowest 10th percentile over rounds; wall = wall time, median; B>A = rounds where B's thr was higher")
print(f"{'ranks':>5} {'engine':7} {'collective':10} {'bytes':>5} {'thr-A':>7} {'thr-B':>7} {'B/A':>5}"
      f" {'best-A':>7} {'best-B':>7} {'B/A':>5} {'wall-A':>7} {'wall-B':>7} {'B>A':>5}")
for k in sorted(rows):
    a, b = rows[k]["A"], rows[k]["B"]
    def med(s, i): return st.median(v[i] for v in s.values())
    def low(s, i): return min(v[i] for v in s.values())
    ta, tb, pa, pb = med(a, 0), med(b, 0), low(a, 1), low(b, 1)
    slower = sum(1 for r in a if r in b and b[r][0] > a[r][0])
    print(f"{k[0]:>5} {k[1]:7} {k[2]:10} {k[3]:>5} {ta:>7.3f} {tb:>7.3f} {tb/ta:>5.2f}"
          f" {pa:>7.3f} {pb:>7.3f} {pb/pa:>5.2f} {med(a, 3):>7.3f} {med(b, 3):>7.3f} {slower:>3}/{len(a)}")
PY
