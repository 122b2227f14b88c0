#!/bin/sh
# Mutation testing of the code whose mistakes would be silent: the reduction
# kernels, the bootstrap wire format, checkpoints and the collective schedules.
# Slow (one build and test run per mutant), so not a CI step; run it by hand after
# changing these files. Results and counts are recorded in benches/mutants.md.
#
# Usage: benches/mutants.sh [STEP...]   (default: kernels op wire checkpoint)
#   list         count the mutants cargo-mutants finds in each file
#   kernels      the operators inside op.rs's kernel macros (cargo-mutants does not
#                look inside macro_rules! bodies): each is swapped for another in a
#                copy of the tree and tests/op_reference.rs must fail (another
#                nextest filter in KERNEL_TESTS, e.g. 'not(binary(exhaustive))')
#   op           cargo-mutants over crates/hpc-collectives/src/op.rs
#   wire         cargo-mutants over crates/hpc-runtime/src/wire.rs (library tests
#                and tests/wire.rs)
#   checkpoint   cargo-mutants over crates/hpc-checkpoint
#   interp sim   cargo-mutants over the rest of hpc-collectives, file by file
#   collective   the same over collective.rs (in place, see below)
#   schedule kind
#                the same over schedule.rs (the schedule's types, its builder and
#                a rank's own copies; the interpreter's and simulator's tests
#                too) and kind.rs (collective and algorithm names), in place
#   sim_in_place sim.rs in place, with the fast tests (as `sim`, quicker)
#   allreduce reduce_scatter alltoall allgather bcast reduce gather scatter
#   barrier algo_mod
#                the same over one file of algo/ each (algo_mod: algo/mod.rs),
#                in the order of mutants.md (the algorithms whose mistakes give
#                wrong data silently first); their tests add tests/exhaustive.rs's
#                checks up to nine ranks (seconds)
#   algo         all of algo/ in one run (about 800 mutants: hours), e.g. sampled
#                with cargo-mutants' shards spread evenly (its default shards are
#                consecutive slices):
#                MUTANTS_ARGS='--shard 0/40 --sharding round-robin' benches/mutants.sh algo
#
# Needs cargo-mutants (`cargo install cargo-mutants --locked`) and cargo-nextest.
# The collective and algo steps mutate this tree in place (cargo-mutants'
# --in-place; it restores each file after its mutant): run them in a checkout
# nobody edits or builds in meanwhile (a copy of the work tree), where the
# target dir is built once and each mutant is an incremental rebuild of
# hpc-collectives and of the test targets named in its step. MUTANTS_COPY=1
# makes them work in copies of the tree instead, as the other steps do (one
# job each, the dependencies built again in every copy). Every run writes
# mutants.out/<step>/ (git-ignored): missed.txt, caught.txt, unviable.txt,
# timeout.txt. Extra cargo-mutants options go in MUTANTS_ARGS, e.g.
# MUTANTS_ARGS='--re wrapping' benches/mutants.sh op.
#
# With MUTANTS_PAUSE=FILE, the file FILE existing stops the run's processes
# (SIGSTOP to cargo-mutants' process group) until it is gone (a shared machine
# where someone measures); a disk with less than MUTANTS_MIN_FREE_MB (2048)
# free stops them too.
set -eu
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT="$ROOT/mutants.out"
STEPS="${*:-kernels op wire checkpoint}"
mkdir -p "$OUT"

PAUSE="${MUTANTS_PAUSE:-$OUT/.no-pause-file-given/pause}"

