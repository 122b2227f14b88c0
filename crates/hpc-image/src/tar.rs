//! Deterministic tar archives.
//!
//! Every archive this module writes depends only on the entries' paths, kinds, modes,
//! owners and contents: entries are sorted by path, every mtime is the one given
//! (`SOURCE_DATE_EPOCH`), user and group names are empty, there is no atime/ctime, and
//! long names use GNU extension headers the same way every time. Hard links are
//! re-pointed so that the first member of a link group in sorted order carries the
//! data and the others link to it (a tar reader needs the target before the link).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use tar::{EntryType, Header};

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file and its contents.
    File(Vec<u8>),
    /// A symbolic link to the given target (kept verbatim).
    Symlink(String),
    /// A hard link to another entry's path (relative, like `path`).
    Hardlink(String),
    /// A character device (major, minor).
    Char(u32, u32),
    /// A block device (major, minor).
    Block(u32, u32),
    /// A named pipe.
    Fifo,
}

/// One member of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative path without a leading `./` or `/` and without a trailing `/`.
    pub path: String,
    /// Permission bits (including setuid/setgid/sticky).
    pub mode: u32,
    /// Numeric owner.
    pub uid: u64,
    /// Numeric group.
    pub gid: u64,
    /// What it is.
    pub kind: Kind,
}

impl Entry {
    /// A directory owned by root.
    pub fn dir(path: &str, mode: u32) -> Self {
        Self {
            path: normalise_path(path),
            mode,
            uid: 0,
            gid: 0,
            kind: Kind::Dir,
        }
    }

    /// A regular file owned by root.
    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> Self {
        Self {
            path: normalise_path(path),
            mode,
            uid: 0,
            gid: 0,
            kind: Kind::File(data),
        }
    }

    /// A symbolic link owned by root.
    #[cfg(test)]
    pub fn symlink(path: &str, target: &str) -> Self {
        Self {
            path: normalise_path(path),
            mode: 0o777,
            uid: 0,
            gid: 0,
            kind: Kind::Symlink(target.to_string()),
        }
    }
}

/// Strips `./`, leading `/` and trailing `/` from an archive path.
pub fn normalise_path(p: &str) -> String {
    let mut s = p;
    loop {
        if let Some(r) = s.strip_prefix("./") {
            s = r;
        } else if let Some(r) = s.strip_prefix('/') {
            s = r;
        } else {
            break;
        }
    }
    let s = s.trim_end_matches('/');
    if s == "." {
        String::new()
    } else {
        s.to_string()
    }
}

/// Adds the parent directories that `entries` lack (mode 0755, root-owned), so that
/// every path's parents exist in the archive before it.
pub fn add_parents(entries: &mut Vec<Entry>) {
    let have: std::collections::BTreeSet<String> = entries.iter().map(|e| e.path.clone()).collect();
    let mut missing = std::collections::BTreeSet::new();
    for e in entries.iter() {
        let mut p = e.path.as_str();
        while let Some(i) = p.rfind('/') {
            p = &p[..i];
            if !have.contains(p) {
                missing.insert(p.to_string());
            }
        }
    }
    entries.extend(missing.into_iter().map(|p| Entry::dir(&p, 0o755)));
}

