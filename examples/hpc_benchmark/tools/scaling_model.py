#!/usr/bin/env python3
"""The memory and exchange model of hpc_benchmark under weak scaling (the book's
plasticity chapter, "The model"): s units of scale (11,250 s neurons) per rank,
P ranks of h threads, printed as the chapter's table, for the layout before
(each thread's rows keep their sources' traces, 24 bytes a row, and its own
excitatory neurons' traces) and after (8 bytes a row; the traces once per
rank, for the excitatory sources with a row on any thread or a neuron on the
rank, with an index over the excitatory sources).

    examples/hpc_benchmark/tools/scaling_model.py                  # h = 1 and 8, nu = 16.4 Hz
    examples/hpc_benchmark/tools/scaling_model.py --threads 1 8 64 --ranks 1 100 10000
    examples/hpc_benchmark/tools/scaling_model.py --scale 4 --threads 64 --ranks 8 128

Arithmetic only: every constant is the chapter's (measured bytes a synapse,
the memory estimate's bytes a neuron, the index's quarter of a byte a source).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "crates", "hpc-spiking", "python"))
import hpc_spikes  # noqa: E402

K_E, K_I = 9000, 2250          # excitatory and inhibitory inputs of a neuron
UNIT = 11250                   # neurons a unit of scale
M_SYN = 7.14                   # bytes a synapse, mean rank (measured at scale 1)
M_SYN_E = 8.40                 # bytes a synapse, a rank of excitatory neurons
M_NEURON = 512                 # bytes a neuron beside its synapses
INDEX = 0.25                   # bytes a source of a SourceIndex
MEMO = 32 * 1024               # a shard's memo of exp (DELIVERY_MEMO_BYTES)
TRACE = 16                     # K+ and t_last
D_S = 1.5e-3                   # exchange interval (s)
MAX_NEURONS = 1 << 27          # the most neurons hpc_benchmark's ids hold (params.rs)
MAX_RANKS = 1 << 32
MAX_THREADS = 4096             # the most threads a rank runs (hpc_spiking::run)
MAX_RATE = 2000.0              # 1 / t_ref (0.5 ms): no neuron fires faster


def drawn(pool, draws):
    """The chance that a source is drawn in `draws` uniform draws from `pool`."""
    return -math.expm1(draws * math.log1p(-1.0 / pool)) if pool > 0 and draws > 0 else 0.0


def rank(p, h, nu, scale):
    N_R = UNIT * scale          # neurons a rank
    n = N_R * p
    ne, ni = 0.8 * n, 0.2 * n
    n_e = N_R                   # an excitatory rank: every neuron excitatory
    sh = n_e / h                # neurons a shard
    r_e = ne * drawn(ne, K_E * sh)          # rows on a shard
    r_s = ni * drawn(ni, K_I * sh)          # static lists (inhibitory sources)
    r_e_rank = ne * drawn(ne, K_E * n_e)    # rows on any shard of the rank
    own_absent = n_e * (1 - drawn(ne, K_E * (n_e - 1)))
    # Inhibitory rank: static lists of every source, no rows.
    r_s_i = ne * drawn(ne, K_E * N_R / h) + ni * drawn(ni, K_I * N_R / h)
    idx = INDEX * 1.8 * n                   # two indexes a shard: E sources and all
    before_sh = idx + 24 * r_e + 4 * r_s + TRACE * sh + MEMO
    after_sh = idx + 8 * r_e + 4 * r_s + MEMO
    after_rank = INDEX * ne + TRACE * (r_e_rank + own_absent) + TRACE * nu * D_S * n
    inh_sh = idx + 4 * r_s_i
    syn_e = M_SYN_E * (K_E + K_I) * N_R
    syn_i = (M_SYN * 1.0 - 0.8 * M_SYN_E) / 0.2 * (K_E + K_I) * N_R
    neurons = M_NEURON * N_R
    exc_before = syn_e + neurons + h * before_sh
    exc_after = syn_e + neurons + h * after_sh + after_rank
    inh = syn_i + neurons + h * inh_sh
    return dict(n=n, syn=M_SYN * (K_E + K_I) * N_R, syn_e=syn_e, r_e=r_e, r_e_rank=r_e_rank,
                ne=ne, before_sh=before_sh, after_sh=after_sh, after_rank=after_rank,
                exc_before=exc_before, exc_after=exc_after, inh=inh,
                mean_before=0.8 * exc_before + 0.2 * inh, mean_after=0.8 * exc_after + 0.2 * inh,
                b=4 * nu * D_S * n, per_s=4 * nu * n)


def size(x):
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= f:
            return f"{x / f:.3g} {unit}" if x / f < 100 else f"{x / f:.0f} {unit}"
    return f"{x:.0f} B"


def short(x):
    """x as text of at most 24 characters (a 300-digit count is not echoed whole)."""
    t = str(x)
    return t if len(t) <= 24 else f"{t[:12]}...({len(t)} characters)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 10, 100, 1000, 10000])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--rate", type=float, default=16.4, help="firing rate (Hz)")
    ap.add_argument("--scale", type=float, default=1.0, help="units of scale a rank")
    a = ap.parse_args()
    # Checked before the table: a zero divides by zero, NaN passes every
    # comparison (so finite first), a negative or huge value prints nonsense.
    bad_ranks = [p for p in a.ranks if not 1 <= p <= MAX_RANKS]
    if bad_ranks:
        ap.error(f"--ranks {short(bad_ranks[0])}: a rank count is a whole number from 1 to {MAX_RANKS}")
    bad_threads = [h for h in a.threads if not 1 <= h <= MAX_THREADS]
    if bad_threads:
        ap.error(f"--threads {short(bad_threads[0])}: a thread count is a whole number from 1 to "
                 f"{MAX_THREADS}")
    if not (math.isfinite(a.rate) and 0 <= a.rate <= MAX_RATE):
        ap.error(f"--rate {a.rate}: must be a finite number of Hz from 0 to {MAX_RATE:g} "
                 "(1 / t_ref)")
    top = MAX_NEURONS / UNIT
    if not (math.isfinite(a.scale) and 1 / UNIT <= a.scale <= top):
        ap.error(f"--scale {a.scale}: must be a finite number from 1/{UNIT} (a neuron a rank) "
                 f"to {top:.0f} ({MAX_NEURONS} neurons, hpc_benchmark's most)")
    lines = ["| ranks P | threads h | neurons N | rows a thread (present E sources; all threads of the rank) "
             "| beside the synapses, a thread, before / after | traces once per rank, after "
             "| excitatory rank, before / after | mean rank, before / after | B per exchange |",
             "|---:|---:|---:|---|---|---:|---|---|---:|"]
    for p in a.ranks:
        for h in a.threads:
            r = rank(p, h, a.rate, a.scale)
            lines.append(f"| {p:,} | {h} | {r['n']:,.0f} | {r['r_e'] / 1e6:.3g} M ({100 * r['r_e'] / r['ne']:.1f} %; "
                         f"{r['r_e_rank'] / 1e6:.3g} M) | {size(r['before_sh'])} / {size(r['after_sh'])} "
                         f"| {size(r['after_rank'])} | {size(r['exc_before'])} / {size(r['exc_after'])} "
                         f"| {size(r['mean_before'])} / {size(r['mean_after'])} | {size(r['b'])} |")
    # A full disk (> /dev/full) or a closed pipe: one line or status 141, no traceback.
    hpc_spikes.say("\n".join(lines), "scaling_model.py")


if __name__ == "__main__":
    main()
