//! The single input of all detection: a root directory and an environment map.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest file the probe reads (bigger files are truncated).
const MAX_READ: u64 = 4 * 1024 * 1024;

/// Errors of building a [`Probe`] from files.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The environment file could not be read.
    #[error("cannot read the environment file: {source}")]
    EnvFile {
        /// The file.
        path: PathBuf,
        /// Why (it names the file): missing, not a regular file (a FIFO, a device),
        /// larger than [`hpc_io::read::MAX_ENV_FILE_BYTES`].
        #[source]
        source: hpc_io::read::ReadError,
    },
}

/// What detection looks at: a root directory (the file system as the process
/// sees it, `/` on a real machine) and the process environment.
///
/// Every file is read relative to `root`, so a tree captured on another machine
/// (or a test fixture) is diagnosed exactly like the live system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Root directory under which `/proc`, `/sys`, `/dev`, `/etc` ... are looked up.
    pub root: PathBuf,
    /// Environment variables of the process being diagnosed.
    pub env: BTreeMap<String, String>,
}

impl Probe {
    /// A probe of this machine: root `/` and the current process environment.
    pub fn live() -> Self {
        let env = std::env::vars_os()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect();
        Probe {
            root: PathBuf::from("/"),
            env,
        }
    }

    /// A probe of `root` with the given environment.
    pub fn new(root: impl Into<PathBuf>, env: BTreeMap<String, String>) -> Self {
        Probe {
            root: root.into(),
            env,
        }
    }

    /// A probe of `root` with the environment read from `env_file`
    /// (see [`parse_env_file`] for the accepted formats).
    pub fn from_env_file(root: impl Into<PathBuf>, env_file: &Path) -> Result<Self, ProbeError> {
        // Bounded, and refused at once when it is a FIFO or a device.
        let bytes = hpc_io::read::read_regular(env_file, hpc_io::read::MAX_ENV_FILE_BYTES)
            .map_err(|source| ProbeError::EnvFile {
                path: env_file.to_path_buf(),
                source,
            })?;
        Ok(Probe::new(
            root,
            parse_env_file(&String::from_utf8_lossy(&bytes)),
        ))
    }

    /// Whether this probe looks at the running machine itself (root is `/`).
    /// Only then are system calls (statvfs, process_vm_readv) used as evidence.
    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The host path of `path` (an absolute path inside the probed system), joined
    /// lexically (symbolic links are not resolved; see [`Probe::resolve`]).
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// The host path of `path` with every symbolic link resolved *inside the root*,
    /// as the probed system would see it: an absolute link target starts again at
    /// the root, and `..` never climbs above it, so a captured tree whose
    /// `proc/self/mountinfo` links to `/proc/self/mountinfo` is not diagnosed with
    /// the host's file. With `follow_last` false the last component is not followed.
    /// `None` after more than 40 links (a loop). For the live probe (root `/`) the
    /// path is returned as is and the kernel resolves it.
    pub fn resolve(&self, path: &str, follow_last: bool) -> Option<PathBuf> {
        if self.is_live() {
            return Some(self.path(path));
        }
        let mut pending: std::collections::VecDeque<std::ffi::OsString> =
            components(Path::new(path)).collect();
        let mut inside: Vec<std::ffi::OsString> = Vec::new();
        let mut links = 0;
        while let Some(c) = pending.pop_front() {
            if c == ".." {
                inside.pop();
                continue;
            }
            let mut candidate = self.root.clone();
            candidate.extend(&inside);
            candidate.push(&c);
            let last = pending.is_empty();
            let is_link = std::fs::symlink_metadata(&candidate)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if is_link && (follow_last || !last) {
                links += 1;
                if links > 40 {
                    tracing::debug!(path, "more than 40 symbolic links (a loop?)");
                    return None;
                }
                let target = std::fs::read_link(&candidate).ok()?;
                if target.is_absolute() {
                    inside.clear();
                }
                let mut next: std::collections::VecDeque<_> = components(&target).collect();
                next.extend(pending);
                pending = next;
            } else {
                inside.push(c);
            }
        }
        let mut out = self.root.clone();
        out.extend(&inside);
        Some(out)
    }

