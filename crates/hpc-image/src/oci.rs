//! OCI image layout, manifest and config writing, and the `oci-archive` /
//! `docker-archive` tarballs made from a layout.
//!
//! JSON objects are built as `serde_json` values and written by [`to_bytes`] with
//! every object's keys sorted, whatever order `serde_json`'s map keeps (a
//! workspace that turns on its `preserve_order` feature keeps insertion order):
//! the same inputs give the same bytes and digests.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{json, Map, Value};

use super::tar::{sha256, DetTar};

/// Media type of an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of an OCI image config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of a gzip-compressed layer.
pub const LAYER_GZIP_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// Media type of an uncompressed layer.
pub const LAYER_TAR_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// A content-addressed blob in a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Media type.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
}

impl Descriptor {
    /// The hex part of the digest.
    pub fn hex(&self) -> &str {
        self.digest.trim_start_matches("sha256:")
    }

    /// The descriptor as OCI JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        })
    }
}

/// A layer: its blob descriptor and its uncompressed digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The blob as stored.
    pub blob: Descriptor,
    /// `sha256:` of the uncompressed tar.
    pub diff_id: String,
    /// One line for the config's history.
    pub created_by: String,
}

/// What goes into the image config besides the layers.
#[derive(Debug, Clone, Default)]
pub struct ImageConfig {
    /// `KEY=value` pairs, in order.
    pub env: Vec<String>,
    /// Entrypoint (empty: none).
    pub entrypoint: Vec<String>,
    /// Default command.
    pub cmd: Vec<String>,
    /// Working directory.
    pub working_dir: String,
    /// Labels (sorted by key when written).
    pub labels: std::collections::BTreeMap<String, String>,
    /// RFC 3339 creation time.
    pub created: String,
}

/// The config JSON (`application/vnd.oci.image.config.v1+json`).
pub fn config_json(cfg: &ImageConfig, layers: &[Layer]) -> Value {
    let mut c = Map::new();
    if !cfg.entrypoint.is_empty() {
        c.insert("Entrypoint".into(), json!(cfg.entrypoint));
    }
    if !cfg.cmd.is_empty() {
        c.insert("Cmd".into(), json!(cfg.cmd));
    }
    c.insert("Env".into(), json!(cfg.env));
    c.insert("WorkingDir".into(), json!(cfg.working_dir));
    let labels: Map<String, Value> = cfg
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    c.insert("Labels".into(), Value::Object(labels));
    let history: Vec<Value> = layers
        .iter()
        .map(|l| json!({"created": cfg.created, "created_by": l.created_by}))
        .collect();
    json!({
        "created": cfg.created,
        "architecture": "amd64",
        "os": "linux",
        "config": Value::Object(c),
        "rootfs": {
            "type": "layers",
            "diff_ids": layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>(),
        },
        "history": history,
    })
}

/// The manifest JSON.
pub fn manifest_json(config: &Descriptor, layers: &[Layer], annotations: &[(&str, &str)]) -> Value {
    let mut m = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": config.to_json(),
        "layers": layers.iter().map(|l| l.blob.to_json()).collect::<Vec<_>>(),
    });
    if !annotations.is_empty() {
        let a: Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        m["annotations"] = Value::Object(a);
    }
    m
}

/// The layout's `index.json`, naming the manifest `ref_name` (`name:tag`).
pub fn index_json(manifest: &Descriptor, ref_name: &str) -> Value {
    let mut d = manifest.to_json();
    d["annotations"] = json!({ "org.opencontainers.image.ref.name": ref_name });
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [d],
    })
}

/// The `docker save` style `manifest.json` for a docker-archive.
pub fn docker_manifest_json(config: &Descriptor, layers: &[Layer], repo_tag: &str) -> Value {
    json!([{
        "Config": format!("{}.json", config.hex()),
        "RepoTags": [repo_tag],
        "Layers": layers.iter().map(|l| format!("{}/layer.tar", l.blob.hex())).collect::<Vec<_>>(),
    }])
}

