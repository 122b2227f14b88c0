//! The base file system layer: made with `mmdebstrap`, normalised into a
//! deterministic layer and cached under `<cache>/<key>/` (`<target>/hpc-image-cache`
//! by default), or taken from an existing OCI layout / archive (`--base`).

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::oci::{Descriptor, Layer, LAYER_GZIP_MEDIA_TYPE, LAYER_TAR_MEDIA_TYPE};
use super::tar::{read_tar, sha256, Entry, Kind};
use super::MpiModel;

/// Bump when [`normalise`] changes: it is part of the cache key.
const NORMALISE_VERSION: u32 = 1;

/// Packages of the hybrid model's base: Open MPI with PMIx, UCX and verbs, so that
/// ranks use the MPI inside the image and talk PMIx to the host's Slurm.
pub const HYBRID_PACKAGES: &[&str] = &[
    "openmpi-bin",
    "libopenmpi3",
    "libpmix2",
    "libucx0",
    "libibverbs1",
    "ibverbs-providers",
    "libhwloc15",
];

/// What the base is made from; its hash is the cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseSpec {
    /// Debian suite.
    pub suite: String,
    /// mmdebstrap variant.
    pub variant: String,
    /// Extra packages (`--include`).
    pub packages: Vec<String>,
}

impl BaseSpec {
    /// The base for an MPI model.
    pub fn for_model(model: MpiModel) -> Self {
        let packages = match model {
            MpiModel::Hybrid => HYBRID_PACKAGES.iter().map(|s| s.to_string()).collect(),
            MpiModel::Bind => Vec::new(),
        };
        Self {
            suite: "bookworm".into(),
            variant: "minbase".into(),
            packages,
        }
    }

    /// Cache key: a hash of suite, variant, sorted package list and normaliser version.
    pub fn key(&self) -> String {
        let mut p = self.packages.clone();
        p.sort();
        let v = json!({
            "suite": self.suite,
            "variant": self.variant,
            "packages": p,
            "normalise": NORMALISE_VERSION,
        });
        let h = sha256(&serde_json::to_vec(&v).expect("json"));
        format!(
            "{}-{}-{}",
            self.suite,
            self.variant,
            &h.trim_start_matches("sha256:")[..16]
        )
    }

    /// The mmdebstrap command line (without the output path).
    pub fn mmdebstrap_args(&self) -> Vec<String> {
        let mut a = vec![
            "--quiet".to_string(),
            format!("--variant={}", self.variant),
            "--format=tar".to_string(),
        ];
        if !self.packages.is_empty() {
            a.push(format!("--include={}", self.packages.join(",")));
        }
        a.push(self.suite.clone());
        a
    }
}

/// A base ready to stack an app layer on.
#[derive(Debug, Clone)]
pub struct Base {
    /// Its layers, bottom first, as blob files plus descriptors.
    pub layers: Vec<(PathBuf, Layer)>,
    /// Every path in the base (normalised, no leading `/`).
    pub files: BTreeSet<String>,
    /// Where it came from, for labels and messages.
    pub source: String,
    /// Whether it came from the cache.
    pub cached: bool,
}

/// Whether a path of the mmdebstrap tree goes into the layer. Device nodes and the
/// contents of `/dev`, `/proc`, `/sys`, `/run` and `/tmp` are left to the runtime;
/// apt's caches, logs, manual pages, info and translations are dropped (licence texts
/// under `/usr/share/doc/*/copyright` stay).
pub fn keep_base_path(p: &str) -> bool {
    let under = |d: &str| p.starts_with(d) && p.len() > d.len() && p.as_bytes()[d.len()] == b'/';
    for d in ["dev", "proc", "sys", "run", "tmp"] {
        if under(d) {
            return false;
        }
    }
    for d in [
        "var/cache/apt",
        "var/lib/apt/lists",
        "var/log",
        "usr/share/man",
        "usr/share/info",
        "usr/share/locale",
    ] {
        if under(d) {
            return false;
        }
    }
    if under("usr/share/doc") {
        let rest = &p["usr/share/doc/".len()..];
        return !rest.contains('/') || rest.ends_with("/copyright");
    }
    true
}