    /// The value of environment variable `key`.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.env.get(key).map(String::as_str)
    }

    /// Variables whose name starts with `prefix`, in name order.
    pub fn vars_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        self.env
            .range(prefix.to_string()..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Reads a file (lossy UTF-8, at most 4 MiB); `None` when it cannot be read.
    /// Links are resolved inside the root, and only a regular file is opened, without
    /// blocking: a FIFO, a socket or a device node in a captured tree is skipped (a
    /// FIFO would block the read for ever; a device could have side effects).
    pub fn read(&self, path: &str) -> Option<String> {
        use std::os::unix::fs::OpenOptionsExt;
        let full = self.resolve(path, true)?;
        let meta = std::fs::metadata(&full).ok()?;
        if !meta.is_file() {
            tracing::debug!(path = %hpc_io::message::path(&full), "not a regular file; not read");
            return None;
        }
        let mut opts = std::fs::OpenOptions::new();
        opts.read(true);
        // O_NOFOLLOW only for a captured tree: `resolve` already followed its links.
        // (The live /proc/self is a link the kernel must follow.)
        let nofollow = if self.is_live() { 0 } else { libc::O_NOFOLLOW };
        opts.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | nofollow);
        let file = opts.open(&full).ok()?;
        // Checked again on the open file: the tree may have changed since.
        if !file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            return None;
        }
        let mut buf = Vec::new();
        match file.take(MAX_READ + 1).read_to_end(&mut buf) {
            Ok(_) => {
                // Longer than what is read: said, and cut at its last whole
                // line (hostile pass 20: cut at 4 MiB without a word, the cut
                // line read as a whole one: a mount, a limit).
                if buf.len() as u64 > MAX_READ {
                    buf.truncate(MAX_READ as usize);
                    let whole = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                    buf.truncate(whole);
                    // Once a file, however many parts of the probe read it.
                    static SAID: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
                    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
                    if !said.contains(&full) {
                        said.push(full.clone());
                        tracing::warn!(
                            "{} is longer than {} MiB: only its first {} bytes (whole lines) are read",
                            hpc_io::message::path(&full),
                            MAX_READ >> 20,
                            buf.len()
                        );
                    }
                }
                Some(String::from_utf8_lossy(&buf).into_owned())
            }
            Err(e) => {
                tracing::debug!(path = %hpc_io::message::path(&full), error = %e, "read failed");
                None
            }
        }
    }

    /// Whether `path` exists (files, directories, device nodes; links in the path are
    /// resolved inside the root, and a dangling last link counts as present).
    pub fn exists(&self, path: &str) -> bool {
        self.resolve(path, false)
            .is_some_and(|full| full.symlink_metadata().is_ok())
    }

    /// Whether `path` is a directory (links resolved inside the root).
    pub fn is_dir(&self, path: &str) -> bool {
        self.resolve(path, true).is_some_and(|full| full.is_dir())
    }

    /// Names of the entries of directory `path`, sorted; empty when unreadable.
    pub fn list(&self, path: &str) -> Vec<String> {
        let Some(full) = self.resolve(path, true) else {
            return Vec::new();
        };
        let mut names: Vec<String> = match std::fs::read_dir(full) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }
}

/// The normal components of a path (`/`, `.` and empty ones dropped; `..` kept).
fn components(p: &Path) -> impl Iterator<Item = std::ffi::OsString> + '_ {
    use std::path::Component;
    p.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some("..".into()),
        _ => None,
    })
}