/// Sorts entries by path, drops duplicates (the last one wins) and re-points hard
/// links so that each link group's first member in sorted order holds the data.
/// Hard links whose target is missing are dropped.
pub fn canonicalise(entries: Vec<Entry>) -> Vec<Entry> {
    let mut map: BTreeMap<String, Entry> = BTreeMap::new();
    for e in entries {
        if e.path.is_empty() {
            continue;
        }
        map.insert(e.path.clone(), e);
    }
    // Link groups: target path -> member paths (target included).
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (p, e) in &map {
        if let Kind::Hardlink(t) = &e.kind {
            groups.entry(normalise_path(t)).or_default().push(p.clone());
        }
    }
    for (target, mut members) in groups {
        let data_ok = matches!(map.get(&target).map(|e| &e.kind), Some(Kind::File(_)));
        if !data_ok {
            for m in members {
                map.remove(&m);
            }
            continue;
        }
        members.push(target.clone());
        members.sort();
        let first = members[0].clone();
        if first != target {
            let mut holder = map.remove(&target).expect("target exists");
            holder.path = first.clone();
            let (mode, uid, gid) = (holder.mode, holder.uid, holder.gid);
            map.insert(first.clone(), holder);
            map.insert(
                target.clone(),
                Entry {
                    path: target.clone(),
                    mode,
                    uid,
                    gid,
                    kind: Kind::Hardlink(first.clone()),
                },
            );
        }
        for m in &members[1..] {
            if let Some(e) = map.get_mut(m) {
                e.kind = Kind::Hardlink(first.clone());
            }
        }
    }
    map.into_values().collect()
}

/// A tar writer whose headers carry only what [`Entry`] holds plus a fixed mtime.
pub struct DetTar<W: Write> {
    builder: tar::Builder<W>,
    mtime: u64,
}

impl<W: Write> DetTar<W> {
    /// Starts an archive whose every member has modification time `mtime`.
    pub fn new(w: W, mtime: u64) -> Self {
        let mut builder = tar::Builder::new(w);
        builder.mode(tar::HeaderMode::Deterministic);
        Self { builder, mtime }
    }

    fn header(&self, mode: u32, uid: u64, gid: u64, t: EntryType, size: u64) -> Header {
        let mut h = Header::new_gnu();
        h.set_mode(mode & 0o7777);
        h.set_uid(uid);
        h.set_gid(gid);
        h.set_mtime(self.mtime);
        h.set_entry_type(t);
        h.set_size(size);
        h
    }

    /// Appends one entry.
    pub fn append(&mut self, e: &Entry) -> io::Result<()> {
        match &e.kind {
            Kind::Dir => {
                let mut h = self.header(e.mode, e.uid, e.gid, EntryType::Directory, 0);
                self.builder
                    .append_data(&mut h, format!("{}/", e.path), io::empty())
            }
            Kind::File(data) => {
                let mut h =
                    self.header(e.mode, e.uid, e.gid, EntryType::Regular, data.len() as u64);
                self.builder.append_data(&mut h, &e.path, data.as_slice())
            }
            Kind::Symlink(t) => {
                let mut h = self.header(e.mode, e.uid, e.gid, EntryType::Symlink, 0);
                self.builder.append_link(&mut h, &e.path, t)
            }
            Kind::Hardlink(t) => {
                let mut h = self.header(e.mode, e.uid, e.gid, EntryType::Link, 0);
                self.builder.append_link(&mut h, &e.path, t)
            }
            Kind::Char(ma, mi) | Kind::Block(ma, mi) => {
                let t = if matches!(e.kind, Kind::Char(..)) {
                    EntryType::Char
                } else {
                    EntryType::Block
                };
                let mut h = self.header(e.mode, e.uid, e.gid, t, 0);
                h.set_device_major(*ma)?;
                h.set_device_minor(*mi)?;
                self.builder.append_data(&mut h, &e.path, io::empty())
            }
            Kind::Fifo => {
                let mut h = self.header(e.mode, e.uid, e.gid, EntryType::Fifo, 0);
                self.builder.append_data(&mut h, &e.path, io::empty())
            }
        }
    }

    /// Appends a regular file (root-owned) whose contents are streamed from `data`.
    pub fn append_reader(
        &mut self,
        path: &str,
        mode: u32,
        size: u64,
        data: impl Read,
    ) -> io::Result<()> {
        let mut h = self.header(mode, 0, 0, EntryType::Regular, size);
        self.builder.append_data(&mut h, path, data)
    }

    /// Writes the end-of-archive marker and returns the inner writer.
    pub fn finish(self) -> io::Result<W> {
        self.builder.into_inner()
    }
}

