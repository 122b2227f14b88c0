//! The hand-written templates of this crate's `templates/` and their `{{name}}`
//! placeholder filling.

use std::collections::BTreeMap;

use anyhow::{bail, Result};

/// A template: the file name it is written under and its text.
pub struct Template {
    /// File name in `templates/`.
    pub name: &'static str,
    /// Output file name (`{app}` is replaced by the binary name).
    pub out: &'static str,
    /// Whether the output is made executable.
    pub executable: bool,
    /// The text.
    pub text: &'static str,
}

/// The [`Template`] of `templates/NAME`, written as `OUT` (`NAME` where left out),
/// executable when marked so.
macro_rules! template {
    ($name:literal, executable) => {
        template!($name, $name, true)
    };
    ($name:literal, $out:literal) => {
        template!($name, $out, false)
    };
    ($name:literal) => {
        template!($name, $name, false)
    };
    ($name:literal, $out:literal, $executable:literal) => {
        Template {
            name: $name,
            out: $out,
            executable: $executable,
            text: include_str!(concat!("../templates/", $name)),
        }
    };
}

/// Apptainer definition, hybrid model.
pub const APPTAINER_HYBRID: Template = template!("apptainer-hybrid.def", "{app}.def");

/// Apptainer definition, bind model.
pub const APPTAINER_BIND: Template = template!("apptainer-bind.def", "{app}.def");

/// The other templates, written for every image.
pub const COMMON: &[Template] = &[
    template!("Containerfile"),
    template!("slurm-apptainer.sbatch", executable),
    template!("slurm-podman.sbatch", executable),
    template!("podman-run.sh", executable),
];

/// Replaces every `{{name}}` in `text` by `vars[name]`. A placeholder without a value
/// is an error, so that a template and the code filling it cannot drift apart.
pub fn fill(text: &str, vars: &BTreeMap<&str, String>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find("}}") else {
            bail!(
                "unterminated placeholder near {:?}",
                &rest[i..rest.len().min(i + 30)]
            );
        };
        let key = after[..j].trim();
        match vars.get(key) {
            // A line break in a value made lines of its own in the file: in a
            // definition's `%help`, a `%post` section that `apptainer build`
            // runs as root; in the Containerfile, an instruction.
            Some(v) if !MULTI_LINE.contains(&key) && v.contains(['\n', '\r']) => bail!(
                "the value of {{{{{key}}}}} holds a line break, which would end its line of \
                 the file and begin lines of its own: {}",
                v.escape_debug()
            ),
            Some(v) => out.push_str(v),
            None => bail!("template placeholder {{{{{key}}}}} has no value"),
        }
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The placeholders whose values are lines, each made by this crate with its
/// value escaped or quoted for the file it goes into; every other value is one
/// line ([`fill`] refuses a line break in it).
pub const MULTI_LINE: &[&str] = &[
    "env_dockerfile",
    "env_sh",
    "labels_def",
    "labels_dockerfile",
];

/// [`fill`] for an Apptainer definition, whose sections begin with a line
/// starting with `%`: the filled text must begin the same sections as the
/// template, in the same order, so that no value (a line of a multi-line one
/// included) adds one (`%post`, run as root by `apptainer build`).
pub fn fill_definition(text: &str, vars: &BTreeMap<&str, String>) -> Result<String> {
    let filled = fill(text, vars)?;
    let sections = |t: &str| -> Vec<String> {
        t.lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('%'))
            .map(str::to_string)
            .collect()
    };
    let (want, got) = (sections(text), sections(&filled));
    if want != got {
        let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
        bail!(
            "a value filled into the definition begins a section of its own ({extra:?}): refused"
        );
    }
    Ok(filled)
}

