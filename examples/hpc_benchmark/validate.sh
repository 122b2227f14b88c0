#!/usr/bin/env bash
# Validates the hpc_benchmark example against NEST 3.10 (the model built by
# tools/nest_hpc_benchmark.py), a benchmark rather than a CI step, at scale 1
# (50 ms warm-up + 250 ms), one thread each, seeds alternating ours / NEST:
#   layer 2: plasticity off (lambda 0), 3 seeds: our mean E rate within 10 % of
#            NEST's, or the exit status is 1;
#   layer 3: the plastic network, 5 seeds each: how many run away (rate above
#            3 x the engine's lambda-0 rate), rate, weight drift and SD per regime.
#
#   examples/hpc_benchmark/validate.sh                      # both layers (~25 min on 2 busy cores)
#   examples/hpc_benchmark/validate.sh --layers 2           # plasticity off only (~8 min)
#   examples/hpc_benchmark/validate.sh --results runs.jsonl # keep finished runs, resume
#   examples/hpc_benchmark/validate.sh --scale 0.2 --seeds-plastic 1 2 3
#   examples/hpc_benchmark/validate.sh --before OLD/hpc_benchmark   # an older build alternated too
#
# NEST needs about 5 GiB at scale 1 (ours about 1 GiB). NEST (3.10) comes,
# through benches/nest-python.sh, from PyPI into a virtual environment at
# $BRUNEL_VENV (default ~/.cache/hpc-rs/brunel-venv, shared with the other
# examples), unless $PYTHON already imports nest.
exec "$(dirname "$0")/../../benches/validate-example.sh" examples/hpc_benchmark hpc-example-hpc-benchmark hpc_benchmark --hpc-benchmark "$@"
