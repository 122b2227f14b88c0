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
# NEST comes from PyPI into a virtual environment at $BRUNEL_VENV (default
# ~/.cache/hpc-rs/brunel-venv, shared with the brunel example), unless $PYTHON
# already imports nest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${PYTHON:-python3}
if ! "$py" -c "import nest, numpy" >/dev/null 2>&1; then
    venv=${BRUNEL_VENV:-$HOME/.cache/hpc-rs/brunel-venv}
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import nest" >/dev/null 2>&1; then
        echo "creating $venv with nest-simulator 3.10 (once)" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q nest-simulator==3.10.0 "numpy<2.4"
    fi
    py=$venv/bin/python
fi
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build -q --release -p hpc-example-microcircuit)
exec "$py" "$here/tools/validate.py" --microcircuit "$target/release/microcircuit" "$@"
