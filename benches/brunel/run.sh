#!/usr/bin/env bash
# Brunel (2000) network, 1 s of biological time: the brunel example beside NEST 3.10
# (brunel_delta_nest.py parameters, one thread, no MPI) and, when installed, Brian2
# C++ standalone, run here and now, printed in the field's terms.
#
#   benches/brunel/run.sh                 # order 2500 (12,500 neurons, 15.6 M synapses)
#   FULL=1 benches/brunel/run.sh          # + NEST at order 10000 (CE 1000, CI 250)
#   BRIAN2=1 benches/brunel/run.sh        # + Brian2 (compiles for about a minute)
#
# Python with nest-simulator (and brian2) is taken from $PYTHON, else from the
# virtual environment that examples/brunel/validate.sh creates ($BRUNEL_VENV).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# A relative $CARGO_TARGET_DIR is the caller's: cargo builds from the root.
target=${CARGO_TARGET_DIR:-$root/target}
case $target in /*) ;; *) target=$PWD/$target ;; esac
export CARGO_TARGET_DIR=$target
v_reset=${V_RESET:-0}
py=${PYTHON:-python3}
if ! "$py" -c "import nest" >/dev/null 2>&1; then
    py=${BRUNEL_VENV:-$HOME/.cache/hpc-rs/brunel-venv}/bin/python
fi
(cd "$root" && cargo build -q --release -p hpc-example-brunel -p hpc-cli)
brunel=$target/release/brunel
hpc=$target/release/hpc
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

ours() { # label, extra args...
    local label=$1; shift
    local out=$results/$label
    "$@" --v-reset "$v_reset" --out "$out" --quiet --no-plot >/dev/null
    python3 - "$label" "$out/summary.json" >>"$results/all.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[2]))
print(json.dumps({"case": sys.argv[1], "sim": "hpc-rs brunel", "ranks": s["ranks"],
  "neurons": s["neurons"], "synapses": s["synapses"], "spikes": s["stats"]["spikes"],
  "rate_hz": s["stats"]["rate_hz"], "build_s": s["build_s"], "simulate_s": s["simulate_s"],
  "simulate_cpu_s": s["simulate_cpu_s"], "communicate_s": s["communicate_s"],
  "bytes_per_synapse": s["bytes_per_synapse"],
  "rss_per_synapse": sum(s["peak_rss_bytes"]) / s["synapses"]}))
PY
}

echo "running the brunel example ..." >&2
ours "order2500" "$brunel" --order 2500
ours "order10000" "$brunel" --order 10000 --ce 1000 --ci 250
ours "order2500-2ranks" "$hpc" run -n 2 -- "$brunel" --order 2500
if "$py" -c "import nest" >/dev/null 2>&1; then
    nest() { # label, args...
        local label=$1; shift
        echo "running NEST $label ..." >&2
        "$py" "$root/examples/brunel/tools/nest_brunel.py" --no-record --v-reset "$v_reset" "$@" 2>/dev/null \
            | tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); d['case']='$label'; d['sim']=d.pop('simulator'); d['ranks']=1; d['rss_per_synapse']=d['peak_rss_mib']*2**20/d['synapses']; print(json.dumps(d))" \
            >>"$results/all.jsonl"
    }
    nest "order2500" --order 2500
    if [ "${FULL:-0}" = 1 ]; then nest "order10000" --order 10000 --ce 1000 --ci 250; fi
else
    echo "NEST not found (pip install nest-simulator, or run examples/brunel/validate.sh once)" >&2
fi
if [ "${BRIAN2:-0}" = 1 ] && "$py" -c "import brian2" >/dev/null 2>&1; then
    echo "running Brian2 (C++ standalone, compiling) ..." >&2
    "$py" "$here/brian2_brunel.py" --order 2500 --v-reset "$v_reset" 2>/dev/null | tail -1 \
        | python3 -c "import json,sys; d=json.load(sys.stdin); d['case']='order2500'; d['sim']=d.pop('simulator'); d['ranks']=1; print(json.dumps(d))" \
        >>"$results/all.jsonl"
fi
python3 "$here/report.py" "$results/all.jsonl"
