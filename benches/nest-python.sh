#!/usr/bin/env bash
# Prints the path of a Python that imports NEST 3.10 and numpy, installing them once.
#
#   py=$(benches/nest-python.sh)
#
# $PYTHON (default python3) when it already imports nest and numpy; otherwise the
# virtual environment at $BRUNEL_VENV (default ~/.cache/hpc-rs/brunel-venv), created
# with nest-simulator 3.10.0 from PyPI the first time. Every NEST comparison of the
# repository (examples/brunel/validate.sh, examples/microcircuit/validate.sh,
# examples/hpc_benchmark/validate.sh, crates/hpc-spiking/validate/stdp_vs_nest.sh)
# goes through it, so they all compare against the same NEST.
set -euo pipefail
py=${PYTHON:-python3}
if "$py" -c "import nest, numpy" >/dev/null 2>&1; then
    echo "$py"
    exit 0
fi
# A $PYTHON given but unusable (a typo, no NEST in it) was passed over without a
# word, for the virtual environment (NEST installed from PyPI the first time).
if [ -n "${PYTHON:-}" ]; then
    echo "nest-python.sh: PYTHON=$(printf '%q' "$PYTHON") does not import nest and numpy: using the virtual environment instead" >&2
fi
venv=${BRUNEL_VENV:-$HOME/.cache/hpc-rs/brunel-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import nest, numpy" >/dev/null 2>&1; then
    echo "creating $venv with nest-simulator 3.10 (once)" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q nest-simulator==3.10.0 "numpy<2.4" >&2
fi
echo "$venv/bin/python"