/// The `manifest.json` inside an `oci-archive`, as `docker save` of Docker 25 and
/// later writes it: `Config` and `Layers` name the layout's blobs, so that Docker
/// (20 and later, which read only this file) loads the same archive as Podman,
/// skopeo and Apptainer (which read `index.json`). Without it Docker takes the
/// archive for its pre-1.10 format and fails on `blobs/json`.
pub fn oci_docker_manifest_json(config: &Descriptor, layers: &[Layer], repo_tag: &str) -> Value {
    json!([{
        "Config": format!("blobs/sha256/{}", config.hex()),
        "RepoTags": [repo_tag],
        "Layers": layers
            .iter()
            .map(|l| format!("blobs/sha256/{}", l.blob.hex()))
            .collect::<Vec<_>>(),
    }])
}

/// The legacy `repositories` file `docker save` writes beside `manifest.json`:
/// the repository's tag names the top layer.
pub fn repositories_json(layers: &[Layer], repo_tag: &str) -> Value {
    let (repo, tag) = split_repo_tag(repo_tag);
    let top = layers.last().map(|l| l.blob.hex()).unwrap_or_default();
    json!({ repo: { tag: top } })
}

/// `name:tag` split at the tag's colon (a registry's `host:port/` stays in the name);
/// no tag is `latest`.
pub fn split_repo_tag(repo_tag: &str) -> (&str, &str) {
    match repo_tag.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (repo_tag, "latest"),
    }
}

/// Canonical bytes of a JSON value: compact, each object's keys in byte order
/// (what `serde_json` writes by default, kept when its `preserve_order` feature
/// is on).
pub fn to_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(&Sorted(v)).expect("JSON values serialise")
}

/// A JSON value that serialises its objects' keys sorted.
struct Sorted<'a>(&'a Value);

impl serde::Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = s.serialize_map(Some(keys.len()))?;
                for k in keys {
                    out.serialize_entry(k, &Sorted(&m[k]))?;
                }
                out.end()
            }
            Value::Array(a) => {
                let mut out = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    out.serialize_element(&Sorted(v))?;
                }
                out.end()
            }
            v => v.serialize(s),
        }
    }
}

/// An OCI image layout directory being written.
pub struct Layout {
    dir: PathBuf,
}

impl Layout {
    /// Creates (or empties) the layout directory; a file or a link there (a
    /// stopped build's, a planted one) is replaced, never followed.
    pub fn create(dir: &Path) -> Result<Self> {
        remove_any(dir)?;
        fs::create_dir_all(dir.join("blobs/sha256"))
            .with_context(|| format!("creating {}", hpc_io::message::path(dir)))?;
        write_named(
            &dir.join("oci-layout"),
            br#"{"imageLayoutVersion":"1.0.0"}"#,
        )?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// Where a blob with this digest lives.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    }

    /// Stores bytes as a blob.
    pub fn put(&self, media_type: &str, data: &[u8]) -> Result<Descriptor> {
        let digest = sha256(data);
        write_named(&self.blob_path(&digest), data)?;
        Ok(Descriptor {
            media_type: media_type.into(),
            digest,
            size: data.len() as u64,
        })
    }

    /// Stores an existing file (already hashed) as a blob, by hard link or copy.
    pub fn put_file(&self, src: &Path, desc: &Descriptor) -> Result<()> {
        let dst = self.blob_path(&desc.digest);
        if dst.exists() {
            return Ok(());
        }
        if fs::hard_link(src, &dst).is_err() {
            fs::copy(src, &dst)
                .with_context(|| format!("copying {}", hpc_io::message::path(src)))?;
        }
        Ok(())
    }

    /// Writes config, manifest and index; returns the manifest descriptor.
    pub fn finish(&self, cfg: &ImageConfig, layers: &[Layer], ref_name: &str) -> Result<Written> {
        let config_bytes = to_bytes(&config_json(cfg, layers));
        let config = self.put(CONFIG_MEDIA_TYPE, &config_bytes)?;
        let manifest_bytes = to_bytes(&manifest_json(&config, layers, &[]));
        let manifest = self.put(MANIFEST_MEDIA_TYPE, &manifest_bytes)?;
        write_named(
            &self.dir.join("index.json"),
            &to_bytes(&index_json(&manifest, ref_name)),
        )?;
        Ok(Written {
            manifest,
            config,
            layers: layers.to_vec(),
        })
    }

    /// Moves the layout to `to`, replacing what is there: an earlier layout, or
    /// a link (replaced, never followed: its target is kept).
    pub fn rename(&mut self, to: &Path) -> Result<()> {
        remove_any(to)?;
        fs::rename(&self.dir, to).with_context(|| {
            format!(
                "renaming {} to {}",
                hpc_io::message::path(&self.dir),
                hpc_io::message::path(to)
            )
        })?;
        self.dir = to.to_path_buf();
        Ok(())
    }

    /// The layout directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Writes `data` into `path` in the layout, a failure naming the file (a full
/// disk said "No space left on device" and nothing more).
fn write_named(path: &Path, data: &[u8]) -> Result<()> {
    fs::write(path, data).with_context(|| format!("writing {}", hpc_io::message::path(path)))
}

/// Removes what is at `path`: a folder with what it holds, a file, a link (not
/// its target); nothing there is no error.
fn remove_any(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => Ok(()),
    }
    .with_context(|| format!("removing {}", hpc_io::message::path(path)))
}

/// What [`Layout::finish`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// The manifest blob: its digest is the image's identity.
    pub manifest: Descriptor,
    /// The config blob.
    pub config: Descriptor,
    /// The layers, base first.
    pub layers: Vec<Layer>,
}

