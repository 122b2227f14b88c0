//! `hello` under Open MPI's `mpirun` with its default core binding (feature `mpi`).
//!
//! `hello` sets up no logging: `hpc_rs::init()` installs the subscriber, so the
//! warning that a launcher's binding leaves a rank's threads one core reaches the
//! user. Needs Open MPI's `mpirun.openmpi` (or `mpirun`). When it is missing the test
//! says so and passes, unless `HPC_REQUIRE_MPI=1` (set by `cargo xtask test`, which
//! installs it).
#![cfg(feature = "mpi")]

use std::process::{Command, Output};

const HELLO: &str = env!("CARGO_BIN_EXE_hello");

fn on(var: &str) -> bool {
    std::env::var(var).ok().as_deref() == Some("1")
}

fn mpirun() -> Option<String> {
    hpc_test_support::open_mpi_mpirun()
}

/// `mpirun -n 2 --oversubscribe [extra] PROGRAM ARGS` with the given environment, and
/// none of the `HPC_*` settings of the caller.
fn mpirun_2(mpirun: &str, extra: &[&str], program: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(mpirun);
    c.args(["-n", "2", "--oversubscribe"])
        .args(extra)
        .args(program)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    for v in hpc_env::ALL {
        c.env_remove(v.name);
    }
    c.envs(env.iter().copied()).output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The CPUs each rank may run on under `mpirun` with these options.
fn bindings(mpirun: &str, extra: &[&str]) -> Vec<String> {
    let o = mpirun_2(
        mpirun,
        extra,
        &["grep", "Cpus_allowed_list", "/proc/self/status"],
        &[],
    );
    let (so, se) = text(&o);
    assert!(o.status.success(), "{so}\n{se}");
    let mut v: Vec<String> = so
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    v.sort();
    v
}

#[test]
fn binding_warning_reaches_a_program_without_logging_setup() {
    let Some(m) = mpirun() else { return };
    // Open MPI binds each rank to one core by default when there are at least as many
    // cores as ranks (2 here); on a single-core machine it binds nothing.
    let bound = bindings(&m, &[]);
    let single = bound.iter().all(|c| !c.contains(['-', ',']));
    if !single {
        assert!(
            !on(hpc_env::REQUIRE_MPI),
            "Open MPI did not bind each rank to one core here ({bound:?}); \
             the test needs a machine with 2 cores or more"
        );
        eprintln!("mpirun does not bind each rank to one core here ({bound:?}): skipping");
        return;
    }

    // Two threads asked for, one core given: each rank warns, on its standard error,
    // with the advice for Open MPI, and still runs.
    let o = mpirun_2(&m, &[], &[HELLO], &[(hpc_env::THREADS, "2")]);
    let (so, se) = text(&o);
    assert!(o.status.success(), "{so}\n{se}");
    assert!(
        so.contains("allreduce: sum over ranks of (rank+1)^2 = 5"),
        "{so}"
    );
    assert!(so.contains("via MPI"), "not bootstrapped through MPI: {so}");
    let warnings: Vec<&str> = se
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("bound to a single core"))
        .collect();
    assert_eq!(warnings.len(), 2, "one warning per rank expected:\n{se}");
    // Tagged with the rank, as mpirun does not tag lines itself.
    for r in ["[0] ", "[1] "] {
        assert_eq!(
            warnings.iter().filter(|l| l.starts_with(r)).count(),
            1,
            "{r}:\n{se}"
        );
    }
    assert!(
        warnings
            .iter()
            .all(|l| l.contains("2 threads were requested") && l.contains("--bind-to none")),
        "{se}"
    );

    // HPC_LOG turns it off like any tracing filter.
    let o = mpirun_2(
        &m,
        &[],
        &[HELLO],
        &[(hpc_env::THREADS, "2"), (hpc_env::LOG, "error")],
    );
    let (so, se) = text(&o);
    assert!(o.status.success(), "{so}\n{se}");
    assert!(!se.contains("bound to a single core"), "{se}");

    // Without mpirun's binding there is nothing to warn about.
    let o = mpirun_2(
        &m,
        &["--bind-to", "none"],
        &[HELLO],
        &[(hpc_env::THREADS, "2")],
    );
    let (so, se) = text(&o);
    assert!(o.status.success(), "{so}\n{se}");
    assert!(!se.contains("bound to a single core"), "{se}");
}
