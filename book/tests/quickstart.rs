//! The quick start followed literally, in a directory outside this repository.
//!
//! Section "2. A program" of `book/src/quickstart.md` is read, not copied: every
//! `$ command` of its console blocks runs (through `bash`, in the directory the
//! previous `cd` left), its `toml` block is added to `Cargo.toml` under
//! `[dependencies]` and its `rust` block becomes `src/main.rs`, as the text says; each
//! command must succeed, and where the book shows output, the command's standard
//! output must be those lines (in any order: ranks print concurrently).
//!
//! What stands in for a registry is what section "1. The launcher" tells a user to do
//! before the crates are on crates.io: its `[patch.crates-io]` table, with `CHECKOUT`
//! this repository, added by hand to the program's `Cargo.toml` (before the first
//! build); builds are offline (third-party crates come from cargo's cache); `hpc` is
//! this workspace's build (`cargo install --path` of it is followed by hpc-cli's
//! `outside` test; what `cargo package` writes is checked by `cargo xtask publish`).
//!
//! Slow (builds the program from scratch), so it runs only with
//! `HPC_TEST_OUTSIDE=1` (`cargo xtask test` runs it as a step of its own). The work
//! directory is under the system's temporary directory and kept: a second run moves
//! the program's previous `target/` aside before `cargo new` and back after it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

/// A command without the variables of the cargo that runs this test.
fn clean(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().to_string();
        if (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("NEXTEST")
            || k.starts_with("HPC_")
            || k == "RUSTFLAGS"
        {
            c.env_remove(&k);
        }
    }
    c
}

fn cargo_bin() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from)
}

fn ok(what: &str, cmd: &mut Command) -> String {
    eprintln!("==> {what}");
    let t = std::time::Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!("    {:.1}s {}", t.elapsed().as_secs_f64(), out.status);
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{so}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// One block of the section: a console block (commands, each with the output the book
/// shows), a `toml` block or a `rust` block.
#[derive(Debug)]
enum Block {
    Console(Vec<(String, Vec<String>)>),
    Toml(String),
    Rust(String),
}

/// The blocks of the quick start's section whose heading starts with `heading`.
fn section(heading: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join("book/src/quickstart.md")).unwrap();
    let start = text
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("quickstart.md has no section {heading:?}"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3);
    let mut blocks = Vec::new();
    let mut lines = rest[..end].lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        match lang.split(',').next().unwrap_or("") {
            "console" => {
                let mut cmds: Vec<(String, Vec<String>)> = Vec::new();
                for l in body {
                    if let Some(c) = l.strip_prefix("$ ") {
                        cmds.push((c.to_string(), Vec::new()));
                    } else if let Some(last) = cmds.last_mut() {
                        last.1.push(l.to_string());
                    } else {
                        panic!("output before any command in a console block: {l:?}");
                    }
                }
                blocks.push(Block::Console(cmds));
            }
            "toml" => blocks.push(Block::Toml(body.join("\n") + "\n")),
            // Lines starting with `# ` are rustdoc's hidden lines: part of the program.
            "rust" => blocks.push(Block::Rust(
                body.iter()
                    .map(|l| l.strip_prefix("# ").unwrap_or(l))
                    .collect::<Vec<_>>()
                    .join("\n")
                    + "\n",
            )),
            _ => {}
        }
    }
    blocks
}

