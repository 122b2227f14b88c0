#!/usr/bin/env bash
# Compares hpc-spiking's stdp_pl_synapse_hom with NEST 3.10's weight by weight
# (a benchmark script, not a CI step): 894 synapses between parrot neurons
# (pairs at every lag from -10 to +10 ms, bursts, 4 s random trains with NEST's
# own test's hand-placed sequence, five parameter sets, delays 0.1 to 1.5 ms,
# resolution 0.1 ms), the weight after every presynaptic spike from NEST's
# weight_recorder against the `stdp_trace` example's, to 1e-12 relative; then
# iaf_psc_alpha (iaf_psc_alpha_vs_nest.py): 12 neurons (hpc_benchmark's, NEST's
# defaults, tau_syn = tau_m, a constant current) under 2 s of random input, V_m
# at every step against the `alpha_trace` example's to 1e-12 mV, spikes equal.
#
#   crates/hpc-spiking/validate/stdp_vs_nest.sh            # ~30 s once NEST is installed
#   crates/hpc-spiking/validate/stdp_vs_nest.sh --keep DIR # keep the trains and both weights
#
# NEST (3.10) comes, through benches/nest-python.sh, from PyPI into a virtual environment at $BRUNEL_VENV (default
# ~/.cache/hpc-rs/brunel-venv, shared with the brunel and microcircuit
# examples), unless $PYTHON already imports nest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
py=$("$root/benches/nest-python.sh")
# A relative $CARGO_TARGET_DIR is the caller's (cargo, run from the root below,
# built into ROOT/DIR while the binary was looked for in the caller's DIR).
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
export CARGO_TARGET_DIR=$target
(cd "$root" && cargo build -q --release -p hpc-spiking --example stdp_trace --example alpha_trace)
status=0
"$py" "$here/stdp_vs_nest.py" --stdp-trace "$target/release/examples/stdp_trace" "$@" || status=1
"$py" "$here/iaf_psc_alpha_vs_nest.py" --alpha-trace "$target/release/examples/alpha_trace" || status=1
exit $status
