//! The program every rank runs: found before any rank starts, as `execvp`
//! would find it, and what a "not found" of one that is there means.

use std::path::{Path, PathBuf};

use anyhow::bail;
use hpc_runtime::env as henv;

/// The search path `execvp` takes where `PATH` is unset (the C library's).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Finds the program as `execvp` would, so that a missing one is reported before any
/// rank starts.
pub(super) fn resolve_program(prog: &Path) -> anyhow::Result<PathBuf> {
    let is_exec = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if prog.components().count() > 1 || prog.is_absolute() {
        if is_exec(prog) {
            return Ok(prog.to_path_buf());
        }
        if prog.exists() {
            bail!("{} is not an executable file", shown_path(prog));
        }
        bail!("program not found: {}", shown_path(prog));
    }
    // An unset PATH is execvp's default search path, not the current folder
    // (hostile pass 20: "program not found in PATH: ls", and with an `ls` in
    // the current folder that one was found, but /bin/ls ran).
    let path = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    for dir in std::env::split_paths(&path) {
        // An empty entry is the current folder, named so that the rank runs
        // the file found here, not another the start would search for.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let cand = dir.join(prog);
        if is_exec(&cand) {
            return Ok(cand);
        }
    }
    bail!("program not found in PATH: {}", shown_path(prog))
}

/// A path the user gave, as a message names it: cut when long (a program name of
/// 100,000 characters was echoed whole).
fn shown_path(p: &Path) -> String {
    henv::short(&p.to_string_lossy())
}

/// What a "not found" of a program that is there means: its interpreter (the
/// `#!` line) or its loader is missing (hostile pass 20: "No such file or
/// directory" of a script that exists, naming neither). Empty otherwise.
pub(super) fn missing_loader(program: &Path, e: &std::io::Error) -> String {
    use std::io::Read as _;
    if e.kind() != std::io::ErrorKind::NotFound || !program.is_file() {
        return String::new();
    }
    let mut head = Vec::new();
    if let Ok(f) = std::fs::File::open(program) {
        let _ = f.take(256).read_to_end(&mut head);
    }
    let interpreter = head.strip_prefix(b"#!").and_then(|rest| {
        let line = rest.split(|&b| b == b'\n').next()?;
        let line = String::from_utf8_lossy(line);
        line.split_whitespace().next().map(str::to_string)
    });
    match interpreter {
        Some(i) => format!(
            ": the program is there, its interpreter {} (its #! line) is not",
            hpc_io::message::path(Path::new(&i))
        ),
        None => ": the program is there; its loader (the ELF interpreter) or a library it \
                 starts with is not"
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: a script whose `#!` interpreter is missing was said
    /// "No such file or directory", naming neither. The interpreter is named.
    #[test]
    fn a_missing_interpreter_is_named() {
        let dir = hpc_test_support::TmpDir::new("hpc-cli", "no-interpreter");
        let script = dir.join("s.sh");
        std::fs::write(&script, "#!/nonexistent/sh -e\necho hi\n").unwrap();
        let e = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(
            super::missing_loader(&script, &e),
            ": the program is there, its interpreter /nonexistent/sh (its #! line) is not"
        );
        assert_eq!(super::missing_loader(&dir.join("absent"), &e), "");
    }
}
