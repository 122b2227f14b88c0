#!/usr/bin/env python3
"""Prints the JSON lines of benches/brunel/run.sh as a table."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ref = {r["case"]: r for r in rows if r["sim"].startswith("hpc-rs")}
print(f"{'case':<18} {'simulator':<24} {'ranks':>5} {'spikes':>9} {'rate Hz':>7} {'build s':>7}"
      f" {'sim s':>7} {'sim CPU-s':>9} {'comm s':>6} {'RTF':>6} {'spikes/s':>10} {'B/syn':>6}"
      f" {'RSS/syn':>7} {'ours faster':>11}")
for r in rows:
    sim_s = r["simulate_s"]
    cpu = r.get("simulate_cpu_s")
    ours = ref.get(r["case"]) if r["ranks"] == 1 else None
    speed = ""
    if ours and not r["sim"].startswith("hpc-rs"):
        base = cpu if cpu is not None else sim_s
        speed = f"{base / ours['simulate_cpu_s']:.1f}x CPU" if cpu else f"{sim_s / ours['simulate_s']:.1f}x wall"
    fmt = lambda v, f: (f % v) if v is not None else "-"  # noqa: E731
    print(f"{r['case']:<18} {r['sim']:<24} {r['ranks']:>5} {r['spikes']:>9} {r['rate_hz']:>7.2f}"
          f" {fmt(r.get('build_s'), '%7.2f'):>7} {sim_s:>7.2f} {fmt(cpu, '%9.2f'):>9}"
          f" {fmt(r.get('communicate_s'), '%6.2f'):>6} {sim_s:>6.2f} {r['spikes'] / sim_s:>10.0f}"
          f" {fmt(r.get('bytes_per_synapse'), '%6.2f'):>6} {fmt(r.get('rss_per_synapse'), '%7.1f'):>7} {speed:>11}")
print("RTF = real-time factor (wall / biological time, 1 s simulated); B/syn = bytes of connectivity per"
      " synapse; RSS/syn = peak resident memory per synapse (whole process, all ranks).")
