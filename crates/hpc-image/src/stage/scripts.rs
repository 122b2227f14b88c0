//! Stage 6: the run files (Apptainer definition, Slurm batch scripts, run script,
//! Containerfile) filled from hpc-image's templates.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::app_layer::App;
use super::archives::Archives;
use super::binary::Built;
use super::layout::Image;
use crate::base::BaseSpec;
use crate::{shell_quote, template_keys, templates, Args, MpiModel, Progress};

/// The names of the SIF and of its definition file in the output.
pub(crate) struct SifNames {
    pub(crate) sif: String,
    pub(crate) def: String,
}

/// What the run files are made of.
pub(crate) struct Inputs<'a> {
    pub(crate) args: &'a Args,
    pub(crate) built: &'a Built,
    pub(crate) spec: &'a BaseSpec,
    pub(crate) app: &'a App,
    pub(crate) image: &'a Image,
    pub(crate) archives: &'a Archives,
}

/// Fills the templates and writes the run files into `out_dir`.
pub(crate) fn write(inputs: &Inputs<'_>, out_dir: &Path, pr: &mut Progress) -> Result<SifNames> {
    pr.step("definition file and run scripts from hpc-image's templates");
    let bin_name = &inputs.built.bin.name;
    let names = SifNames {
        sif: format!("{bin_name}.sif"),
        def: format!("{bin_name}.def"),
    };
    let vars = vars(inputs, &names);
    debug_assert_eq!(
        vars.keys().copied().collect::<Vec<_>>(),
        template_keys(),
        "template variables and template_keys() differ"
    );
    let def_template = match inputs.args.mpi {
        MpiModel::Hybrid => &templates::APPTAINER_HYBRID,
        MpiModel::Bind => &templates::APPTAINER_BIND,
    };
    let mut written_files = Vec::new();
    for t in std::iter::once(def_template).chain(templates::COMMON.iter()) {
        let text = if std::ptr::eq(t, def_template) {
            templates::fill_definition(t.text, &vars)
        } else {
            templates::fill(t.text, &vars)
        }
        .with_context(|| format!("template {}", t.name))?;
        let p = out_dir.join(t.out.replace("{app}", bin_name));
        crate::write_new(
            &p,
            text.as_bytes(),
            if t.executable { 0o755 } else { 0o644 },
        )?;
        written_files.push(p);
    }
    pr.done(
        &written_files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
            .collect::<Vec<_>>()
            .join(" "),
    );
    Ok(names)
}

/// The host's MPI library paths as one shell word, joined by commas (the
/// scripts' `APPTAINER_BIND` and their list of paths to bind): written as
/// they were, a path with a space was split, one with `$(...)` or `"` run
/// by the job script's shell (hostile pass 20).
fn bind_paths_word(paths: &[String]) -> String {
    shell_quote(&paths.join(","))
}