/// Writes `entries` (after [`canonicalise`]) as a tar archive with every mtime set to
/// `mtime`.
pub fn write_tar<W: Write>(entries: Vec<Entry>, mtime: u64, w: W) -> io::Result<W> {
    let mut t = DetTar::new(w, mtime);
    for e in canonicalise(entries) {
        t.append(&e)?;
    }
    t.finish()
}

/// Reads every member of a tar stream into memory (GNU and PAX long names resolved;
/// global headers and unknown kinds skipped).
pub fn read_tar(r: impl Read) -> Result<Vec<Entry>> {
    let mut ar = tar::Archive::new(r);
    let mut out = Vec::new();
    for ent in ar.entries().context("reading tar")? {
        let mut ent = ent.context("reading tar entry")?;
        let path = normalise_path(&String::from_utf8_lossy(&ent.path_bytes()));
        let h = ent.header();
        let mode = h.mode().unwrap_or(0o644);
        let uid = h.uid().unwrap_or(0);
        let gid = h.gid().unwrap_or(0);
        let t = h.entry_type();
        let link = || -> Result<String> {
            Ok(ent
                .link_name_bytes()
                .map(|b| String::from_utf8_lossy(&b).to_string())
                .unwrap_or_default())
        };
        let kind = match t {
            EntryType::Directory => Kind::Dir,
            EntryType::Symlink => Kind::Symlink(link()?),
            EntryType::Link => Kind::Hardlink(normalise_path(&link()?)),
            EntryType::Char | EntryType::Block => {
                let ma = h.device_major().ok().flatten().unwrap_or(0);
                let mi = h.device_minor().ok().flatten().unwrap_or(0);
                if t == EntryType::Char {
                    Kind::Char(ma, mi)
                } else {
                    Kind::Block(ma, mi)
                }
            }
            EntryType::Fifo => Kind::Fifo,
            EntryType::Regular | EntryType::Continuous => {
                // The header's size is the archive's word, not yet its bytes (a
                // forged `--base` layer said 2^62 and the allocation aborted): the
                // capacity grows with what is read, from at most 1 MiB.
                let mut data = Vec::with_capacity(ent.size().min(1 << 20) as usize);
                ent.read_to_end(&mut data)
                    .with_context(|| format!("reading {path} from tar"))?;
                Kind::File(data)
            }
            EntryType::XGlobalHeader => continue,
            other => bail!("unsupported tar entry type {other:?} for {path}"),
        };
        out.push(Entry {
            path,
            mode,
            uid,
            gid,
            kind,
        });
    }
    Ok(out)
}

/// A writer that hashes (SHA-256) and counts everything passing through it.
pub struct HashWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    /// Returns the inner writer, the `sha256:<hex>` digest and the byte count.
    pub fn finish(self) -> (W, String, u64) {
        let d = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        (self.inner, d, self.len)
    }
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Digests of a compressed layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerDigests {
    /// `sha256:` of the gzip stream (the blob).
    pub digest: String,
    /// Size of the gzip stream in bytes.
    pub size: u64,
    /// `sha256:` of the uncompressed tar (the diff id).
    pub diff_id: String,
}

/// Writes `entries` as a layer ([`write_layer`]) into the new file `path`,
/// created fresh: whatever is at `path` (a link planted there, an earlier
/// run's file) is removed, never written through. The app layer's
/// `app-layer.tmp` was opened following a link: a link there to another file
/// had that file replaced by the layer, and the layout's blob became the link.
pub fn write_layer_file(
    entries: Vec<Entry>,
    mtime: u64,
    path: &std::path::Path,
) -> Result<LayerDigests> {
    let f = crate::create_new(path)?;
    // Named: a full disk said "No space left on device" and nothing more.
    let d = write_layer(entries, mtime, io::BufWriter::new(&f))
        .with_context(|| format!("writing {}", hpc_io::message::path(path)))?;
    f.sync_all()
        .with_context(|| format!("writing {}", hpc_io::message::path(path)))?;
    Ok(d)
}

