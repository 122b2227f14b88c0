#!/usr/bin/env python3
"""Parser and table of benches/containers/run.sh.

  report.py parse RUNTIME ROUND OUTPUT [METRICS]   one `runtime round metric value` line
                                                   per metric (METRICS: the ones run)
  report.py table SAMPLES CONDITIONS CMD  the Markdown table: medians and ratios to native

Metrics: shm/tcp latency (perftest send_lat, 8 bytes, t_typical = median half round
trip, microseconds), shm/tcp bandwidth (perftest write_bw, 1 MiB, BW average, MB/s with
MB = 2^20 bytes) and Brunel's simulate time (seconds, the slowest rank's).
"""
import re
import statistics
import sys

METRICS = [
    # name, label, unit, higher is better, target ratio
    ("shm_lat", "shm latency, 8 B", "us", False, 1.05),
    ("shm_bw", "shm bandwidth, 1 MiB", "MB/s", True, 1.05),
    ("tcp_lat", "tcp latency, 8 B", "us", False, 1.05),
    ("tcp_bw", "tcp bandwidth, 1 MiB", "MB/s", True, 1.05),
    ("brunel", "Brunel simulate time", "s", False, 1.03),
]


def parse(runtime, rnd, path, wanted=None):
    section, rows = None, {}
    for line in open(path, errors="replace"):
        line = re.sub(r"^\[\d+\]\s?", "", line.rstrip("\n"))
        if line.startswith("@@ "):
            section = line[3:].strip()
            continue
        cols = line.split()
        if section in ("shm_lat", "tcp_lat") and len(cols) >= 8 and cols[0] == "8":
            rows[section] = float(cols[4])  # t_typical
        elif section in ("shm_bw", "tcp_bw") and len(cols) >= 5 and cols[0] == "1048576":
            rows[section] = float(cols[3])  # BW average
        elif section == "brunel":
            m = re.search(r"\|\s*simulate ([0-9.]+) s", line)
            if m:
                rows[section] = float(m.group(1))
    wanted = wanted.split() if wanted else [m[0] for m in METRICS]
    missing = [m for m in wanted if m not in rows]
    if missing:
        sys.exit(f"{path}: no figure for {', '.join(missing)}")
    for k, v in rows.items():
        print(f"{runtime} {rnd} {k} {v}")


def table(samples, conditions, cmd):
    data = {}
    order = []
    for line in open(samples):
        rt, rnd, k, v = line.split()
        if rt not in order:
            order.append(rt)
        data.setdefault((rt, k), []).append(float(v))
    if "native" not in order:
        sys.exit("no native samples: the ratios need them")
    order = ["native"] + [r for r in order if r != "native"]
    rounds = max(len(v) for v in data.values())
    print(f"```console\n$ {cmd}\n```\n")
    head = "| metric | " + " | ".join(order) + " |"
    print(head)
    print("|" + "---|" * (len(order) + 1))
    misses = []
    for name, label, unit, higher, target in METRICS:
        if ("native", name) not in data:
            continue
        nat = statistics.median(data[("native", name)])
        cells = []
        for rt in order:
            vals = data.get((rt, name), [])
            if not vals:
                cells.append("-")
                continue
            med = statistics.median(vals)
            spread = f" ({min(vals):.3g}-{max(vals):.3g})" if len(vals) > 1 else ""
            if rt == "native":
                cells.append(f"{med:.3g} {unit}{spread}")
                continue
            # Ratio as a cost: > 1 means the container is slower. The best rounds'
            # ratio is the one least disturbed by other load on a shared machine.
            cost = nat / med if higher else med / nat
            nat_vals = data[("native", name)]
            best = max(nat_vals) / max(vals) if higher else min(vals) / min(nat_vals)
            mark = "" if cost <= target else " **miss**"
            if mark:
                misses.append((rt, label, cost, target))
            cells.append(f"{med:.3g}{spread} = {cost:.3f}x{mark}, best {best:.3f}x")
        print(f"| {label} ({unit}) | " + " | ".join(cells) + " |")
    print(
        f"\nMedian of {rounds} rounds (range in brackets); the ratio is the container's cost "
        "against native (time over native time, native bandwidth over bandwidth): "
        "1.000x is equal, targets 1.05x for the transport and 1.03x for Brunel; "
        "\"best\" compares the best round of each (least disturbed by other load)."
    )
    print("\nConditions:\n\n```text")
    print(open(conditions).read().rstrip())
    print("```")
    if misses:
        print("\nMissed targets:")
        for rt, label, cost, target in misses:
            print(f"- {rt}: {label} {cost:.3f}x (target {target:.2f}x)")


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] == "parse":
        parse(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) == 6 else None)
    elif len(sys.argv) == 5 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
