#!/usr/bin/env bash
# Validates the brunel example against NEST 3.10 (brunel_delta_nest.py, single
# process): mean rate within 5 % and CV of ISIs within 0.05, at order 250
# (CE 100, CI 25) and order 2500, with V_reset 0 (NEST's example) and 10 (paper).
#
#   examples/brunel/validate.sh           # all cases (~2 min, NEST dominates)
#   examples/brunel/validate.sh --quick   # the small network only
#   examples/brunel/validate.sh --quick --keep DIR   # and keep each case's report.html
#
# Needs Python 3 with pip. NEST (3.10) comes, through benches/nest-python.sh, from PyPI (`pip install nest-simulator`) into
# a virtual environment at $BRUNEL_VENV (default ~/.cache/hpc-rs/brunel-venv),
# unless $PYTHON already imports nest.
exec "$(dirname "$0")/../../benches/validate-example.sh" examples/brunel hpc-example-brunel brunel --brunel "$@"