/// The host's MPI library paths as `podman run` arguments, each
/// `-v PATH:PATH:ro` one shell word (written unquoted, a path with a space
/// was split into two arguments).
fn podman_binds(paths: &[String]) -> String {
    paths
        .iter()
        .map(|p| format!("-v {}", shell_quote(&format!("{p}:{p}:ro"))))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` where `on`, else nothing.
fn when(on: bool, text: &str) -> String {
    if on {
        text.into()
    } else {
        String::new()
    }
}

/// `items`, each formatted by `f`, one a line.
fn lines<T>(items: impl IntoIterator<Item = T>, f: impl Fn(T) -> String) -> String {
    items.into_iter().map(f).collect::<Vec<_>>().join("\n")
}

/// The templates' variables (the keys of [`template_keys`]).
fn vars(inputs: &Inputs<'_>, names: &SifNames) -> BTreeMap<&'static str, String> {
    let Inputs {
        args,
        built,
        spec,
        app,
        image,
        archives,
    } = inputs;
    let paths = &archives.paths;
    let (bootstrap, archive) =
        if paths.contains_key("oci-archive") || !paths.contains_key("docker-archive") {
            ("oci-archive", archives.oci_archive.clone())
        } else {
            ("docker-archive", archives.docker_archive.clone())
        };
    let mut packages: Vec<String> = spec.packages.clone();
    if args.base.is_none() {
        packages.extend(app.extra_packages.iter().cloned());
    }
    let features = &built.features;
    let bind_paths = &app.bind_paths;
    let env_pairs: Vec<(&str, &str)> = image.env.iter().filter_map(|e| e.split_once('=')).collect();
    let mut vars: BTreeMap<&str, String> = BTreeMap::new();
    vars.insert("app", built.bin.name.clone());
    vars.insert("image", image.image_ref.clone());
    vars.insert("archive", archive);
    vars.insert("bootstrap", bootstrap.into());
    vars.insert("sif", names.sif.clone());
    vars.insert("def", names.def.clone());
    vars.insert("mpi", args.mpi.name().into());
    vars.insert("revision", built.revision.clone());
    vars.insert(
        "features",
        if features.is_empty() {
            "none".into()
        } else {
            features.clone()
        },
    );
    vars.insert("suite", spec.suite.clone());
    vars.insert("packages", packages.join(" "));
    vars.insert("apptainer_flags", when(args.gpu, "--nv"));
    vars.insert("podman_gpu", when(args.gpu, "--device nvidia.com/gpu=all"));
    vars.insert("docker_gpu", when(args.gpu, "--gpus all"));
    vars.insert("bind_paths", bind_paths_word(bind_paths));
    vars.insert("podman_binds", podman_binds(bind_paths));
    vars.insert(
        "env_sh",
        lines(&env_pairs, |(k, v)| {
            format!("    export {k}={}", shell_quote(v))
        }),
    );
    vars.insert(
        "env_dockerfile",
        lines(&env_pairs, |(k, v)| format!("ENV {k}={}", shell_quote(v))),
    );
    vars.insert(
        "labels_def",
        lines(&image.labels, |(k, v)| format!("    {k} {}", def_label(v))),
    );
    vars.insert(
        "labels_dockerfile",
        lines(&image.labels, |(k, v)| {
            format!("LABEL {k}={}", dockerfile_string(v))
        }),
    );
    vars
}

/// `value` as the rest of an Apptainer definition's `%labels` line: a line
/// break or another control character in it escaped (`\n`), since the file has
/// no quoting of its own. A `--base` path holding a line break ended the line
/// there: what followed became lines of the definition, a `%post` section
/// among them, which `apptainer build` runs as root.
fn def_label(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if hpc_io::message::needs_escape(c) || c == '\t' {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `value` as a Containerfile's double-quoted string that a build takes as it
/// is: JSON's escapes (a `"`, a `\\`), and every `$` escaped, which the build
/// would otherwise substitute (`${IFS}` in a package's `repository` URL gave a
/// label other than the image's).
fn dockerfile_string(value: &str) -> String {
    serde_json::to_string(value)
        .expect("a string")
        .replace('$', "\\$")
}

#[cfg(test)]
mod tests {
    /// Hostile pass 20: a label holding a line break (the `--base` path's)
    /// made lines of its own in the definition's `%labels`, a `%post` among
    /// them. Each label stays one line.
    #[test]
    fn a_definition_label_stays_on_its_line() {
        let v = "/tmp/B\n%post\n    touch /tmp/pwned\r\u{202e}";
        let line = super::def_label(v);
        assert_eq!(line, "/tmp/B\\n%post\\n    touch /tmp/pwned\\r\\u{202e}");
        assert_eq!(super::def_label("/tmp/B é"), "/tmp/B é");
    }

    /// Hostile pass 20: the host's MPI library paths were written into the
    /// run scripts unquoted (`args+=(-v P:P:ro)`, `<<< "P,Q"`): a path with a
    /// space was split, one with `$(...)` run. A shell reads them back whole.
    #[test]
    fn the_bind_paths_are_shell_words() {
        let paths = vec![
            "/opt/my mpi/lib/libmpi.so.40".to_string(),
            "/opt/x$(touch pwned)\"'/libfoo.so".to_string(),
        ];
        let script = format!(
            "set -- {}; printf '%s|' \"$@\"; IFS=, read -r -a want <<< {}; printf '%s|' \"${{want[@]}}\"",
            super::podman_binds(&paths),
            super::bind_paths_word(&paths)
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &script])
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        let [a, b] = [&paths[0], &paths[1]];
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("-v|{a}:{a}:ro|-v|{b}:{b}:ro|{a}|{b}|")
        );
    }

    /// The label of a repository URL holding `$` and `"` reads back as it is,
    /// by the rules of a Containerfile's double-quoted string.
    #[test]
    fn a_label_is_written_so_that_a_build_takes_it_as_it_is() {
        let v = r#"https://h/"x$(id)${IFS}$HOME\%{x}"#;
        let quoted = super::dockerfile_string(v);
        assert_eq!(quoted, r#""https://h/\"x\$(id)\${IFS}\$HOME\\%{x}""#);
        // Unquoted as a Containerfile does: a backslash takes the next character.
        let inner = &quoted[1..quoted.len() - 1];
        let mut back = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                back.push(chars.next().unwrap());
            } else {
                assert_ne!(c, '$', "an unescaped $ in {quoted}");
                back.push(c);
            }
        }
        assert_eq!(back, v);
    }
}