/// The placeholder names a template uses, sorted.
#[cfg(test)]
pub fn placeholders(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}").map(|(k, _)| k.trim().to_string()))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_placeholders() {
        let mut v = BTreeMap::new();
        v.insert("app", "hello".to_string());
        v.insert("sif", "hello.sif".to_string());
        assert_eq!(
            fill("exec {{app}} {{ sif }} ${HOME} {x}", &v).unwrap(),
            "exec hello hello.sif ${HOME} {x}"
        );
        assert!(fill("{{nope}}", &v).is_err());
        assert!(fill("{{app", &v).is_err());
    }

    /// Hostile pass 20: a bind path holding a line break ended its line of
    /// the definition's `%help`, and what followed was lines of the file, a
    /// `%post` section (run as root by `apptainer build`) among them. Such a
    /// value is refused, naming the placeholder; a line of a multi-line value
    /// that begins a section is refused too.
    #[test]
    fn a_value_with_a_line_break_makes_no_lines_of_its_own() {
        let mut vars: BTreeMap<&str, String> = super::super::template_keys()
            .iter()
            .map(|&k| (k, "x".to_string()))
            .collect();
        let ok = fill_definition(APPTAINER_BIND.text, &vars).unwrap();
        assert!(ok.contains("export APPTAINER_BIND=x"), "{ok}");
        vars.insert(
            "bind_paths",
            "'/opt/mpi\n%post\n    touch /tmp/pwned'".to_string(),
        );
        let e = fill_definition(APPTAINER_BIND.text, &vars)
            .unwrap_err()
            .to_string();
        assert!(e.contains("{{bind_paths}} holds a line break"), "{e}");
        assert!(e.contains("\\n%post"), "{e}");
        vars.insert("bind_paths", "x".to_string());
        vars.insert(
            "env_sh",
            "    export A='1\n%post\n touch /tmp/pwned'".to_string(),
        );
        let e = fill_definition(APPTAINER_HYBRID.text, &vars)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("begins a section of its own") && e.contains("%post"),
            "{e}"
        );
    }

    #[test]
    fn every_template_placeholder_is_known() {
        let known = super::super::template_keys();
        for t in COMMON.iter().chain([&APPTAINER_HYBRID, &APPTAINER_BIND]) {
            for p in placeholders(t.text) {
                assert!(
                    known.contains(&p.as_str()),
                    "{}: unknown {{{{{p}}}}}",
                    t.name
                );
            }
        }
    }

    /// `HPC_ULIMITS` is split into words but never expanded as file names: a
    /// `*` in it became the names of the files of the working directory, in
    /// the engine's arguments.
    #[test]
    fn the_ulimits_words_are_not_expanded_as_file_names() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = hpc_test_support::TmpDir::new("hpc-image", "ulimits");
        std::fs::write(d.join("a-file-of-the-folder"), "").unwrap();
        // The engine: says the image is there, prints its arguments a line each.
        let engine = d.join("engine");
        std::fs::write(
            &engine,
            "#!/bin/sh\n[ \"$1\" = image ] && exit 0\nprintf '%s\\n' \"$@\"\n",
        )
        .unwrap();
        let script = d.join("podman-run.sh");
        let vars: BTreeMap<&str, String> = super::super::template_keys()
            .iter()
            .copied()
            .map(|k| {
                (
                    k,
                    if k == "app" {
                        "app".into()
                    } else {
                        String::new()
                    },
                )
            })
            .collect();
        let text = fill(COMMON[3].text, &vars).unwrap();
        assert_eq!(COMMON[3].name, "podman-run.sh");
        std::fs::write(&script, text).unwrap();
        for f in [&engine, &script] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let run = |ulimits: Option<&str>| {
            let mut c = std::process::Command::new(&script);
            c.current_dir(&d).env("ENGINE", &engine).env("IMAGE", "img");
            match ulimits {
                Some(u) => c.env(hpc_env::ULIMITS, u),
                None => c.env_remove(hpc_env::ULIMITS),
            };
            let out = c.output().unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let args = run(Some("--ulimit * --ulimit nofile=8:8"));
        let lines: Vec<&str> = args.lines().collect();
        assert!(lines.windows(2).any(|w| w == ["--ulimit", "*"]), "{args}");
        assert!(
            lines.contains(&"nofile=8:8") && !args.contains("a-file-of"),
            "{args}"
        );
        let args = run(None);
        assert!(args.lines().any(|l| l == "memlock=-1:-1"), "{args}");
        let args = run(Some(""));
        assert!(!args.contains("--ulimit"), "{args}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The Podman scripts with a stand-in engine (and `srun`, `scontrol`): the
    /// batch script wrote its rank's script to `$TMPDIR/hpc-rank-$SLURM_JOB_ID.sh`
    /// through a link planted there, and left it; both scripts took an `ENGINE`
    /// given as a path to Docker for Podman when adding the GPUs.
    #[test]
    fn the_podman_scripts_write_no_file_and_know_docker_by_a_path() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = hpc_test_support::TmpDir::unmade("hpc-image", "rank");
        let (bin, tmp) = (d.join("bin"), d.join("tmp"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        let victim = d.join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, tmp.join("hpc-rank-7.sh")).unwrap();
        let exe = |path: &std::path::Path, text: &str| {
            std::fs::write(path, text).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        // The engine says the image is there and prints its arguments a line each;
        // `srun` drops its own flag and runs the rest.
        exe(
            &bin.join("docker"),
            "#!/bin/sh\n[ \"$1\" = image ] && exit 0\nprintf '%s\\n' \"$@\"\n",
        );
        exe(&bin.join("srun"), "#!/bin/sh\nshift\nexec \"$@\"\n");
        exe(&bin.join("scontrol"), "#!/bin/sh\n");
        let vars: BTreeMap<&str, String> = super::super::template_keys()
            .iter()
            .copied()
            .map(|k| {
                let v = match k {
                    "app" => "app",
                    "image" => "img",
                    "podman_gpu" => "--device nvidia.com/gpu=all",
                    "docker_gpu" => "--gpus all",
                    _ => "",
                };
                (k, v.to_string())
            })
            .collect();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        for name in ["slurm-podman.sbatch", "podman-run.sh"] {
            let t = COMMON.iter().find(|t| t.name == name).unwrap();
            let script = d.join(name);
            exe(&script, &fill(t.text, &vars).unwrap());
            let out = std::process::Command::new(&script)
                .arg("x")
                .current_dir(&d)
                .env("PATH", &path)
                .env("ENGINE", bin.join("docker"))
                .env("TMPDIR", &tmp)
                .env("SLURM_JOB_ID", "7")
                .env("SLURMD_SPOOL", &d)
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {out:?}");
            let args = String::from_utf8(out.stdout).unwrap();
            let lines: Vec<&str> = args.lines().collect();
            assert!(
                lines.windows(2).any(|w| w == ["--gpus", "all"]),
                "{name}: {args}"
            );
            assert!(!args.contains("nvidia.com/gpu"), "{name}: {args}");
            assert!(lines.ends_with(&["img", "app", "x"]), "{name}: {args}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let left: Vec<_> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["hpc-rank-7.sh"], "only the planted link");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn def_files_bootstrap_from_the_archive() {
        for t in [&APPTAINER_HYBRID, &APPTAINER_BIND] {
            assert!(t.text.contains("Bootstrap: {{bootstrap}}"));
            assert!(t.text.contains("From: {{archive}}"));
            for s in ["%environment", "%runscript", "%labels", "%help"] {
                assert!(t.text.contains(s), "{} lacks {s}", t.name);
            }
        }
    }
}