fn append_blob<W: Write>(t: &mut DetTar<W>, name: &str, path: &Path) -> Result<()> {
    let (f, size) = hpc_io::read::open_regular(path)?;
    t.append_reader(name, 0o644, size, std::io::BufReader::new(f))?;
    Ok(())
}

/// Writes an `oci-archive`: the layout's files in a deterministic tar, with
/// Docker's `manifest.json` and `repositories` beside them (see
/// [`oci_docker_manifest_json`]), so that one archive loads in Podman, skopeo,
/// Apptainer and Docker 20 or later.
pub fn write_oci_archive(
    layout: &Layout,
    w: &Written,
    out: &Path,
    repo_tag: &str,
    mtime: u64,
) -> Result<()> {
    let f = BufWriter::new(crate::create_new(out)?);
    let mut t = DetTar::new(f, mtime);
    use super::tar::Entry;
    t.append(&Entry::dir("blobs", 0o755))?;
    t.append(&Entry::dir("blobs/sha256", 0o755))?;
    let mut blobs: Vec<&Descriptor> = w.layers.iter().map(|l| &l.blob).collect();
    blobs.push(&w.config);
    blobs.push(&w.manifest);
    let mut hexes: Vec<&str> = blobs.iter().map(|d| d.hex()).collect();
    hexes.sort();
    hexes.dedup();
    for h in hexes {
        append_blob(
            &mut t,
            &format!("blobs/sha256/{h}"),
            &layout.blob_path(&format!("sha256:{h}")),
        )?;
    }
    append_blob(&mut t, "index.json", &layout.dir().join("index.json"))?;
    let manifest = to_bytes(&oci_docker_manifest_json(&w.config, &w.layers, repo_tag));
    t.append(&Entry::file("manifest.json", 0o644, manifest))?;
    append_blob(&mut t, "oci-layout", &layout.dir().join("oci-layout"))?;
    let repositories = to_bytes(&repositories_json(&w.layers, repo_tag));
    t.append(&Entry::file("repositories", 0o644, repositories))?;
    t.finish()?.flush()?;
    Ok(())
}

