//! `--format sif` with a stand-in `apptainer` on the PATH (this test file's process
//! alone changes its PATH): a build that fails leaves no SIF behind.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

fn exe(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// An `apptainer build` that wrote part of the SIF and failed (or was stopped)
/// left it under the final name, for the batch script to run; a build that
/// succeeds leaves the SIF alone, no temporary beside it.
#[test]
fn a_failed_sif_build_leaves_no_sif_and_a_good_one_no_temporary() {
    let d = hpc_test_support::TmpDir::unmade("hpc-image", "sif");
    let (bin, out) = (d.join("bin"), d.join("out"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("image.json"), r#"{"revision":"abc"}"#).unwrap();
    // `build --force SIF DEF`: writes part of SIF, then fails when told to.
    exe(
        &bin.join("apptainer"),
        r#"#!/bin/sh
case "$1" in
  build) echo part > "$3"; [ -e "$(dirname "$0")/fail" ] && exit 1; exit 0;;
  inspect) echo '{"data":{"attributes":{"labels":{"org.opencontainers.image.revision":"abc"}}}}';;
esac
"#,
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::env::set_var("PATH", path);
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    std::fs::write(bin.join("fail"), "").unwrap();
    let e = hpc_image::sif::build(&out, "app.sif", "app.def").unwrap_err();
    assert!(format!("{e:#}").contains("failed"), "{e:#}");
    assert_eq!(listing(), ["image.json"], "a part of a SIF left");
    std::fs::remove_file(bin.join("fail")).unwrap();
    let p = hpc_image::sif::build(&out, "app.sif", "app.def").unwrap();
    assert_eq!(p, out.join("app.sif"));
    assert_eq!(listing(), ["app.sif", "image.json"]);
    std::fs::remove_dir_all(&d).unwrap();
}
