//! `hpc man`: manual pages generated from the command line definition
//! (clap_mangen): `hpc.1` and one `hpc-SUBCOMMAND.1` per subcommand.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// Arguments of `hpc man`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    hpc man | man -l -                        read hpc(1) now\n  \
    hpc man --dir ~/.local/share/man/man1     install hpc.1 and hpc-run.1, hpc-new.1, ...")]
pub struct Args {
    /// Write every page (`hpc.1`, `hpc-run.1`, ...) into this directory instead of
    /// printing `hpc.1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The pages of `cmd`: `(file name, roff text)`, the main page first.
pub fn pages(cmd: &clap::Command) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    // The exit status gets a section of its own, in roff, instead of the help's
    // preformatted text.
    let mut cmd = cmd.clone().after_long_help(None::<&str>);
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    page.extend_from_slice(EXIT_STATUS_ROFF.as_bytes());
    out.push((format!("{name}.1"), page));
    // After `build`, a subcommand's display name is `hpc-run` and its binary name
    // `hpc run`: the page's title and synopsis.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let full = format!("{name}-{}", sub.get_name());
        let mut page = Vec::new();
        clap_mangen::Man::new(sub.clone()).render(&mut page)?;
        out.push((format!("{full}.1"), page));
    }
    Ok(out)
}

/// The EXIT STATUS section of `hpc.1` (the same facts as `hpc --help`).
const EXIT_STATUS_ROFF: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
success
.TP
\fB1\fR
the command ran and reports a problem: \fBdoctor\fR found warnings, \fBtopo\fR had to oversubscribe cores
.TP
\fB2\fR
bad input or an error: a usage error, an invalid value, an unreadable file, a destination that holds files \fBhpc new\fR would overwrite; \fBdoctor\fR found errors
.PP
\fBhpc run\fR exits with the status of the first rank that failed (0 when all succeed), 128+N when a rank was killed by signal N, 124 when \fB\-\-time\-limit\fR stopped the job, and 125 when \fBhpc run\fR itself failed once its arguments were accepted (a program that cannot be started, the ranks' output that cannot be written); a rank's own 124 or 125 is named in the message and gives 1; bad arguments are 2 as everywhere.
.TP
\fB141\fR
the output is a closed pipe (\fBhpc ... | head \-1\fR), without a message; any other failed write of the output is an error naming the stream (2, 125 for \fBhpc run\fR)
"#;

/// Writes the pages into `dir`, each replacing the file of its name without
/// following a symlink planted there.
/// A `--dir` that exists and is not a directory (`/dev/null`, a file) is refused
/// naming the flag, where it said only "creating /dev/null: File exists".
fn write_all(dir: &Path, pages: &[(String, Vec<u8>)]) -> anyhow::Result<()> {
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(super::UsageError(format!(
            "--dir {}: it exists and is not a directory; name a directory (it is made when \
             missing)",
            hpc_io::message::path(dir)
        ))
        .into());
    }
    // A link to a missing folder: "creating D: File exists" said neither.
    // Its folders too (hostile pass 20: `--dir /lnk/x` said "File exists").
    if let Some((link, target)) = hpc_io::rundir::dangling_link_in(dir) {
        return Err(super::UsageError(format!(
            "--dir {}: {}; make that directory, or name another",
            hpc_io::message::path(dir),
            hpc_io::rundir::dangling_said(dir, &link, &target)
        ))
        .into());
    }
    if let Some(why) = system_folder(dir) {
        return Err(super::UsageError(format!(
            "--dir {}: {why}, not a folder for manual pages: give a section folder \
             (~/.local/share/man/man1, /usr/local/share/man/man1); nothing was written",
            hpc_io::message::path(dir)
        ))
        .into());
    }
    // Every page's name checked before the first is written (hostile pass 20:
    // a folder at `hpc-run.1` failed the run after `hpc.1` was replaced,
    // leaving the pages of two versions).
    for (file, _) in pages {
        let path = dir.join(file);
        hpc_io::atomic::check_replaceable(&path).map_err(|e| {
            super::UsageError(format!(
                "--dir {}: {e}; nothing was written",
                hpc_io::message::path(dir)
            ))
        })?;
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", hpc_io::message::path(dir)))?;
    for (file, text) in pages {
        super::replace_file(&dir.join(file), text)?;
    }
    Ok(())
}

/// Why `dir` is a folder of the system that manual pages have no place in
/// (`/`, `/etc`, `/usr/bin`: as root, `--dir /` wrote its twelve pages into
/// `/`); a section folder of a manual tree of the system (`.../man/man1`),
/// where they belong, is not one. A folder merely named `man1` elsewhere in
/// the system's files (`/etc/man1`, `/usr/bin/man1`, `/boot/man1`) was taken
/// as one, and made.
fn system_folder(dir: &Path) -> Option<String> {
    // Hostile pass 20: `/man1`, `/new/man/man1` (as root) made a new folder in `/`.
    if let Some(why) = hpc_io::system::new_in_root(dir) {
        return Some(why);
    }
    let why = hpc_io::system::system_folder(dir)?;
    let section = hpc_io::system::resolved(dir).is_some_and(|r| {
        r.file_name().is_some_and(|n| n == "man1")
            && r.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "man")
    });
    (!section).then_some(why)
}

/// Prints `hpc.1`, or writes every page into `--dir`.
pub fn exec(args: Args, cmd: clap::Command) -> anyhow::Result<i32> {
    let pages = pages(&cmd)?;
    match &args.dir {
        Some(dir) => {
            write_all(dir, &pages)?;
            super::say(&format!(
                "{} pages in {}",
                pages.len(),
                hpc_io::message::path(dir)
            ))?;
        }
        None => super::print_bytes(&pages[0].1)?,
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::system_folder;
    use std::path::Path;

    #[test]
    fn system_folders_but_manual_sections_are_refused() {
        for refused in [
            "/",
            "/etc",
            "/usr/bin",
            "/tmp",
            "/usr/share/man",
            "/tmp/../etc/x",
            // Hostile pass 20: named `man1`, but in no manual tree.
            "/etc/man1",
            "/usr/bin/man1",
            "/boot/man1",
            "/etc/ssh/man1",
            "/usr/man1",
            // Hostile pass 20: a new folder directly in `/`.
            "/hpc-man-not-made",
            "/man1",
            "/hpc-man-not-made/man/man1",
        ] {
            assert!(system_folder(Path::new(refused)).is_some(), "{refused}");
        }
        for taken in [
            "/usr/share/man/man1",
            "/usr/local/share/man/man1",
            "/usr/local/man/man1",
            "/tmp/m",
            "/opt/x/man1",
        ] {
            assert_eq!(system_folder(Path::new(taken)), None, "{taken}");
        }
    }
}
