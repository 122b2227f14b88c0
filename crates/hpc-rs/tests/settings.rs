//! The settings `init` refuses before the job is joined are said as what they
//! are: a trace folder, an engine or a variable's bytes are no part of the
//! bootstrap (part E of pass 19: "bootstrap failed: HPC_TRACE=…").

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;

/// The process's variables, which every test here clears and sets: held for
/// the whole test. Run as threads of one process (`cargo test`), a test's
/// variables were cleared by another while it ran (the proxy's test failed 1
/// time in 4: its board variable gone, `init_with` said `Ok`).
fn own_env() -> std::sync::MutexGuard<'static, ()> {
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = ENV.lock().unwrap_or_else(|p| p.into_inner());
    for v in hpc_env::ALL {
        std::env::remove_var(v.name);
    }
    guard
}

/// Each refused setting, one after the other in one process (the variables are
/// the process's): `Error::InvalidArgument` naming the variable, not
/// `Error::Bootstrap`'s "bootstrap failed".
#[test]
fn settings_refused_before_the_job_is_joined_are_not_called_a_bootstrap() {
    let _env = own_env();
    let mut cases: Vec<(&str, &OsStr, &str)> = vec![
        // A folder under a character device: it cannot be made.
        (hpc_env::TRACE, OsStr::new("/dev/null/trace"), "HPC_TRACE="),
        (hpc_env::LOG, OsStr::from_bytes(b"\xff"), "HPC_LOG="),
    ];
    if cfg!(feature = "collectives") {
        cases.push((hpc_env::ENGINE, OsStr::new("turbo"), "HPC_ENGINE="));
    }
    for (name, value, named) in cases {
        std::env::set_var(name, value);
        let Err(e) = hpc_rs::init() else {
            panic!("{name} taken")
        };
        std::env::remove_var(name);
        let text = e.to_string();
        assert!(
            matches!(e, hpc_rs::Error::InvalidArgument(_)),
            "{name}: {e:?}"
        );
        assert!(text.contains(named), "{name}: {text}");
        assert!(!text.contains("bootstrap"), "{name}: {text}");
    }
}

/// `Options { threads: Some(0) }`, the application's own argument, was taken:
/// the plan failed behind a warning ("cannot plan this rank's placement",
/// unseen without a subscriber) and `init_with` said `Ok` with the rank
/// unplaced and unbound (part E of pass 19). It is refused naming the
/// option; `Some(1)` still plans.
#[test]
fn zero_threads_asked_by_the_application_is_an_error() {
    let _env = own_env();
    let options = |threads| hpc_rs::Options {
        threads,
        bind: Some(false),
        no_subscriber: true,
        ..Default::default()
    };
    let Err(e) = hpc_rs::init_with(options(Some(0))) else {
        panic!("0 threads taken")
    };
    assert!(matches!(e, hpc_rs::Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("Options::threads = Some(0)"), "{e}");
    #[cfg(feature = "topology")]
    {
        let ctx = hpc_rs::init_with(options(Some(1))).unwrap();
        assert!(ctx.placement.is_some());
    }
}

/// A process started to be the node's collectives proxy whose serving fails
/// (its board cannot be opened) said "bootstrap failed: serving as the
/// collectives proxy: …", though nothing of the job's bootstrap had run (pass
/// 19's leftover). It is `Error::Proxy`, said as the proxy's failure.
#[cfg(feature = "collectives")]
#[test]
fn a_proxy_that_cannot_serve_is_not_called_a_bootstrap() {
    let _env = own_env();
    // A board under a character device: it cannot be made or opened.
    std::env::set_var(hpc_env::COLL_PROXY_BOARD, "/dev/null/board");
    std::env::set_var(hpc_env::COLL_PROXY_SLOTS, "2");
    let Err(e) = hpc_rs::init_with(hpc_rs::Options {
        bind: Some(false),
        no_subscriber: true,
        ..Default::default()
    }) else {
        panic!("served from a board that cannot be opened")
    };
    assert!(matches!(e, hpc_rs::Error::Proxy(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("serving as the node's collectives proxy failed: ")
            && !text.contains("bootstrap"),
        "{text}"
    );
}

/// `Options { threads: Some(usize::MAX) }` and `progress: usize::MAX` were
/// `Ok`, the rank unplaced and unbound behind the warning "cannot plan this
/// rank's placement" (pass 19's leftover). Counts beyond `MAX_THREADS` are
/// refused naming the field; `MAX_THREADS` itself, more than this machine
/// has, is still `Ok` (the plan's warnings: a plan a machine cannot fully
/// give is warned about by design).
#[test]
fn counts_no_machine_has_are_an_error() {
    let _env = own_env();
    let options = |threads, progress| hpc_rs::Options {
        threads,
        progress,
        bind: Some(false),
        no_subscriber: true,
    };
    for (o, named) in [
        (
            options(Some(usize::MAX), 0),
            "Options::threads = Some(18446744073709551615)",
        ),
        (
            options(Some(hpc_rs::MAX_THREADS + 1), 0),
            "Options::threads = Some(65537)",
        ),
        (
            options(None, usize::MAX),
            "Options::progress = (18446744073709551615)",
        ),
    ] {
        let Err(e) = hpc_rs::init_with(o) else {
            panic!("{named} taken")
        };
        assert!(matches!(e, hpc_rs::Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains(named), "{e}");
    }
    hpc_rs::init_with(options(Some(hpc_rs::MAX_THREADS), 0)).unwrap();
}
