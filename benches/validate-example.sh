#!/usr/bin/env bash
# Builds a spiking example (release) and runs its comparison with NEST: the
# example's tools/validate.py, under the Python of benches/nest-python.sh (NEST
# 3.10 and numpy), given the binary after FLAG, then the caller's arguments.
# What every examples/*/validate.sh does ($CARGO_TARGET_DIR is honoured):
#
#   benches/validate-example.sh DIR PACKAGE BINARY FLAG [ARGS...]
#   benches/validate-example.sh examples/brunel hpc-example-brunel brunel --brunel --quick
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$1 package=$2 binary=$3 flag=$4
shift 4
py=$("$root/benches/nest-python.sh")
# A relative $CARGO_TARGET_DIR is the caller's (cargo, run from the root below,
# built into ROOT/DIR while the binary was looked for in the caller's DIR).
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
export CARGO_TARGET_DIR=$target
(cd "$root" && cargo build -q --release -p "$package")
exec "$py" "$root/$dir/tools/validate.py" "$flag" "$target/release/$binary" "$@"