/// Turns an mmdebstrap tree into layer entries: dropped paths removed, device nodes
/// removed, owners kept as numbers (names dropped).
pub fn normalise(entries: Vec<Entry>) -> Vec<Entry> {
    entries
        .into_iter()
        .filter(|e| !e.path.is_empty() && keep_base_path(&e.path))
        .filter(|e| !matches!(e.kind, Kind::Char(..) | Kind::Block(..) | Kind::Fifo))
        .collect()
}

/// Makes sure mmdebstrap is there: installs it as root, otherwise says how.
fn need_mmdebstrap() -> Result<()> {
    if crate::sys::has("mmdebstrap") {
        return Ok(());
    }
    if crate::sys::is_root() && crate::sys::has("apt-get") {
        say!("    mmdebstrap is missing: installing it");
        crate::sys::apt(&["mmdebstrap"])?;
        if crate::sys::has("mmdebstrap") {
            return Ok(());
        }
    }
    bail!(
        "mmdebstrap is not installed; it makes the Debian base file system.\n\
         install it with:  apt-get install mmdebstrap\n\
         or give an existing base with --base PATH (OCI layout directory, oci-archive \
         or docker-archive)"
    )
}

/// Returns the cached base for `spec`, making it first if needed. `epoch` is used as
/// mmdebstrap's `SOURCE_DATE_EPOCH` and as every mtime in the layer when the cache
/// entry is made; a cached base keeps the epoch it was made with, so that the same
/// base layer (same digest) is shared by every build until the cache is removed.
pub fn ensure(spec: &BaseSpec, cache_root: &Path, epoch: u64) -> Result<Base> {
    let dir = cache_root.join(spec.key());
    let meta_path = dir.join("layer.json");
    if let Ok(text) =
        hpc_io::read::read_regular_to_string(&meta_path, hpc_io::read::MAX_METADATA_BYTES)
    {
        if let Ok(base) = load_cached(&dir, &text) {
            return Ok(base);
        }
        say!(
            "    cached base in {} is incomplete: remaking it",
            hpc_io::message::path(&dir)
        );
    }
    fs::create_dir_all(&dir)
        .with_context(|| format!("creating {}", hpc_io::message::path(&dir)))?;
    let rootfs = dir.join("rootfs.tar");
    if !rootfs.exists() {
        need_mmdebstrap()?;
        let mut cmd = Command::new("mmdebstrap");
        cmd.args(spec.mmdebstrap_args())
            .env("SOURCE_DATE_EPOCH", epoch.to_string());
        say!(
            "    mmdebstrap {} {} (about 2 minutes)",
            spec.mmdebstrap_args().join(" "),
            hpc_io::message::path(&dir.join(ROOTFS_TMP))
        );
        make_rootfs(cmd, &dir).map_err(|e| {
            if e.is::<crate::sys::Interrupted>() {
                return e;
            }
            e.context(format!(
                "check the Debian mirror in /etc/apt/sources.list and the package names \
                 (apt-cache policy {}), or give an existing base with --base PATH",
                spec.packages.join(" ")
            ))
        })?;
    }
    let entries = read_tar(BufReader::new(hpc_io::read::open_regular(&rootfs)?.0))
        .with_context(|| format!("reading {}", hpc_io::message::path(&rootfs)))?;
    let entries = normalise(entries);
    let files: BTreeSet<String> = entries.iter().map(|e| e.path.clone()).collect();
    let tmp = dir.join("layer.tar.gz.tmp");
    // A cache several workspaces share: nothing in it is written through a link.
    let d = crate::tar::write_layer_file(entries, epoch, &tmp)?;
    let blob = dir.join("layer.tar.gz");
    fs::rename(&tmp, &blob)?;
    crate::write_new(
        &dir.join("files.txt"),
        files
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
            .as_bytes(),
        0o644,
    )?;
    let meta = json!({
        "digest": d.digest,
        "size": d.size,
        "diff_id": d.diff_id,
        "epoch": epoch,
        "mmdebstrap": spec.mmdebstrap_args(),
    });
    crate::write_new(&meta_path, &serde_json::to_vec_pretty(&meta)?, 0o644)?;
    let mut base = load_cached(&dir, &serde_json::to_string(&meta)?)?;
    base.cached = false;
    Ok(base)
}