# Runs "$@" at the lowest priority in a process group of its own, stopped
# (SIGSTOP) while the file $PAUSE exists and continued when it is gone; returns
# its exit status. A test stopped past cargo-mutants' timeout is reported as a
# timeout: re-run those after a pause.
paused_run() {
    # A mutant that turns a loop's `mask *= 2` into `/=` loops for ever adding
    # steps to a schedule: its memory, not only its time, must be bounded (the
    # test fails on the failed allocation instead of taking the machine's
    # memory until the timeout).
    (ulimit -v "${MUTANTS_MEMORY_KB:-6000000}" && exec nice -n 19 setsid "$@") &
    pid=$!
    stopped=0
    while kill -0 "$pid" 2>/dev/null; do
        # A full disk fails builds (counted as unviable) and, in place, the
        # restore of the mutated file (left empty): stop for it as well.
        free=$(df -Pk . | awk 'NR == 2 { print int($4 / 1024) }')
        if { [ -e "$PAUSE" ] || [ "$free" -lt "${MUTANTS_MIN_FREE_MB:-2048}" ]; } && [ $stopped = 0 ]; then
            echo "== paused ($PAUSE exists, or $free MiB free)" >&2
            kill -STOP -- "-$pid" 2>/dev/null || true
            stopped=1
        elif [ ! -e "$PAUSE" ] && [ "$free" -ge "${MUTANTS_MIN_FREE_MB:-2048}" ] && [ $stopped = 1 ]; then
            echo "== continued" >&2
            kill -CONT -- "-$pid" 2>/dev/null || true
            stopped=0
        fi
        sleep 5
    done
    wait "$pid"
}

# cargo mutants over one file of one package; $3... go to the test tool.
mutate() { # step package file [test-tool args...]
    step=$1 pkg=$2 file=$3
    shift 3
    echo "== $step: $file"
    # cargo-mutants exits 2 when mutants are missed, 3 on timeouts: both are
    # results, reported below, not failures of this script.
    # MUTANTS_IN_PLACE=1: in this tree (no copy, no build of the dependencies
    # per run; nobody may edit or build here meanwhile), without the baseline.
    where="-j 1"
    [ "${MUTANTS_IN_PLACE:-0}" = 1 ] && where="--in-place --baseline=skip"
    # shellcheck disable=SC2086
    paused_run cargo mutants -p "$pkg" --file "$file" $where --test-tool nextest \
        --output "$OUT/$step" ${MUTANTS_ARGS:-} -- "$@" || [ $? -le 3 ]
    summary "$step"
}

# The same for the schedules, in place unless MUTANTS_COPY=1: no baseline run
# (the tests pass on the unmutated tree; see mutants.md), a timeout for a hung
# test, and nextest stopping at the first failure without waiting for the
# tests still running. TARGETS are cargo's target options (`--test=api`, one
# word each, to both the build and the test run); the rest go to nextest.
mutate_in_place() { # step file TARGETS [test-tool args...]
    step=$1 file=$2 targets=$3
    shift 3
    # MUTANTS_TAG names the output of one of several runs of a step (a shard).
    out="$OUT/$step${MUTANTS_TAG:+-$MUTANTS_TAG}"
    # No debug info for hpc-collectives and its tests (the dependencies keep
    # theirs, so they are not rebuilt): each mutant compiles and links less.
    cargo_args="--cargo-arg=--config=profile.test.package.hpc-collectives.debug=0"
    for t in $targets; do cargo_args="$cargo_args --cargo-arg=$t"; done
    where=--in-place
    [ "${MUTANTS_COPY:-0}" = 1 ] && where="-j 1"
    echo "== $step: $file"
    # shellcheck disable=SC2086
    paused_run cargo mutants -p hpc-collectives --file "$file" $where --test-tool nextest \
        --baseline=skip --timeout "${MUTANTS_TIMEOUT:-90}" --build-timeout 600 $cargo_args \
        --output "$out" ${MUTANTS_ARGS:-} -- --max-fail 1:immediate "$@" || [ $? -le 3 ]
    summary "$step${MUTANTS_TAG:+-$MUTANTS_TAG}"
}