/// Writes a `docker-archive` (`docker save` format: `manifest.json`, `<config>.json`,
/// `<layer>/layer.tar`); layers stay gzip-compressed, which `docker load` and
/// `podman load` both accept.
pub fn write_docker_archive(
    layout: &Layout,
    w: &Written,
    out: &Path,
    repo_tag: &str,
    mtime: u64,
) -> Result<()> {
    use super::tar::Entry;
    let f = BufWriter::new(crate::create_new(out)?);
    let mut t = DetTar::new(f, mtime);
    let mut layer_dirs: Vec<&Layer> = w.layers.iter().collect();
    layer_dirs.sort_by(|a, b| a.blob.hex().cmp(b.blob.hex()));
    layer_dirs.dedup_by(|a, b| a.blob.digest == b.blob.digest);
    let cfg_name = format!("{}.json", w.config.hex());
    // Sorted by name: config hex and layer hexes interleave by their digests.
    let mut names: Vec<(String, Option<&Layer>)> = vec![(cfg_name.clone(), None)];
    names.extend(
        layer_dirs
            .iter()
            .map(|l| (l.blob.hex().to_string(), Some(*l))),
    );
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, layer) in names {
        match layer {
            None => append_blob(&mut t, &name, &layout.blob_path(&w.config.digest))?,
            Some(l) => {
                t.append(&Entry::dir(&name, 0o755))?;
                append_blob(
                    &mut t,
                    &format!("{name}/layer.tar"),
                    &layout.blob_path(&l.blob.digest),
                )?;
            }
        }
    }
    let manifest = to_bytes(&docker_manifest_json(&w.config, &w.layers, repo_tag));
    t.append(&Entry::file("manifest.json", 0o644, manifest))?;
    t.finish()?.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: a file at the new layout's path (`.oci.part`) failed
    /// the build with "removing …: Not a directory"; it is replaced, and a
    /// link there is replaced without its target being touched.
    #[test]
    fn a_layout_replaces_a_file_or_a_link_at_its_path() {
        let d = hpc_test_support::TmpDir::new("hpc-image", "layout-over-file");
        let file = d.join(".oci.part");
        std::fs::write(&file, "x").unwrap();
        let l = super::Layout::create(&file).unwrap();
        assert!(l.dir().join("oci-layout").is_file());
        let target = d.join("target");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("f"), "keep").unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        super::Layout::create(&link).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_dir());
        assert_eq!(std::fs::read_to_string(target.join("f")).unwrap(), "keep");
    }

    use super::*;

    fn layer() -> Layer {
        Layer {
            blob: Descriptor {
                media_type: LAYER_GZIP_MEDIA_TYPE.into(),
                digest: format!("sha256:{}", "a".repeat(64)),
                size: 10,
            },
            diff_id: format!("sha256:{}", "b".repeat(64)),
            created_by: "base".into(),
        }
    }

    #[test]
    fn config_has_the_oci_shape() {
        let mut cfg = ImageConfig {
            env: vec!["PATH=/usr/bin".into()],
            cmd: vec!["/usr/local/bin/hello".into()],
            working_dir: "/".into(),
            created: "1970-01-01T00:00:00Z".into(),
            ..Default::default()
        };
        cfg.labels
            .insert("org.opencontainers.image.revision".into(), "abc".into());
        let v = config_json(&cfg, &[layer()]);
        assert_eq!(v["architecture"], "amd64");
        assert_eq!(v["os"], "linux");
        assert_eq!(v["rootfs"]["type"], "layers");
        assert_eq!(v["rootfs"]["diff_ids"][0], layer().diff_id);
        assert_eq!(v["config"]["Cmd"][0], "/usr/local/bin/hello");
        assert!(v["config"].get("Entrypoint").is_none());
        assert_eq!(
            v["config"]["Labels"]["org.opencontainers.image.revision"],
            "abc"
        );
        assert_eq!(v["history"][0]["created_by"], "base");
        // Same input, same bytes.
        assert_eq!(to_bytes(&v), to_bytes(&config_json(&cfg, &[layer()])));
    }

    /// The exact bytes, and so the digests, of a small image's config, manifest
    /// and index. They are the image's identity: a change here changes every
    /// image built, so it must be on purpose. The same bytes come out with
    /// `serde_json`'s `preserve_order` on
    /// (`cargo test -p hpc-image --features serde_json/preserve_order`).
    #[test]
    fn config_manifest_and_index_bytes_are_pinned() {
        let mut cfg = ImageConfig {
            env: vec!["PATH=/usr/bin".into()],
            entrypoint: vec!["/init".into()],
            cmd: vec!["/usr/local/bin/hello".into()],
            working_dir: "/".into(),
            created: "1970-01-01T00:00:00Z".into(),
            ..Default::default()
        };
        cfg.labels.insert("z.last".into(), "2".into());
        cfg.labels.insert("a.first".into(), "1".into());
        let config_bytes = to_bytes(&config_json(&cfg, &[layer()]));
        let b = "b".repeat(64);
        assert_eq!(
            String::from_utf8(config_bytes.clone()).unwrap(),
            format!(
                concat!(
                    r#"{{"architecture":"amd64","config":{{"Cmd":["/usr/local/bin/hello"],"#,
                    r#""Entrypoint":["/init"],"Env":["PATH=/usr/bin"],"#,
                    r#""Labels":{{"a.first":"1","z.last":"2"}},"WorkingDir":"/"}},"#,
                    r#""created":"1970-01-01T00:00:00Z","history":[{{"created":"#,
                    r#""1970-01-01T00:00:00Z","created_by":"base"}}],"os":"linux","#,
                    r#""rootfs":{{"diff_ids":["sha256:{b}"],"type":"layers"}}}}"#,
                ),
                b = b
            )
        );
        let config = Descriptor {
            media_type: CONFIG_MEDIA_TYPE.into(),
            digest: sha256(&config_bytes),
            size: config_bytes.len() as u64,
        };
        assert_eq!(
            config.digest,
            "sha256:0b8c1f78e9d2aac08a33d265c0f6627490f229e6f17912362d08e2c387dc322a"
        );
        let manifest_bytes = to_bytes(&manifest_json(
            &config,
            &[layer()],
            &[("z", "1"), ("a", "2")],
        ));
        let a = "a".repeat(64);
        assert_eq!(
            String::from_utf8(manifest_bytes.clone()).unwrap(),
            format!(
                concat!(
                    r#"{{"annotations":{{"a":"2","z":"1"}},"config":{{"digest":"{}","#,
                    r#""mediaType":"{CONFIG_MEDIA_TYPE}","size":{}}},"layers":[{{"#,
                    r#""digest":"sha256:{a}","mediaType":"{LAYER_GZIP_MEDIA_TYPE}","#,
                    r#""size":10}}],"mediaType":"{MANIFEST_MEDIA_TYPE}","schemaVersion":2}}"#,
                ),
                config.digest,
                config_bytes.len(),
                a = a,
                CONFIG_MEDIA_TYPE = CONFIG_MEDIA_TYPE,
                LAYER_GZIP_MEDIA_TYPE = LAYER_GZIP_MEDIA_TYPE,
                MANIFEST_MEDIA_TYPE = MANIFEST_MEDIA_TYPE,
            )
        );
        assert_eq!(
            sha256(&manifest_bytes),
            "sha256:43b01b0402d6467c74ad08352002b838b9af0c5a55390a13efb57d9786a75bfc"
        );
        let manifest = Descriptor {
            media_type: MANIFEST_MEDIA_TYPE.into(),
            digest: sha256(&manifest_bytes),
            size: manifest_bytes.len() as u64,
        };
        assert_eq!(
            String::from_utf8(to_bytes(&index_json(&manifest, "localhost/hello:latest"))).unwrap(),
            format!(
                concat!(
                    r#"{{"manifests":[{{"annotations":{{"org.opencontainers.image.ref.name":"#,
                    r#""localhost/hello:latest"}},"digest":"{}","mediaType":"#,
                    r#""{MANIFEST_MEDIA_TYPE}","size":{}}}],"#,
                    r#""mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}}"#,
                ),
                manifest.digest,
                manifest.size,
                MANIFEST_MEDIA_TYPE = MANIFEST_MEDIA_TYPE,
            )
        );
    }

    /// The `oci-archive` carries Docker's `manifest.json` and `repositories`
    /// beside the layout, pointing into `blobs/` (Docker reads only those), and
    /// the same inputs give the same bytes.
    #[test]
    fn the_oci_archive_also_carries_dockers_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::create(&dir.path().join("layout")).unwrap();
        let blob = layout
            .put(LAYER_GZIP_MEDIA_TYPE, b"not really gzip")
            .unwrap();
        let l = Layer { blob, ..layer() };
        let w = layout
            .finish(
                &ImageConfig::default(),
                std::slice::from_ref(&l),
                "localhost/x:1",
            )
            .unwrap();
        let (a, b) = (dir.path().join("a.tar"), dir.path().join("b.tar"));
        write_oci_archive(&layout, &w, &a, "localhost/x:1", 7).unwrap();
        write_oci_archive(&layout, &w, &b, "localhost/x:1", 7).unwrap();
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
        let entries = super::super::tar::read_tar(fs::File::open(&a).unwrap()).unwrap();
        let names: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        let mut blobs = [w.config.hex(), w.manifest.hex(), l.blob.hex()]
            .map(|h| format!("blobs/sha256/{h}"))
            .to_vec();
        blobs.sort();
        let mut want = vec!["blobs", "blobs/sha256"];
        want.extend(blobs.iter().map(String::as_str));
        want.extend(["index.json", "manifest.json", "oci-layout", "repositories"]);
        assert_eq!(names, want);
        let file = |name: &str| -> Value {
            let e = entries.iter().find(|e| e.path == name).unwrap();
            match &e.kind {
                super::super::tar::Kind::File(d) => serde_json::from_slice(d).unwrap(),
                k => panic!("{name} is {k:?}"),
            }
        };
        let m = file("manifest.json");
        assert_eq!(m[0]["Config"], format!("blobs/sha256/{}", w.config.hex()));
        assert_eq!(m[0]["Layers"][0], format!("blobs/sha256/{}", l.blob.hex()));
        assert_eq!(m[0]["RepoTags"][0], "localhost/x:1");
        assert_eq!(file("repositories")["localhost/x"]["1"], l.blob.hex());
    }

    #[test]
    fn repo_tags_split_at_the_tag() {
        assert_eq!(split_repo_tag("localhost/x:1"), ("localhost/x", "1"));
        assert_eq!(split_repo_tag("host:5000/x"), ("host:5000/x", "latest"));
        assert_eq!(split_repo_tag("x"), ("x", "latest"));
    }

    #[test]
    fn manifest_and_index_have_the_oci_shape() {
        let cfg = Descriptor {
            media_type: CONFIG_MEDIA_TYPE.into(),
            digest: format!("sha256:{}", "c".repeat(64)),
            size: 5,
        };
        let m = manifest_json(&cfg, &[layer()], &[]);
        assert_eq!(m["schemaVersion"], 2);
        assert_eq!(m["mediaType"], MANIFEST_MEDIA_TYPE);
        assert_eq!(m["config"]["mediaType"], CONFIG_MEDIA_TYPE);
        assert_eq!(m["layers"][0]["mediaType"], LAYER_GZIP_MEDIA_TYPE);
        assert_eq!(m["layers"][0]["size"], 10);
        let i = index_json(&cfg, "localhost/hello:latest");
        assert_eq!(
            i["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
            "localhost/hello:latest"
        );
        let d = docker_manifest_json(&cfg, &[layer()], "localhost/hello:latest");
        assert_eq!(d[0]["Config"], format!("{}.json", "c".repeat(64)));
        assert_eq!(d[0]["Layers"][0], format!("{}/layer.tar", "a".repeat(64)));
        assert_eq!(d[0]["RepoTags"][0], "localhost/hello:latest");
    }
}