/// Section 1's `[patch.crates-io]` table, for a crate of a user's own before the
/// crates are on crates.io, with `CHECKOUT` this repository.
fn checkout_patch() -> String {
    let tables: Vec<String> = section("1. The launcher")
        .into_iter()
        .filter_map(|b| match b {
            Block::Toml(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(
        tables.len(),
        1,
        "section 1 shows one toml block: {tables:?}"
    );
    let table = &tables[0];
    assert!(
        table.starts_with("[patch.crates-io]\n") && table.contains("\"CHECKOUT/crates/hpc-rs\""),
        "section 1's table no longer patches hpc-rs from CHECKOUT:\n{table}"
    );
    table.replace("CHECKOUT", &repo().display().to_string())
}

#[test]
fn the_quickstart_followed_literally() {
    let blocks = section("2. A program");
    // The section keeps its shape, or this test would check less than it claims.
    let commands: Vec<&(String, Vec<String>)> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Console(c) => Some(c),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(
        commands.iter().any(|(c, _)| c.starts_with("cargo new ")),
        "{blocks:?}"
    );
    assert!(commands
        .iter()
        .any(|(c, o)| c.starts_with("hpc run -n 4") && o.len() >= 5));
    assert_eq!(
        blocks
            .iter()
            .filter(|b| matches!(b, Block::Rust(_)))
            .count(),
        1
    );
    assert_eq!(
        blocks
            .iter()
            .filter(|b| matches!(b, Block::Toml(_)))
            .count(),
        1
    );

    if std::env::var(hpc_env::TEST_OUTSIDE).as_deref() != Ok("1") {
        eprintln!(
            "the_quickstart_followed_literally skipped: set HPC_TEST_OUTSIDE=1 (cargo xtask \
             test does) to follow the quick start in a temporary directory"
        );
        return;
    }

    let work = std::env::temp_dir().join(format!(
        "hpc-quickstart-{:016x}",
        repo()
            .to_string_lossy()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b))
                .wrapping_mul(0x100_0000_01b3))
    ));
    std::fs::create_dir_all(work.join(".cargo")).unwrap();
    std::fs::write(work.join(".cargo/config.toml"), "[net]\noffline = true\n").unwrap();
    let patch = checkout_patch();

    // `hpc` on the PATH: this workspace's build of the launcher.
    ok(
        "cargo build -p hpc-cli",
        clean(cargo_bin())
            .current_dir(repo())
            .args(["build", "-p", "hpc-cli"])
            .env("CARGO_TARGET_DIR", repo().join("target")),
    );
    let bin = repo().join("target/debug");
    assert!(bin.join("hpc").exists());
    let cargo_dir = cargo_bin()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let path = std::env::join_paths([bin, cargo_dir].into_iter().chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();

    // A previous run's build of the program, kept aside for `cargo new`.
    let mut cwd = work.clone();
    let kept = work.join("kept-target");
    let mut project: Option<PathBuf> = None;
    for block in &blocks {
        match block {
            Block::Console(cmds) => {
                for (cmd, shown) in cmds {
                    if let Some(dir) = cmd.strip_prefix("cd ") {
                        cwd = cwd.join(dir.trim());
                        continue;
                    }
                    if let Some(name) = cmd.strip_prefix("cargo new ") {
                        let dir = cwd.join(name.split_whitespace().next().unwrap());
                        if dir.join("target").exists() {
                            let _ = std::fs::remove_dir_all(&kept);
                            std::fs::rename(dir.join("target"), &kept).unwrap();
                        }
                        let _ = std::fs::remove_dir_all(&dir);
                        project = Some(dir);
                    }
                    let out = ok(
                        cmd,
                        clean("bash")
                            .current_dir(&cwd)
                            .args(["-c", cmd])
                            .env("PATH", &path),
                    );
                    if cmd.starts_with("cargo new ") {
                        let dir = project.as_ref().unwrap();
                        if kept.exists() {
                            std::fs::rename(&kept, dir.join("target")).unwrap();
                        }
                    }
                    if !shown.is_empty() {
                        let mut want: Vec<&str> = shown.iter().map(String::as_str).collect();
                        let mut got: Vec<&str> = out.lines().collect();
                        want.sort_unstable();
                        got.sort_unstable();
                        assert_eq!(got, want, "`{cmd}` printed\n{out}");
                    }
                }
            }
            Block::Toml(deps) => {
                let manifest = project
                    .as_ref()
                    .expect("cargo new first")
                    .join("Cargo.toml");
                let text = std::fs::read_to_string(&manifest).unwrap();
                assert!(text.contains("[dependencies]\n"), "{text}");
                let text = text.replacen("[dependencies]\n", &format!("[dependencies]\n{deps}"), 1);
                // Section 1's table, added by hand as it says, before the first build.
                std::fs::write(&manifest, format!("{text}\n{patch}")).unwrap();
            }
            Block::Rust(main) => {
                let dir = project.as_ref().expect("cargo new first");
                std::fs::write(dir.join("src/main.rs"), main).unwrap();
            }
        }
    }
}