summary() { # step
    d="$OUT/$1/mutants.out"
    for k in caught missed unviable timeout; do
        printf '%s %s  ' "$k" "$({ cat "$d/$k.txt" 2>/dev/null || true; } | grep -c .)"
    done
    echo
    if [ -s "$d/missed.txt" ]; then
        echo "missed:"
        sed 's/^/  /' "$d/missed.txt"
    fi
}

# Hand-written mutants of the kernel macros, one per line as
# `occurrence;from;to`: the occurrence-th line of op.rs containing `from` gets
# `from` replaced by `to`.
KERNEL_MUTANTS='
1;a.wrapping_add(b);a.wrapping_sub(b)
1;a.wrapping_add(b);a.saturating_add(b)
1;a.wrapping_mul(b);a.wrapping_add(b)
1;a.wrapping_mul(b);a.saturating_mul(b)
1;|a, b| a.min(b);|a, b| a.max(b)
1;|a, b| a.max(b);|a, b| a.min(b)
1;|a, b| a & b;|a, b| a | b
1;|a, b| a | b;|a, b| a ^ b
1;|a, b| a ^ b;|a, b| a & b
1;|a, b| a + b;|a, b| a - b
1;|a, b| a * b;|a, b| a + b
2;|a, b| a.min(b);|a, b| a.max(b)
2;|a, b| a.max(b);|a, b| a.min(b)
2;|a, b| a.min(b);|a, b| if a < b { a } else { b }
2;|a, b| a.max(b);|a, b| if a > b { a } else { b }
1;a.to_f32() + b.to_f32();a.to_f32() - b.to_f32()
1;a.to_f32() * b.to_f32();a.to_f32() + b.to_f32()
1;a.to_f32().min(b.to_f32());a.to_f32().max(b.to_f32())
1;a.to_f32().max(b.to_f32());a.to_f32().min(b.to_f32())
1;int_kernel!(i8,;int_kernel!(u8,
1;int_kernel!(i16,;int_kernel!(u16,
1;int_kernel!(i32,;int_kernel!(u32,
1;int_kernel!(i64,;int_kernel!(u64,
1;int_kernel!(u8,;int_kernel!(i8,
1;int_kernel!(u16,;int_kernel!(i16,
1;int_kernel!(u32,;int_kernel!(i32,
1;int_kernel!(u64,;int_kernel!(i64,
1;half_kernel!(f16,;half_kernel!(bf16,
1;half_kernel!(bf16,;half_kernel!(f16,
'

kernels() {
    echo "== kernels: operators inside op.rs's macros"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    tar --exclude=./target --exclude=./fuzz/target --exclude=./mutants.out --exclude=./.git -cf - . | tar -xf - -C "$tmp"
    src="$tmp/crates/hpc-collectives/src/op.rs"
    cp "$src" "$tmp/op.rs.orig"
    export CARGO_TARGET_DIR="$ROOT/target/mutants-kernels"
    log="$OUT/kernels.txt"
    tests="${KERNEL_TESTS:-binary(op_reference)}"
    run() { (cd "$tmp" && cargo nextest run -p hpc-collectives -E "$tests" "$@" >/dev/null 2>&1); }
    : >"$log"
    run || {
        echo "the unmutated tree fails the tests $tests" >&2
        exit 1
    }
    caught=0 missed=0 unviable=0
    while IFS=';' read -r nth from to; do
        [ -n "$nth" ] || continue
        awk -v n="$nth" -v from="$from" -v to="$to" '{
            i = index($0, from)
            if (i > 0 && ++c == n) $0 = substr($0, 1, i - 1) to substr($0, i + length(from))
            print
        }' "$tmp/op.rs.orig" >"$src"
        if cmp -s "$src" "$tmp/op.rs.orig"; then
            echo "mutant not applied (op.rs changed?): #$nth $from" >&2
            exit 1
        fi
        what="#$nth '$from' -> '$to'"
        if ! run --no-run; then
            unviable=$((unviable + 1))
            echo "unviable $what" | tee -a "$log"
        elif run; then
            missed=$((missed + 1))
            echo "MISSED   $what" | tee -a "$log"
        else
            caught=$((caught + 1))
            echo "caught   $what" | tee -a "$log"
        fi
    done <<EOF
$KERNEL_MUTANTS
EOF
    echo "kernels: caught $caught  missed $missed  unviable $unviable" | tee -a "$log"
    rm -rf "$tmp"
    trap - EXIT
    unset CARGO_TARGET_DIR
}

C=crates/hpc-collectives/src
# hpc-collectives' tests without tests/exhaustive.rs (every collective, algorithm
# and rank count: minutes in a debug build, too slow to run once per mutant).
FAST="-E not(binary(exhaustive))"
# For the schedules: tests/exhaustive.rs's checks up to nine ranks (every
# algorithm against the reference, seconds) and its round and traffic counts,
# without its two tests over every rank count up to 64, nor tests/interp.rs's
# run of every algorithm through the interpreter (a third of a minute), which
# compares it with the simulator, not with the reference.
ALGO="-E not((binary(exhaustive)&test(/every_rank_count\$/))|test(/out_of_order_and_in_pieces\$/))"
# The test targets that call the algorithms (only these are rebuilt for each
# mutant): api.rs, exhaustive.rs, properties.rs. interp.rs's other tests run
# hand-made schedules and one single-rank allgather (also in exhaustive.rs);
# sim_checks.rs and op_reference.rs call no algorithm, nor do the library's
# unit tests but algo/mod.rs's (helpers), which algo_mod adds; show_schedule.rs
# runs the example, whose refusals come from its own argument checks and from
# Collective's validation and buffer sizes, which api.rs checks, and
# exhaustive.rs compares with every schedule's buffers.
SCHED="--test=api --test=exhaustive --test=properties"
for step in $STEPS; do
    case "$step" in
    list)
        for f in $C/op.rs $C/interp.rs $C/sim.rs $C/collective.rs $C/schedule.rs $C/kind.rs \
            $C/algo/*.rs crates/hpc-runtime/src/wire.rs crates/hpc-checkpoint/src/*.rs; do
            printf '%5d %s\n' "$(cargo mutants --list --file "$f" | grep -c .)" "$f"
        done
        ;;
    kernels) kernels ;;
    op) mutate op hpc-collectives $C/op.rs $FAST ;;
    wire) mutate wire hpc-runtime crates/hpc-runtime/src/wire.rs -E 'kind(lib) | binary(wire)' ;;
    checkpoint) mutate checkpoint hpc-checkpoint 'crates/hpc-checkpoint/src/*.rs' ;;
    interp) mutate interp hpc-collectives $C/interp.rs $FAST ;;
    sim) mutate sim hpc-collectives $C/sim.rs $FAST ;;
    collective) mutate_in_place collective $C/collective.rs "$SCHED" $ALGO ;;
    schedule) mutate_in_place schedule $C/schedule.rs "--lib $SCHED --test=interp --test=sim_checks" $ALGO ;;
    kind) mutate_in_place kind $C/kind.rs "--lib $SCHED --test=show_schedule" $ALGO ;;
    sim_in_place) mutate_in_place sim $C/sim.rs "--lib $SCHED --test=interp --test=sim_checks" $ALGO ;;
    allreduce | reduce_scatter | alltoall | allgather | bcast | reduce | gather | scatter | barrier)
        mutate_in_place "$step" "$C/algo/$step.rs" "$SCHED" $ALGO
        ;;
    algo_mod) mutate_in_place algo_mod $C/algo/mod.rs "--lib $SCHED" $ALGO ;;
    algo) mutate_in_place algo "$C/algo/*.rs" "--lib $SCHED" $ALGO ;;
    *)
        echo "unknown step $step (see the header of $0)" >&2
        exit 2
        ;;
    esac
done
