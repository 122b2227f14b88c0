#!/bin/sh
# Two commits of the project side by side in one run: the cost of one small
# collective (benches/collcost-abba.sh), overlap of non-blocking collectives
# with computation (OSU's method, benches/src/bin/overlap.rs) and shared-memory
# transport latency (benches/src/bin/transport.rs). Each commit is built in
# release into its own folder; the runs then alternate A B B A ... so that the
# machine's drift (these VMs move 1.3-1.6x between days, and within minutes
# under load) weighs on both sides alike.
#
# Prints three tables with the median of each side over the rounds and the
# ratio B/A (for overlap, the difference in percentage points), and says
# in how many rounds B was slower than A. A restructuring is "no slower" when
# its ratios stay within a few percent of 1.00 and B is slower in about half
# of the rounds, not all of them.
#
# Usage: benches/before-after.sh REV_A [REV_B] [rounds]
#   (defaults: REV_B = HEAD, 6 rounds). Builds go to $BA_DIR (default
#   /tmp/hpc-before-after, binaries in bin-REV; kept, so that a rerun reuses
#   them). Options of the
#   parts: COLLCOST_OPTS (default "--batch 20 --batches 300"),
#   OVERLAP_OPTS (default "--iters 50 --sizes 1024,65536 --engine inline,thread,proxy"),
#   TRANSPORT_ITERS (default 50000); BA_BUILD_ONLY=1 builds and stops.
set -eu
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,22p' "$0" >&2; exit 2; }
A_REV=$(git rev-parse --short "$1")
B_REV=$(git rev-parse --short "${2:-HEAD}")
R="${3:-6}"
WORK="${BA_DIR:-/tmp/hpc-before-after}"
COLLCOST_OPTS="${COLLCOST_OPTS:---batch 20 --batches 300}"
OVERLAP_OPTS="${OVERLAP_OPTS:---iters 50 --sizes 1024,65536 --engine inline,thread,proxy}"
TRANSPORT_ITERS="${TRANSPORT_ITERS:-50000}"
mkdir -p "$WORK"

# build REV SIDE: the release binaries of one commit into $WORK/bin-REV.
build() {
    rev=$1 side=$2 src="$WORK/src-$1"
    if [ ! -f "$src/Cargo.toml" ]; then
        mkdir -p "$src"
        git archive "$rev" | tar -x -C "$src"
    fi
    echo "# building $rev ($side)" >&2
    CARGO_TARGET_DIR="$WORK/target-$rev" cargo build --release -q \
        --manifest-path "$src/Cargo.toml" -p hpc-cli -p hpc-benches \
        --bin hpc --bin collcost --bin overlap --bin transport
    mkdir -p "$WORK/bin-$rev"
    for b in hpc collcost overlap transport; do
        cp "$WORK/target-$rev/release/$b" "$WORK/bin-$rev/"
    done
}
build "$A_REV" A
build "$B_REV" B
# BA_BUILD_ONLY=1: build now (say, at low priority beside other work), measure later.
[ -z "${BA_BUILD_ONLY:-}" ] || exit 0

echo "A = $A_REV ($(git log -1 --format=%cs "$A_REV")), B = $B_REV ($(git log -1 --format=%cs "$B_REV"))"
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"

echo
echo "## 1. cost of one collective (collcost $COLLCOST_OPTS)"
# shellcheck disable=SC2086
benches/collcost-abba.sh "$WORK/bin-$A_REV" "$WORK/bin-$B_REV" "$R" $COLLCOST_OPTS

OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo
echo "## 2. overlap, 2 ranks (overlap $OVERLAP_OPTS) and 3. shm latency (transport --iters $TRANSPORT_ITERS --latency-only)"
# side ROUND SIDE: one round's overlap and latency runs of one side.
side() {
    if [ "$2" = A ]; then D="$WORK/bin-$A_REV"; else D="$WORK/bin-$B_REV"; fi
    # shellcheck disable=SC2086
    "$D/hpc" run -n 2 -- "$D/overlap" $OVERLAP_OPTS > "$OUT/ov-$2-$1.txt"
    "$D/transport" --iters "$TRANSPORT_ITERS" --rounds 1 --latency-only > "$OUT/tr-$2-$1.txt"
}
. benches/abba.sh
abba "$R" side A B
python3 - "$OUT" "$R" <<'PY'
import re, statistics as st, sys
out, R = sys.argv[1], int(sys.argv[2])

def table(kind, parse):
    rows = {}
    for side in "AB":
        for r in range(1, R + 1):
            for line in open(f"{out}/{kind}-{side}-{r}.txt"):
                got = parse(re.sub(r"^\[\d+\]\s*", "", line))
                if got:
                    key, vals = got
                    rows.setdefault(key, {"A": {}, "B": {}})[side][r] = vals
    return rows

def overlap(line):
    f = line.split()
    if len(f) == 9 and f[0] in ("inline", "thread", "proxy") and f[2].isdigit():
        return (f[0], f[1], int(f[2])), (float(f[4]), float(f[7]))

def latency(line):
    m = re.match(r"^(shm .*?)\s{2,}(\d+ \S+)\s+([\d.]+) \[", line)
    if m:
        return (m.group(1), m.group(2)), (float(m.group(3)),)

ov = table("ov", overlap)
print("# overlap: pure = post + wait at once (us, slowest rank, median over rounds); overlap% as OSU")
print(f"{'engine':7} {'collective':10} {'bytes':>6} {'pure-A':>8} {'pure-B':>8} {'B/A':>5}"
      f" {'ovl%-A':>7} {'ovl%-B':>7} {'B>A':>5}")
for k in sorted(ov):
    a, b = ov[k]["A"], ov[k]["B"]
    pa, pb = st.median(v[0] for v in a.values()), st.median(v[0] for v in b.values())
    oa, ob = st.median(v[1] for v in a.values()), st.median(v[1] for v in b.values())
    slower = sum(1 for r in a if r in b and b[r][0] > a[r][0])
    print(f"{k[0]:7} {k[1]:10} {k[2]:>6} {pa:>8.1f} {pb:>8.1f} {pb/pa:>5.2f}"
          f" {oa:>7.1f} {ob:>7.1f} {slower:>3}/{len(a)}")
print()
tr = table("tr", latency)
print("# shm latency: half round trip (us), median over rounds")
print(f"{'measurement':40} {'size':>7} {'A':>8} {'B':>8} {'B/A':>5} {'B>A':>5}")
for k in tr:
    a, b = tr[k]["A"], tr[k]["B"]
    ma, mb = st.median(v[0] for v in a.values()), st.median(v[0] for v in b.values())
    slower = sum(1 for r in a if r in b and b[r][0] > a[r][0])
    print(f"{k[0]:40} {k[1]:>7} {ma:>8.3f} {mb:>8.3f} {mb/ma:>5.2f} {slower:>3}/{len(a)}")
PY
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