/// Writes `entries` as a deterministic gzip-compressed tar layer to `w`: gzip header
/// mtime 0, no file name, compression level 6.
pub fn write_layer<W: Write>(entries: Vec<Entry>, mtime: u64, w: W) -> Result<LayerDigests> {
    let outer = HashWriter::new(w);
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(outer, flate2::Compression::new(6));
    let inner = HashWriter::new(gz);
    let inner = write_tar(entries, mtime, inner).context("writing layer tar")?;
    let (gz, diff_id, _) = inner.finish();
    let outer = gz.finish().context("finishing gzip")?;
    let (mut w, digest, size) = outer.finish();
    w.flush()?;
    Ok(LayerDigests {
        digest,
        size,
        diff_id,
    })
}

/// `sha256:<hex>` of a byte string.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: a layer that could not be written (a full disk) said
    /// "No space left on device" and named no file. Run again in a child whose
    /// files may hold 8 KiB (`ulimit -f`, `SIGXFSZ` ignored: the write fails
    /// with "File too large").
    #[test]
    fn a_layer_that_cannot_be_written_names_its_file() {
        if std::env::var_os("IMAGE_TEST_FSIZE_CHILD").is_some() {
            let d = hpc_test_support::TmpDir::new("hpc-image", "layer-full");
            let p = d.join("app-layer.tmp");
            // 256 KiB that do not compress.
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            let data: Vec<u8> = (0..256 << 10)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let e =
                super::write_layer_file(vec![super::Entry::file("a", 0o644, data.clone())], 0, &p)
                    .unwrap_err();
            let m = format!("{e:#}");
            assert!(
                m.contains("app-layer.tmp") && m.contains("File too large"),
                "{m}"
            );
            // The layout's own files alike.
            let l = crate::oci::Layout::create(&d.join("oci")).unwrap();
            let m = format!("{:#}", l.put("x", &data).unwrap_err());
            assert!(
                m.contains("oci/blobs/sha256/") && m.contains("File too large"),
                "{m}"
            );
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let o = std::process::Command::new("bash")
            .args([
                "-c",
                "trap '' XFSZ; ulimit -f 8; exec \"$0\" --exact \
                 tar::tests::a_layer_that_cannot_be_written_names_its_file --nocapture",
            ])
            .arg(exe)
            .env("IMAGE_TEST_FSIZE_CHILD", "1")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Hostile pass 20: a link planted at the layer's temporary path
    /// (`--out`'s `app-layer.tmp`, the cache's `layer.tar.gz.tmp`) had the
    /// file it named replaced by the layer. The link is replaced, its target
    /// kept.
    #[test]
    fn a_layer_is_never_written_through_a_link() {
        let d = hpc_test_support::TmpDir::new("hpc-image", "layer-link");
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let tmp = d.join("app-layer.tmp");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        super::write_layer_file(vec![super::Entry::file("a", 0o644, b"x".to_vec())], 0, &tmp)
            .unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(&tmp).unwrap().is_file());
    }

    use super::*;

    /// A `--base` layer of 1.5 KiB whose one header claims 2^62 bytes (GNU's
    /// base-256 size field) was given to `Vec::with_capacity`: the allocation
    /// failed and the process aborted. It is now an error (the data ends early).
    #[test]
    fn a_header_claiming_a_huge_size_is_an_error_not_an_abort() {
        let mut h = [0u8; 512];
        h[..3].copy_from_slice(b"big");
        h[100..108].copy_from_slice(b"0000644\0");
        h[124] = 0x80;
        h[128..136].copy_from_slice(&(1u64 << 62).to_be_bytes());
        h[136..148].copy_from_slice(b"00000000000\0");
        h[156] = b'0';
        h[257..265].copy_from_slice(b"ustar  \0");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        let mut data = h.to_vec();
        data.extend([0u8; 1024]);
        assert!(read_tar(data.as_slice()).is_err());
    }

    fn tree() -> Vec<Entry> {
        vec![
            Entry::file("usr/local/bin/app", 0o755, b"#!/bin/sh\necho hi\n".to_vec()),
            Entry::symlink("usr/bin/app", "../local/bin/app"),
            Entry::dir("./usr/", 0o755),
            Entry {
                path: "etc/z".into(),
                mode: 0o644,
                uid: 0,
                gid: 0,
                kind: Kind::File(b"z".to_vec()),
            },
            Entry {
                path: "etc/a".into(),
                mode: 0o644,
                uid: 0,
                gid: 0,
                kind: Kind::Hardlink("etc/z".into()),
            },
        ]
    }

    #[test]
    fn paths_are_normalised() {
        assert_eq!(normalise_path("./usr/bin/"), "usr/bin");
        assert_eq!(normalise_path("/etc"), "etc");
        assert_eq!(normalise_path("./"), "");
        assert_eq!(normalise_path("."), "");
    }

    #[test]
    fn entry_order_does_not_matter() {
        let a = write_tar(tree(), 1_700_000_000, Vec::new()).unwrap();
        let mut rev = tree();
        rev.reverse();
        let b = write_tar(rev, 1_700_000_000, Vec::new()).unwrap();
        assert_eq!(a, b);
        let c = write_tar(tree(), 1_700_000_001, Vec::new()).unwrap();
        assert_ne!(a, c, "mtime is part of the archive");
    }

    #[test]
    fn hard_links_point_to_the_first_member() {
        let out = canonicalise(tree());
        let a = out.iter().find(|e| e.path == "etc/a").unwrap();
        let z = out.iter().find(|e| e.path == "etc/z").unwrap();
        assert_eq!(a.kind, Kind::File(b"z".to_vec()));
        assert_eq!(z.kind, Kind::Hardlink("etc/a".into()));
        // And it reads back in that order.
        let bytes = write_tar(tree(), 0, Vec::new()).unwrap();
        let back = read_tar(bytes.as_slice()).unwrap();
        let paths: Vec<&str> = back.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            ["etc/a", "etc/z", "usr", "usr/bin/app", "usr/local/bin/app"]
        );
    }

    #[test]
    fn parents_are_added() {
        let mut t = vec![Entry::file("a/b/c", 0o644, vec![])];
        add_parents(&mut t);
        let mut p: Vec<_> = t.iter().map(|e| e.path.clone()).collect();
        p.sort();
        assert_eq!(p, ["a", "a/b", "a/b/c"]);
    }

    #[test]
    fn small_tree_layer_has_a_fixed_digest() {
        // Changing this digest means every image's layers change: only on purpose.
        let bytes = write_tar(tree(), 1_700_000_000, Vec::new()).unwrap();
        assert_eq!(bytes.len() % 512, 0);
        let tar_digest = sha256(&bytes);
        let layer = write_layer(tree(), 1_700_000_000, Vec::new()).unwrap();
        assert_eq!(layer.diff_id, tar_digest);
        let again = write_layer(tree(), 1_700_000_000, Vec::new()).unwrap();
        assert_eq!(layer, again);
        assert_eq!(
            tar_digest,
            "sha256:319d4dcd1c88175dc15cd1dcb3af473dbcec7894ecd7ae46dc66d7d6c96ab827"
        );
    }

    #[test]
    fn long_names_round_trip() {
        let long = format!("opt/{}/file", "x".repeat(150));
        let t = vec![
            Entry::file(&long, 0o600, b"data".to_vec()),
            Entry::symlink("opt/link", &format!("/{long}")),
        ];
        let bytes = write_tar(t, 0, Vec::new()).unwrap();
        let back = read_tar(bytes.as_slice()).unwrap();
        assert_eq!(back[1].path, long);
        assert_eq!(back[1].mode, 0o600);
        assert_eq!(back[0].kind, Kind::Symlink(format!("/{long}")));
    }
}
