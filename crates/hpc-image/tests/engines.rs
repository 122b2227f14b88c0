//! Every archive the builder writes loads, and runs, in every container engine that
//! is installed: the `oci-archive` (the default) and the `docker-archive` in Docker
//! and Podman, a SIF built from the `oci-archive` in Apptainer, and skopeo reads the
//! `oci-archive`.
//!
//! The image is tiny: the host's `/bin/sh` and the libraries `ldd` names, with a
//! default command that prints a fixed line. An engine that is not installed (or
//! whose daemon does not answer) is skipped with the reason printed, except under
//! `HPC_TEST_CONTAINERS=1` (CI, which installs Docker, Podman, skopeo and Apptainer),
//! where every one is required.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hpc_image::oci::{self, ImageConfig, Layer, Layout, LAYER_GZIP_MEDIA_TYPE};
use hpc_image::tar::{write_layer, Entry};

/// What the image's default command prints.
const GREETING: &str = "hello from the hpc-image engine test";

fn required() -> bool {
    std::env::var(hpc_env::TEST_CONTAINERS).ok().as_deref() == Some("1")
}

/// Says why an engine is skipped; fails instead where every engine is required.
fn skip(engine: &str, why: &str) {
    assert!(
        !required(),
        "{engine}: {why}, but {}=1 requires it",
        hpc_env::TEST_CONTAINERS
    );
    println!("skipped {engine}: {why}");
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The layer: `/bin/sh` and the shared objects it needs, at their host paths.
fn shell_entries() -> Vec<Entry> {
    let out = Command::new("ldd")
        .arg("/bin/sh")
        .output()
        .expect("ldd runs");
    assert!(out.status.success(), "ldd /bin/sh: {}", text(&out));
    let libs = hpc_image::parse_ldd(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let mut entries = vec![Entry::file("bin/sh", 0o755, fs::read("/bin/sh").unwrap())];
    for l in libs.iter().filter_map(|l| l.path.as_deref()) {
        let data = fs::read(l).unwrap_or_else(|e| panic!("reading {l}: {e}"));
        entries.push(Entry::file(l.trim_start_matches('/'), 0o755, data));
    }
    entries.push(Entry::dir("tmp", 0o1777));
    entries
}

/// Writes the layout and both archives into `dir`; returns (oci, docker) archives.
fn build(dir: &Path, repo_tag: &str) -> (PathBuf, PathBuf) {
    let layout = Layout::create(&dir.join("layout")).unwrap();
    let layer_file = dir.join("layer.tar.gz");
    let d = write_layer(shell_entries(), 1, fs::File::create(&layer_file).unwrap()).unwrap();
    let layer = Layer {
        blob: oci::Descriptor {
            media_type: LAYER_GZIP_MEDIA_TYPE.into(),
            digest: d.digest,
            size: d.size,
        },
        diff_id: d.diff_id,
        created_by: "engine test: /bin/sh".into(),
    };
    layout.put_file(&layer_file, &layer.blob).unwrap();
    let cfg = ImageConfig {
        env: vec!["PATH=/bin".into()],
        cmd: vec!["/bin/sh".into(), "-c".into(), format!("echo {GREETING}")],
        working_dir: "/".into(),
        created: "1970-01-01T00:00:01Z".into(),
        ..Default::default()
    };
    let layers = [layer];
    let written = layout.finish(&cfg, &layers, repo_tag).unwrap();
    let oci_tar = dir.join("engine-test-oci.tar");
    let docker_tar = dir.join("engine-test-docker.tar");
    oci::write_oci_archive(&layout, &written, &oci_tar, repo_tag, 1).unwrap();
    oci::write_docker_archive(&layout, &written, &docker_tar, repo_tag, 1).unwrap();
    (oci_tar, docker_tar)
}

/// Runs an engine's command line, with `env` set.
fn engine(program: &str, env: &[(String, String)], args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"))
}

/// Loads each archive into `program` (docker or podman), runs the image's default
/// command and checks its output, then removes the image.
fn load_and_run(program: &str, env: &[(String, String)], archives: &[&Path], repo_tag: &str) {
    for a in archives {
        let _ = engine(program, env, &["rmi", "-f", repo_tag]);
        let load = engine(program, env, &["load", "-i", &a.to_string_lossy()]);
        assert!(
            load.status.success(),
            "{program} load -i {}: {}",
            a.display(),
            text(&load)
        );
        let run = engine(program, env, &["run", "--rm", repo_tag]);
        assert!(
            run.status.success(),
            "{program} run {repo_tag} (from {}): {}",
            a.display(),
            text(&run)
        );
        assert_eq!(
            String::from_utf8_lossy(&run.stdout).trim(),
            GREETING,
            "{program} run of {}",
            a.display()
        );
        let _ = engine(program, env, &["rmi", "-f", repo_tag]);
        println!("{program}: {} loaded and ran", a.display());
    }
}

/// The version line an engine reports, for the test's output.
fn version(program: &str) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Podman's settings for this kind of machine, from the repository's
/// `containers/test/podman-env.sh` when the crate sits in it (storage under `dir`).
fn podman_env(dir: &Path) -> Vec<(String, String)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../containers/test/podman-env.sh");
    if !script.exists() {
        return Vec::new();
    }
    let out = Command::new("bash")
        .args(["-c", r#". "$1" "$2" vfs && env"#, "sh"])
        .arg(&script)
        .arg(dir.join("podman"))
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "podman-env.sh: {}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("CONTAINERS_"))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn every_archive_loads_and_runs_in_every_installed_engine() {
    let dir = tempfile::tempdir().unwrap();
    let repo_tag = format!("localhost/hpc-image-engine-test:{}", std::process::id());
    let (oci_tar, docker_tar) = build(dir.path(), &repo_tag);
    let archives = [oci_tar.as_path(), docker_tar.as_path()];

    if !hpc_image::sys::has("docker") {
        skip("docker", "not installed");
    } else if !engine("docker", &[], &["info"]).status.success() {
        skip(
            "docker",
            "the daemon does not answer (`docker info` failed)",
        );
    } else {
        println!("docker: {}", version("docker"));
        load_and_run("docker", &[], &archives, &repo_tag);
    }

    if hpc_image::sys::has("podman") {
        println!("podman: {}", version("podman"));
        load_and_run("podman", &podman_env(dir.path()), &archives, &repo_tag);
    } else {
        skip("podman", "not installed");
    }

    if hpc_image::sys::has("skopeo") {
        let from = format!("oci-archive:{}", oci_tar.display());
        let i = engine("skopeo", &[], &["inspect", "--raw", &from]);
        assert!(i.status.success(), "skopeo inspect {from}: {}", text(&i));
        let m: serde_json::Value = serde_json::from_slice(&i.stdout).unwrap();
        assert_eq!(
            m["mediaType"],
            oci::MANIFEST_MEDIA_TYPE,
            "skopeo read the OCI manifest"
        );
        println!("skopeo: {} read the oci-archive", version("skopeo"));
    } else {
        skip("skopeo", "not installed");
    }

    if hpc_image::sys::has("apptainer") {
        println!("apptainer: {}", version("apptainer"));
        let sif = dir.path().join("engine-test.sif");
        let from = format!("oci-archive:{}", oci_tar.display());
        let b = engine(
            "apptainer",
            &[],
            &["build", "--force", &sif.to_string_lossy(), &from],
        );
        assert!(b.status.success(), "apptainer build {from}: {}", text(&b));
        let r = engine("apptainer", &[], &["run", &sif.to_string_lossy()]);
        assert!(r.status.success(), "apptainer run: {}", text(&r));
        assert_eq!(String::from_utf8_lossy(&r.stdout).trim(), GREETING);
        println!("apptainer: SIF from the oci-archive ran");
    } else {
        skip("apptainer", "not installed");
    }
}