/// The name mmdebstrap writes the root file system under, renamed to
/// `rootfs.tar` once it is complete.
const ROOTFS_TMP: &str = "rootfs.tar.tmp";

/// Runs `tool` (mmdebstrap and its arguments, less the output path, which is
/// added) to write the cache entry's root file system: to a temporary name,
/// renamed to `rootfs.tar` only when the tool succeeded. A temporary file left
/// by a build that was killed is removed first; a build stopped by a signal
/// stops the tool and its children and removes what it wrote
/// ([`crate::sys::output_guarded`]), so no later build takes a part for the whole.
fn make_rootfs(mut tool: Command, dir: &Path) -> Result<()> {
    let tmp = dir.join(ROOTFS_TMP);
    match fs::remove_file(&tmp) {
        Ok(()) => say!(
            "    removed {}: a build stopped while writing it",
            hpc_io::message::path(&tmp)
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("removing {}", hpc_io::message::path(&tmp)))
        }
    }
    let out = crate::sys::output_guarded(tool.arg(&tmp));
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e.context("running mmdebstrap"));
        }
    };
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        bail!(
            "mmdebstrap could not make the base ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
        );
    }
    fs::rename(&tmp, dir.join("rootfs.tar"))
        .with_context(|| format!("renaming {} to rootfs.tar", hpc_io::message::path(&tmp)))
}

fn load_cached(dir: &Path, meta: &str) -> Result<Base> {
    let v: Value = serde_json::from_str(meta)?;
    let blob = dir.join("layer.tar.gz");
    let size = fs::metadata(&blob)?.len();
    let get =
        |k: &str| -> Result<String> { Ok(v[k].as_str().context("bad layer.json")?.to_string()) };
    if v["size"].as_u64() != Some(size) {
        bail!("size mismatch");
    }
    let files = hpc_io::read::read_regular_to_string(
        dir.join("files.txt"),
        hpc_io::read::MAX_METADATA_BYTES,
    )?
    .lines()
    .map(str::to_string)
    .collect();
    let args: Vec<String> = v["mmdebstrap"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    Ok(Base {
        layers: vec![(
            blob,
            Layer {
                blob: Descriptor {
                    media_type: LAYER_GZIP_MEDIA_TYPE.into(),
                    digest: get("digest")?,
                    size,
                },
                diff_id: get("diff_id")?,
                created_by: format!("mmdebstrap {}", args.join(" ")),
            },
        )],
        files,
        source: format!("mmdebstrap {}", args.join(" ")),
        cached: true,
    })
}

/// A layer's tar, gunzipped where it is compressed, refused when it unpacks to
/// more than `max` bytes (a few MiB of gzip can hold many GiB of zeros: a base
/// layer was unpacked into memory whatever its size).
fn gunzip_if_needed(data: Vec<u8>, max: u64) -> Result<Vec<u8>> {
    if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(data.as_slice())
            .take(max.saturating_add(1))
            .read_to_end(&mut out)?;
        if out.len() as u64 > max {
            bail!(
                "a layer of {} bytes of gzip unpacks to more than {max} bytes, the most \
                 this machine's memory holds (MemAvailable, at most {} bytes)",
                data.len(),
                hpc_io::read::MAX_DATA_BYTES
            );
        }
        Ok(out)
    } else {
        Ok(data)
    }
}

/// The most bytes a base layer may unpack to: the memory available, at most
/// [`hpc_io::read::MAX_DATA_BYTES`].
fn max_layer_bytes() -> u64 {
    hpc_io::read::mem_available().map_or(hpc_io::read::MAX_DATA_BYTES, |m| {
        m.min(hpc_io::read::MAX_DATA_BYTES)
    })
}

