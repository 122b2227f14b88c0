//! An example's binary (brunel, microcircuit) run as a user runs it, for the tests
//! of its output directory and its refusals: quiet, unpinned, without figures, into
//! an output directory the test names.
//!
//! ```no_run
//! use hpc_test_support::example;
//!
//! let out = hpc_test_support::tmpdir("my-example", "doc").join("out");
//! let model = ["--preset", "nest", "--order", "100"];
//! let o = example::command("target/debug/brunel", &model, &out, &["--t-sim", "20"])
//!     .output()
//!     .unwrap();
//! example::succeeded(&o);
//! ```

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use hpc_runtime::env;

/// The flags every run of these tests has: no progress lines, no pinning (tests
/// run side by side), no figures.
pub const QUIET: &[&str] = &["--quiet", "--no-pin", "--no-plot"];

/// `model` (the flags that size the run), [`QUIET`], `--out out`, then `extra`,
/// as owned arguments (for [`crate::Job::program`], after `as_str`).
pub fn args(model: &[&str], out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = model.iter().chain(QUIET).map(|s| s.to_string()).collect();
    a.push("--out".into());
    a.push(out.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// The SHA-256 of `spikes.spk` of one run of `bin`: [`args`] of `model` with
/// `--seed seed --threads threads`, then `extra`, on `ranks` processes (a singleton
/// without a launcher when 1), in a fresh directory removed afterwards.
pub fn spikes_digest(
    bin: &str,
    model: &[&str],
    seed: u64,
    (ranks, threads): (usize, usize),
    extra: &[&str],
) -> String {
    let name = Path::new(bin)
        .file_name()
        .map_or_else(|| "example".into(), |n| n.to_string_lossy().into_owned());
    let dir = crate::tmpdir(&format!("{name}-pin"), &format!("{seed}-{ranks}-{threads}"));
    let (seed, threads) = (seed.to_string(), threads.to_string());
    let sized: Vec<&str> = model
        .iter()
        .copied()
        .chain(["--seed", &seed, "--threads", &threads])
        .collect();
    let a = args(&sized, &dir, extra);
    let spikes = dir.join("spikes.spk");
    let d = crate::digest_of_run(bin, &a, ranks, Duration::from_secs(60), &spikes);
    let _ = std::fs::remove_dir_all(&dir);
    d
}

/// Checks the [`spikes_digest`] of `bin` and `model` against `pinned`: each
/// `(seed, digest)` on 1 rank of 1 thread, then the first seed on each `(ranks,
/// threads, extra)` of `variants`, which must not move a spike.
pub fn assert_pinned_spikes(
    bin: &str,
    model: &[&str],
    pinned: &[(u64, &str)],
    variants: &[(usize, usize, &[&str])],
) {
    for &(seed, want) in pinned {
        assert_eq!(
            spikes_digest(bin, model, seed, (1, 1), &[]),
            want,
            "seed {seed}, 1 rank x 1 thread"
        );
    }
    let (seed, want) = pinned[0];
    for &(ranks, threads, extra) in variants {
        assert_eq!(
            spikes_digest(bin, model, seed, (ranks, threads), extra),
            want,
            "seed {seed}, {ranks} ranks x {threads} threads, {extra:?}"
        );
    }
}

/// Runs `bin` with `args` as `size` ranks under the built-in launcher, on
/// `nodes` emulated nodes ([`crate::Job::nodes`]) with the runtime's `timeout`;
/// checks that every rank succeeded and returns rank 0's standard output.
pub fn run_ranks(
    bin: &str,
    args: &[String],
    size: usize,
    nodes: usize,
    timeout: Duration,
) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let outs = crate::Job::program(bin, &args, size)
        .timeout(timeout)
        .nodes(nodes)
        .run();
    for (r, o) in outs.iter().enumerate() {
        assert!(
            o.status.success(),
            "rank {r} of {size} failed: {}",
            stderr(o)
        );
    }
    outs.first()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// `bin` with [`args`], logging warnings only (`HPC_LOG=warn`).
pub fn command(bin: &str, model: &[&str], out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.args(args(model, out, extra)).env(env::LOG, "warn");
    c
}

/// A run's standard error, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A run's standard error, after checking that it succeeded.
pub fn succeeded(o: &Output) -> String {
    let err = stderr(o);
    assert!(o.status.success(), "the run failed ({}): {err}", o.status);
    err
}

/// A run's standard error, after checking that it was refused: status 1, with a
/// message and no panic.
pub fn refused(o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "expected a refusal: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Checks how the program `bin` says its usage: a usage error quoting a value
/// of 100,000 characters (`bad_args`, the value written `BIG`) ends with status
/// 2 in a few lines each cut to `LINE_CHARS` (clap's "invalid value" quoted it whole), and
/// `--help` with standard output on a full device ends with status 2 naming the
/// stream (clap's own exit ignored the failed write and ended 0).
pub fn assert_usage_is_cut_and_checked(bin: &str, bad_args: &[&str]) {
    let big = "x".repeat(100_000);
    let args: Vec<&str> = bad_args
        .iter()
        .map(|&a| if a == "BIG" { big.as_str() } else { a })
        .collect();
    let o = Command::new(bin).args(&args).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{bin}: {err:.300}");
    assert!(
        err.contains("more characters")
            && err
                .lines()
                .all(|l| l.chars().count() <= hpc_io::message::LINE_CHARS),
        "{bin}: a usage error of {} bytes: {err:.300}",
        err.len()
    );
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(bin)
        .arg("--help")
        .stdout(full)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{bin} --help > /dev/full: {err}");
    assert!(err.contains("writing to standard output"), "{bin}: {err}");
}

/// Limits every file that `cmd`'s process writes to `bytes` (`RLIMIT_FSIZE`), with
/// `SIGXFSZ` ignored: past the limit a write fails with `EFBIG` ("File too large")
/// as it would on a full disk, instead of killing the process.
pub fn limit_file_size(cmd: &mut Command, bytes: u64) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // calls (setrlimit, signal, reading errno) on values copied into it.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0
                || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// The bytes of spike codes each rank received, from `dir/summary.json`'s
/// `bytes_received_per_rank` (panics, naming the file, where it is missing).
pub fn received_per_rank(dir: &Path) -> Vec<u64> {
    let file = dir.join("summary.json");
    let bytes = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let s: serde_json::Value =
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    s["bytes_received_per_rank"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no bytes_received_per_rank", file.display()))
        .iter()
        .map(|x| x.as_u64().expect("a byte count"))
        .collect()
}

/// A stand-in for an example's binary in `dir` (for the tests of its
/// `validate.py`): a script `TAG.sh` that writes a spike file of no spike,
/// whose header is `header` (JSON), and a summary into its `--out`, as the
/// binary does.
pub fn stand_in_binary(dir: &Path, tag: &str, header: &str) -> std::path::PathBuf {
    let mut spk = b"HPCSPIKE".to_vec();
    spk.extend_from_slice(&1u32.to_le_bytes());
    spk.extend_from_slice(&(header.len() as u32).to_le_bytes());
    spk.extend_from_slice(header.as_bytes());
    let spk_path = dir.join(format!("{tag}.spk"));
    std::fs::write(&spk_path, spk).unwrap();
    let bin = dir.join(format!("{tag}.sh"));
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n\
             mkdir -p \"$out\" && cp '{}' \"$out/spikes.spk\" && \
             echo '{{\"simulate_recorded_s\": 1, \"build_s\": 1}}' > \"$out/summary.json\"\n",
            spk_path.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Runs `argv` (a program and its arguments, logging warnings only) where
/// `/proc/meminfo` says `MemAvailable: kib kB`: in a mount namespace of its
/// own (`unshare -m`) with a copy of the file, written into `dir`,
/// bind-mounted over it. `None`, with a line saying why, where that cannot be
/// done (not root, no `unshare`, no mount).
pub fn run_with_mem_available(dir: &Path, kib: u64, argv: &[&str]) -> Option<Output> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("unshare").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and unshare for a /proc/meminfo of its own");
        return None;
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let fake: String = meminfo
        .lines()
        .map(|l| {
            if l.starts_with("MemAvailable:") {
                format!("MemAvailable: {kib} kB\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join("meminfo");
    std::fs::write(&path, fake).unwrap();
    let o = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount --bind \"$0\" /proc/meminfo || exit 99; exec \"$@\"",
        ])
        .arg(&path)
        .args(argv)
        .env(env::LOG, "warn")
        .output()
        .unwrap();
    if o.status.code() == Some(99) {
        eprintln!(
            "skipped: cannot mount over /proc/meminfo here: {}",
            stderr(&o)
        );
        return None;
    }
    Some(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_the_model_the_quiet_flags_the_output_then_the_extra() {
        let a = args(&["--order", "5"], Path::new("/tmp/x y"), &["--seed", "2"]);
        assert_eq!(
            a,
            [
                "--order",
                "5",
                "--quiet",
                "--no-pin",
                "--no-plot",
                "--out",
                "/tmp/x y",
                "--seed",
                "2"
            ]
        );
        let c = command("/bin/true", &[], Path::new("o"), &[]);
        assert_eq!(c.get_program(), "/bin/true");
        assert!(c
            .get_envs()
            .any(|(k, v)| k == env::LOG && v == Some("warn".as_ref())));
    }

    #[test]
    fn a_limited_file_size_fails_the_write_past_it() {
        let dir = crate::tmpdir("hpc-ts-fsize", "limit");
        let file = dir.join("big");
        let mut c = Command::new("/bin/sh");
        c.arg("-c")
            .arg(format!("head -c 10000 /dev/zero > {}", file.display()));
        let o = limit_file_size(&mut c, 4096).output().unwrap();
        assert!(!o.status.success());
        assert!(stderr(&o).contains("File too large"), "{}", stderr(&o));
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 4096);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn succeeded_and_refused_check_the_status() {
        let run = |script: &str| {
            Command::new("/bin/sh")
                .args(["-c", script])
                .output()
                .unwrap()
        };
        assert_eq!(succeeded(&run("echo fine >&2")), "fine\n");
        assert_eq!(refused(&run("echo no >&2; exit 1")), "no\n");
        type Check = fn(&Output) -> String;
        let checks: [(&str, Check); 3] = [
            ("exit 1", succeeded),
            ("exit 2", refused),
            ("echo panicked >&2; exit 1", refused),
        ];
        for (script, check) in checks {
            let o = run(script);
            let r = std::panic::catch_unwind(|| check(&o));
            assert!(r.is_err(), "{script} passed the check");
        }
    }
}
