#!/usr/bin/env bash
# Validates the microcircuit example against NEST 3.10 (the Potjans_2014 model
# built by tools/nest_microcircuit.py): per population, the rate averaged over
# seeds within 10 % of NEST's and the mean CV of ISIs within 0.05, at
# N_scaling = K_scaling = 0.1 with Poisson input, 3 seeds, 0.5 s warm-up + 1 s.
#
#   examples/microcircuit/validate.sh                # 3 seeds (~3 min, NEST dominates)
#   examples/microcircuit/validate.sh --seeds 1 2    # other seeds
#   examples/microcircuit/validate.sh --keep DIR     # keep both simulators' spikes
#
# NEST (3.10) comes, through benches/nest-python.sh, from PyPI into a virtual environment at $BRUNEL_VENV (default
# ~/.cache/hpc-rs/brunel-venv, shared with the brunel example), unless $PYTHON
# already imports nest.
exec "$(dirname "$0")/../../benches/validate-example.sh" examples/microcircuit hpc-example-microcircuit microcircuit --microcircuit "$@"