/// What `--base PATH` must look like, checked before anything is built: a
/// directory holding an OCI layout's `index.json` or a docker-archive's
/// `manifest.json`, or a regular file that begins with a tar header (an
/// oci-archive or a docker-archive). `None` when it does; else why not, for a
/// message that names the flag. A directory of neither, an empty file or a text
/// file was found only after the release build, as a failed import (status 1).
pub fn check_shape(path: &Path) -> Option<String> {
    let md = match fs::metadata(path) {
        Ok(md) => md,
        Err(_) => {
            return Some(
                "no such file or directory (an OCI layout directory, an oci-archive or a \
                 docker-archive)"
                    .into(),
            )
        }
    };
    if md.is_dir() {
        if ["index.json", "manifest.json"]
            .iter()
            .any(|f| path.join(f).is_file())
        {
            return None;
        }
        return Some(
            "neither an OCI layout (index.json) nor a docker-archive (manifest.json)".into(),
        );
    }
    if !md.is_file() {
        // A device or a FIFO would be read without end after the build.
        return Some(
            "not a directory or a regular file (an OCI layout directory, an oci-archive or \
             a docker-archive)"
                .into(),
        );
    }
    let mut header = [0u8; 512];
    let read = hpc_io::read::open_regular(path)
        .map_err(|e| e.to_string())
        .and_then(|(mut f, _)| f.read_exact(&mut header).map_err(|e| e.to_string()));
    match read {
        Err(e) => Some(format!(
            "not a tar archive (an oci-archive or a docker-archive): {e}"
        )),
        Ok(()) if !is_tar_header(&header) => Some(
            "not a tar archive (an oci-archive or a docker-archive): its first 512 bytes \
             are no tar header"
                .into(),
        ),
        Ok(()) => None,
    }
}

/// Whether `h` is a tar header block: its checksum field (octal, at bytes
/// 148..156) is the sum of its bytes with that field taken as blanks.
fn is_tar_header(h: &[u8; 512]) -> bool {
    let field = &h[148..156];
    let digits: String = field
        .iter()
        .take_while(|&&b| b != 0)
        .map(|&b| b as char)
        .collect();
    let Ok(stored) = u32::from_str_radix(digits.trim(), 8) else {
        return false;
    };
    let sum: u32 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u32::from(b)
            }
        })
        .sum();
    stored == sum
}

/// `rel` of the base at `root` (a path its manifest names), refused when it
/// leads outside `root`: a manifest naming `../x` or `/etc/x`, or a link in the
/// layout to elsewhere, would copy a file of this machine into the image.
fn inside(root: &Path, rel: &Path, what: &str) -> Result<PathBuf> {
    let p = root.join(rel);
    let real_root = fs::canonicalize(root).with_context(|| hpc_io::message::path(root))?;
    let real =
        fs::canonicalize(&p).with_context(|| format!("{what} {}", hpc_io::message::path(&p)))?;
    if !real.starts_with(&real_root) {
        bail!(
            "the base names {what} {}, which lies outside it ({}): not taken into the image",
            hpc_io::message::path(rel),
            hpc_io::message::path(&real)
        );
    }
    Ok(real)
}

