#!/usr/bin/env bash
# GPU verification of hpc-gpu (GPU collectives).
#
# Run from anywhere on a machine with an NVIDIA GPU and its driver:
#
#     bash benches/gpu/check.sh
#
# It builds `hpc` (hpc-cli) and the `gpu_check` example of hpc-gpu in release
# mode, runs the crate's unit tests, then:
#   1. one rank (backend auto: NCCL where libnccl loads): correctness of every
#      type (f32 f64 f16 bf16 i32) and op (sum prod min max), in and out of
#      place, sizes 1 .. 2^28 elements, against a float64 CPU reference with
#      NaN-poisoned outputs; bus bandwidth; reduction kernel vs device copy;
#   2. 2, 3 and 4 ranks on the one GPU through the native path
#      (`hpc run -n K`), same checks and bandwidth table.
# Nothing is downloaded except crates from crates.io; with CARGO_NET_OFFLINE
# set (registry cache carried or vendored) it builds with --offline.
# Exit status: 0 all passed, 2 no GPU, anything else a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "check.sh: no NVIDIA GPU or driver here (nvidia-smi -L failed); nothing to check" >&2
    exit 2
fi
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

OFFLINE=()
if [ -n "${CARGO_NET_OFFLINE:-}" ]; then OFFLINE=(--offline); fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target/gpu-check}"
MAX_LOG2="${GPU_CHECK_MAX_LOG2:-28}"

cargo build --release "${OFFLINE[@]}" -p hpc-cli -p hpc-gpu --example gpu_check
cargo test --release "${OFFLINE[@]}" -p hpc-gpu

HPC="$CARGO_TARGET_DIR/release/hpc"
CHECK="$CARGO_TARGET_DIR/release/examples/gpu_check"

echo "== 1 rank, backend auto"
timeout 240 "$CHECK" --backend auto --max-log2 "$MAX_LOG2"
for k in 2 3 4; do
    echo "== $k ranks on one GPU, native backend"
    timeout 240 "$HPC" run -n "$k" -- "$CHECK" --backend native --max-log2 "$MAX_LOG2"
done
echo "check.sh: all GPU checks passed"