/// Parses an environment capture.
///
/// Accepted: NUL-separated `KEY=VALUE` records (as in `/proc/<pid>/environ`), or
/// one `KEY=VALUE` per line (as printed by `env` or used by `docker --env-file`),
/// with blank lines, `#` comments, an optional `export ` prefix and optional
/// matching quotes around the value. Lines without `=` are ignored.
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let nul = text.contains('\0');
    let records: Vec<&str> = if nul {
        text.split('\0').collect()
    } else {
        text.lines().collect()
    };
    for rec in records {
        let line = if nul { rec } else { rec.trim() };
        if line.is_empty() || (!nul && line.starts_with('#')) {
            continue;
        }
        let line = if nul {
            line
        } else {
            line.strip_prefix("export ").unwrap_or(line)
        };
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim();
        if k.is_empty() {
            continue;
        }
        let v = if nul { v } else { unquote(v) };
        env.insert(k.to_string(), v.to_string());
    }
    env
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile pass 20: a file of the captured tree longer than 4 MiB (a
    /// mount table of a host with many mounts) was cut there without a word,
    /// its cut line read as a whole one. It is cut at its last whole line.
    #[test]
    fn a_file_longer_than_what_is_read_is_cut_at_a_whole_line() {
        let root = hpc_test_support::TmpDir::new("hpc-container", "long-file");
        std::fs::create_dir_all(root.join("proc/self")).unwrap();
        let line = "36 35 98:0 /mnt1 /mnt1 rw,noatime master:1 - ext3 /dev/root rw\n";
        let text = line.repeat((MAX_READ as usize) / line.len() + 10);
        std::fs::write(root.join("proc/self/mountinfo"), &text).unwrap();
        let p = Probe::new(root.to_path_buf(), BTreeMap::new());
        let read = p.read("/proc/self/mountinfo").unwrap();
        assert!(read.len() as u64 <= MAX_READ && read.len() > 1 << 20);
        assert!(
            read.ends_with('\n') && read.len() % line.len() == 0,
            "{}",
            read.len()
        );
    }

    /// An env file that is a FIFO or `/dev/zero` is refused at once, naming it,
    /// instead of waiting for a writer or filling memory.
    #[test]
    fn an_env_file_that_is_a_fifo_or_a_device_is_refused_at_once() {
        let dir = hpc_test_support::TmpDir::new("hpc-probe", "env");
        let fifo = dir.join("env");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = Probe::from_env_file("/", &fifo).unwrap_err().to_string();
        assert!(e.contains("env is a FIFO, not a regular file"), "{e}");
        let e = Probe::from_env_file("/", Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        std::fs::write(
            dir.join("big"),
            vec![b'x'; (hpc_io::read::MAX_ENV_FILE_BYTES + 1) as usize],
        )
        .unwrap();
        let e = Probe::from_env_file("/", &dir.join("big"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than the 1048576 bytes"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn env_file_formats() {
        let e = parse_env_file("# c\nexport A=1\nB=\"two words\"\n\nnoeq\nC=x=y\n");
        assert_eq!(e.get("A").map(String::as_str), Some("1"));
        assert_eq!(e.get("B").map(String::as_str), Some("two words"));
        assert_eq!(e.get("C").map(String::as_str), Some("x=y"));
        assert_eq!(e.len(), 3);
        let e = parse_env_file("container=podman\0HOME=/root\0");
        assert_eq!(e.get("container").map(String::as_str), Some("podman"));
        assert_eq!(e.len(), 2);
    }

    #[test]
    fn prefix_iteration() {
        let mut env = BTreeMap::new();
        env.insert("OMPI_MCA_btl".into(), "tcp".into());
        env.insert("OMPI_X".into(), "1".into());
        env.insert("PATH".into(), "/bin".into());
        let p = Probe::new("/nonexistent", env);
        let v: Vec<_> = p.vars_with_prefix("OMPI_MCA_").collect();
        assert_eq!(v, vec![("OMPI_MCA_btl", "tcp")]);
    }
}