/// Uses an existing image as the base: an OCI layout directory, an `oci-archive` or a
/// `docker-archive` tarball. Its layers are copied as they are (digests unchanged).
pub fn import(path: &Path, work: &Path) -> Result<Base> {
    let root = if path.is_dir() {
        path.to_path_buf()
    } else if path.is_file() {
        let dir = work.join("imported-base");
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        // The user's --base: opened without blocking, a regular file only.
        tar::Archive::new(BufReader::new(hpc_io::read::open_regular(path)?.0))
            .unpack(&dir)
            .with_context(|| format!("unpacking {}", hpc_io::message::path(path)))?;
        dir
    } else if path.exists() {
        // A FIFO, a device or a socket, named by what it is (never opened blocking).
        match hpc_io::read::open_regular(path) {
            Err(e) => bail!("--base: {e}"),
            Ok(_) => bail!(
                "--base {}: changed while it was looked at",
                hpc_io::message::path(path)
            ),
        }
    } else {
        bail!(
            "--base {}: no such file or directory",
            hpc_io::message::path(path)
        );
    };
    let (config_path, layer_paths): (PathBuf, Vec<PathBuf>) = if root.join("index.json").exists() {
        let blob = |d: &str| {
            inside(
                &root,
                &Path::new("blobs/sha256").join(d.trim_start_matches("sha256:")),
                "the blob",
            )
        };
        let index: Value = serde_json::from_slice(&hpc_io::read::read_regular(
            root.join("index.json"),
            hpc_io::read::MAX_METADATA_BYTES,
        )?)?;
        let md = index["manifests"][0]["digest"]
            .as_str()
            .context("index.json has no manifest")?;
        let m: Value = serde_json::from_slice(&hpc_io::read::read_regular(
            blob(md)?,
            hpc_io::read::MAX_METADATA_BYTES,
        )?)?;
        let cfg = blob(
            m["config"]["digest"]
                .as_str()
                .context("manifest has no config")?,
        )?;
        let layers = m["layers"]
            .as_array()
            .context("manifest has no layers")?
            .iter()
            .filter_map(|l| l["digest"].as_str().map(blob))
            .collect::<Result<_>>()?;
        (cfg, layers)
    } else if root.join("manifest.json").exists() {
        let m: Value = serde_json::from_slice(&hpc_io::read::read_regular(
            root.join("manifest.json"),
            hpc_io::read::MAX_METADATA_BYTES,
        )?)?;
        let cfg = inside(
            &root,
            Path::new(
                m[0]["Config"]
                    .as_str()
                    .context("manifest.json has no Config")?,
            ),
            "the config",
        )?;
        let layers = m[0]["Layers"]
            .as_array()
            .context("manifest.json has no Layers")?
            .iter()
            .filter_map(|l| l.as_str().map(|s| inside(&root, Path::new(s), "the layer")))
            .collect::<Result<_>>()?;
        (cfg, layers)
    } else {
        bail!(
            "--base {}: neither an OCI layout (index.json) nor a docker-archive (manifest.json)",
            hpc_io::message::path(path)
        );
    };
    let cfg: Value = serde_json::from_slice(&hpc_io::read::read_regular(
        &config_path,
        hpc_io::read::MAX_METADATA_BYTES,
    )?)?;
    let diff_ids: Vec<String> = cfg["rootfs"]["diff_ids"]
        .as_array()
        .context("base config has no rootfs.diff_ids")?
        .iter()
        .filter_map(|d| d.as_str().map(String::from))
        .collect();
    if diff_ids.len() != layer_paths.len() {
        bail!(
            "base config lists {} layers, manifest {}",
            diff_ids.len(),
            layer_paths.len()
        );
    }
    let mut files = BTreeSet::new();
    let mut layers = Vec::new();
    for (p, diff_id) in layer_paths.into_iter().zip(diff_ids) {
        let data = hpc_io::read::read_regular(&p, hpc_io::read::MAX_DATA_BYTES)
            .context("reading a layer")?;
        let gz = data.starts_with(&[0x1f, 0x8b]);
        let digest = sha256(&data);
        let size = data.len() as u64;
        let tar = gunzip_if_needed(data, max_layer_bytes())
            .with_context(|| format!("the base's layer {}", hpc_io::message::path(&p)))?;
        for e in read_tar(tar.as_slice())
            .with_context(|| format!("the base's layer {}", hpc_io::message::path(&p)))?
        {
            files.insert(e.path);
        }
        layers.push((
            p,
            Layer {
                blob: Descriptor {
                    media_type: if gz {
                        LAYER_GZIP_MEDIA_TYPE
                    } else {
                        LAYER_TAR_MEDIA_TYPE
                    }
                    .into(),
                    digest,
                    size,
                },
                diff_id,
                created_by: format!("base {}", path.display()),
            },
        ));
    }
    Ok(Base {
        layers,
        files,
        source: path.display().to_string(),
        cached: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gzip layer of the base is unpacked in memory: one of a few MiB that
    /// unpacks to many GiB was read whole. It is refused past the bound.
    #[test]
    fn a_layer_unpacking_past_the_bound_is_refused() {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![0u8; 2 << 20]).unwrap();
        let gz = gz.finish().unwrap();
        let e = gunzip_if_needed(gz.clone(), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unpacks to more than 1048576 bytes"), "{e}");
        assert_eq!(gunzip_if_needed(gz, 2 << 20).unwrap().len(), 2 << 20);
    }

    /// A `--base` that is a FIFO or a device is refused at once, naming what it is.
    #[test]
    fn a_base_that_is_a_fifo_or_a_device_is_refused_at_once() {
        let dir = hpc_test_support::TmpDir::new("hpc-image", "base-fifo");
        let fifo = dir.join("base.tar");
        let _ = fs::remove_file(&fifo);
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let t = std::time::Instant::now();
        let e = import(&fifo, &dir).unwrap_err().to_string();
        assert!(e.contains("base.tar is a FIFO, not a regular file"), "{e}");
        let e = import(Path::new("/dev/zero"), &dir)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        let _ = fs::remove_dir_all(&dir);
    }

    /// Hostile-user pass 15: a base whose manifest names files outside it
    /// (`../secret/config.json`, an absolute layer path, a blob digest of
    /// `sha256:../..`) had those files of this machine copied into the image.
    #[test]
    fn a_base_naming_files_outside_it_is_refused() {
        let d = hpc_test_support::TmpDir::unmade("hpc-image", "base-escape");
        let (secret, base) = (d.join("secret"), d.join("base"));
        fs::create_dir_all(&secret).unwrap();
        fs::create_dir_all(base.join("blobs/sha256")).unwrap();
        let mut layer = Vec::new();
        {
            let mut t = ::tar::Builder::new(&mut layer);
            let mut h = ::tar::Header::new_gnu();
            h.set_size(4);
            h.set_mode(0o644);
            h.set_cksum();
            t.append_data(&mut h, "secret.txt", &b"shh\n"[..]).unwrap();
            t.finish().unwrap();
        }
        fs::write(secret.join("layer.tar"), &layer).unwrap();
        let config = json!({"rootfs": {"type": "layers", "diff_ids": [format!("sha256:{}", sha256(&layer))]}});
        fs::write(secret.join("config.json"), config.to_string()).unwrap();
        let layer_path = secret.join("layer.tar").display().to_string();
        for manifest in [
            json!([{"Config": "../secret/config.json", "Layers": [layer_path]}]),
            json!([{"Config": "../secret/config.json", "Layers": ["../secret/layer.tar"]}]),
        ] {
            fs::write(base.join("manifest.json"), manifest.to_string()).unwrap();
            let e = import(&base, &d).unwrap_err().to_string();
            assert!(e.contains("lies outside it"), "{e}");
        }
        fs::remove_file(base.join("manifest.json")).unwrap();
        fs::write(
            base.join("index.json"),
            json!({"manifests": [{"digest": "sha256:../../../secret/config.json"}]}).to_string(),
        )
        .unwrap();
        let e = import(&base, &d).unwrap_err().to_string();
        assert!(e.contains("lies outside it"), "{e}");
        // What is no image at all is said before the build.
        assert!(check_shape(&base).is_none());
        assert!(check_shape(&secret.join("layer.tar")).is_none());
        assert!(check_shape(&secret)
            .unwrap()
            .contains("neither an OCI layout"));
        assert!(check_shape(&secret.join("config.json"))
            .unwrap()
            .contains("not a tar archive"));
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn cache_key_ignores_package_order_and_separates_models() {
        let a = BaseSpec::for_model(MpiModel::Hybrid);
        let mut b = a.clone();
        b.packages.reverse();
        assert_eq!(a.key(), b.key());
        assert_ne!(a.key(), BaseSpec::for_model(MpiModel::Bind).key());
        assert!(a.key().starts_with("bookworm-minbase-"));
    }

    #[test]
    fn mmdebstrap_command_line() {
        let a = BaseSpec::for_model(MpiModel::Hybrid).mmdebstrap_args();
        assert!(a.contains(&"--variant=minbase".to_string()));
        assert!(a.iter().any(|x| x.starts_with("--include=openmpi-bin,")));
        assert_eq!(a.last().unwrap(), "bookworm");
        let b = BaseSpec::for_model(MpiModel::Bind).mmdebstrap_args();
        assert!(!b.iter().any(|x| x.starts_with("--include")));
    }

    #[test]
    fn base_filter() {
        assert!(keep_base_path("dev"));
        assert!(!keep_base_path("dev/null"));
        assert!(keep_base_path("devices"));
        assert!(keep_base_path("var/log"));
        assert!(!keep_base_path("var/log/dpkg.log"));
        assert!(!keep_base_path("usr/share/man/man1/ls.1.gz"));
        assert!(keep_base_path("usr/share/doc/libc6"));
        assert!(keep_base_path("usr/share/doc/libc6/copyright"));
        assert!(!keep_base_path("usr/share/doc/libc6/changelog.Debian.gz"));
        assert!(keep_base_path("usr/lib/x86_64-linux-gnu/libc.so.6"));
    }

    /// Set in the process that plays the killed build: the cache folder.
    const KILLED_BUILD_CACHE: &str = "IMAGE_TEST_KILLED_BUILD_CACHE";
    /// Where the stand-in tool writes its process id.
    const KILLED_BUILD_PID: &str = "IMAGE_TEST_KILLED_BUILD_PID";

    /// The killed build: [`make_rootfs`] with a stand-in mmdebstrap that writes
    /// into its output for ever (its pid first).
    fn play_the_killed_build(cache: &Path) -> ! {
        let pid = std::env::var_os(KILLED_BUILD_PID).unwrap();
        let mut tool = Command::new("sh");
        tool.arg("-c")
            // A child that outlives the tool unless its group is stopped (as
            // cargo's rustc does).
            .arg(r#"sleep 300 & echo $$ > "$PIDFILE"; while :; do echo part >> "$0"; sleep 0.05; done"#)
            .env("PIDFILE", pid);
        let e = make_rootfs(tool, cache).unwrap_err();
        std::process::exit(crate::exit_status(&e).into())
    }

    fn gone(pid: i32) -> bool {
        // A zombie is gone too: it runs nothing.
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.is_empty() || stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z'))
    }

    fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let t = std::time::Instant::now();
        while !f() {
            assert!(t.elapsed().as_secs() < 30, "waited 30 s for {what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `cargo xtask image` stopped by SIGTERM, SIGINT or SIGHUP, or killed
    /// outright, while mmdebstrap writes the base: the tool is stopped with its
    /// process group (a child of it too: by the build for a signal it can catch,
    /// by the build's guardian after SIGKILL) and the cache
    /// holds no `rootfs.tar` a later build would take as complete; the next build
    /// starts its own afresh.
    #[test]
    fn a_killed_build_stops_its_tool_and_leaves_no_cache_entry() {
        if let Some(cache) = std::env::var_os(KILLED_BUILD_CACHE) {
            play_the_killed_build(Path::new(&cache));
        }
        for (sig, name) in [
            (libc::SIGTERM, "SIGTERM"),
            (libc::SIGINT, "SIGINT"),
            (libc::SIGHUP, "SIGHUP"),
            (libc::SIGKILL, "SIGKILL"),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let cache = tmp.path().join("cache");
            fs::create_dir(&cache).unwrap();
            let pidfile = tmp.path().join("tool.pid");
            let mut build = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "base::tests::a_killed_build_stops_its_tool_and_leaves_no_cache_entry",
                    "--nocapture",
                ])
                .env(KILLED_BUILD_CACHE, &cache)
                .env(KILLED_BUILD_PID, &pidfile)
                .spawn()
                .unwrap();
            let part = cache.join(ROOTFS_TMP);
            wait_until("the tool to write", || {
                fs::metadata(&part).is_ok_and(|m| m.len() > 0)
                    && fs::read_to_string(&pidfile).is_ok_and(|p| p.ends_with('\n'))
            });
            let tool: i32 = fs::read_to_string(&pidfile)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // SAFETY: kill has no memory effects.
            assert_eq!(unsafe { libc::kill(build.id() as i32, sig) }, 0);
            let status = build.wait().unwrap();
            wait_until(&format!("the tool to end after {name}"), || gone(tool));
            assert!(!cache.join("rootfs.tar").exists(), "{name}");
            assert!(!cache.join("layer.json").exists(), "{name}");
            // No member of the tool's group is left, its long child too (after
            // SIGKILL, by the guardian).
            wait_until(&format!("the tool's group to end after {name}"), || {
                // SAFETY: as above.
                let alive = unsafe { libc::kill(-tool, 0) };
                alive != 0
            });
            if sig != libc::SIGKILL {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(status.code(), Some(128 + sig), "{name}: {status:?}");
                assert!(!part.exists(), "{name}: the part written was left");
                assert_eq!(status.signal(), None);
            }
            // The next build writes the whole anew, the part left (SIGKILL) removed.
            let mut tool = Command::new("sh");
            tool.arg("-c").arg(r#"echo whole > "$0""#);
            make_rootfs(tool, &cache).unwrap();
            assert_eq!(
                fs::read_to_string(cache.join("rootfs.tar")).unwrap(),
                "whole\n"
            );
            assert!(!part.exists());
        }
    }
}
