//! The binary writes its figures and `report.html`, with the comparison to a
//! reference when given one, and refuses a reference of another network before
//! simulating anything.

use std::path::PathBuf;
use std::process::{Command, Output};

const BRUNEL: &str = env!("CARGO_BIN_EXE_brunel");

/// A fresh directory, removed at the end of the test (and when it fails).
fn tmpdir(tag: &str) -> hpc_test_support::TmpDir {
    hpc_test_support::TmpDir::new("brunel-report", tag)
}

fn nest_line(order: u32) -> String {
    // NEST's output line for this network (values here are only compared, not
    // claimed: the test checks the report's wiring, validate.sh runs NEST).
    format!(
        r#"{{"simulator": "NEST 3.10.0", "order": {order}, "ce": 40, "ci": 10, "v_reset": 0.0, "t_sim_ms": 200.0, "spikes": 1000, "rate_hz": 1000.0, "cv_isi": 0.5}}"#
    )
}

fn brunel(out: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(BRUNEL)
        .args([
            "--preset", "nest", "--order", "100", "--ce", "40", "--ci", "10", "--t-sim", "200",
            "--quiet", "--out",
        ])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

/// A run (into `dir/out`) given NEST's line for a network of `order` as its
/// reference (`dir/name`): the fresh `dir`, the output folder and the run.
fn with_reference(
    tag: &str,
    name: &str,
    order: u32,
) -> (hpc_test_support::TmpDir, PathBuf, Output) {
    let dir = tmpdir(tag);
    let reference = dir.join(name);
    std::fs::write(&reference, nest_line(order)).unwrap();
    let out = dir.join("out");
    let o = brunel(&out, &["--reference", reference.to_str().unwrap()]);
    (dir, out, o)
}

#[test]
fn a_run_writes_its_report_and_figures() {
    let (dir, out, o) = with_reference("run", "nest.json", 100);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report = out.join("report.html");
    assert!(
        stdout.contains(&format!("report: {}", report.display())),
        "{stdout}"
    );
    for stem in ["raster", "firing-rates", "cv-isi", "overview"] {
        for ext in ["png", "svg"] {
            let f = out.join(format!("{stem}.{ext}"));
            assert!(
                std::fs::metadata(&f).is_ok_and(|m| m.len() > 1000),
                "{}",
                f.display()
            );
        }
    }
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("Validation against NEST 3.10.0"));
    // The made-up reference rate (1000 Hz) is far from the run's: the report says so.
    assert!(html.contains("differs from") && html.contains("FAIL"));
    assert!(html.contains("Brunel (2000) balanced network · 500 neurons"));
    assert!(html.contains("excitatory") && html.contains("inhibitory"));
    // The raster's y axis names real neuron ids: 0 and the first inhibitory, 400.
    let svg = std::fs::read_to_string(out.join("raster.svg")).unwrap();
    assert!(
        svg.contains(">\n400\n<") || svg.contains(">400<"),
        "no id 400 on the raster's axis"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_plot_writes_no_report() {
    let dir = tmpdir("noplot");
    let o = brunel(&dir, &["--no-plot"]);
    assert!(o.status.success());
    assert!(dir.join("summary.json").exists());
    assert!(!dir.join("report.html").exists() && !dir.join("raster.png").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_reference_of_another_network_is_refused_before_the_run() {
    let (dir, out, o) = with_reference("badref", "nest-order-2500.json", 2500);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("nest-order-2500.json")
            && stderr.contains("`order` is 2500, this run has 100"),
        "{stderr}"
    );
    assert!(!out.join("spikes.spk").exists(), "the run went ahead");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The report's note on the network writes its parameters in exponent form
/// when huge or tiny: `--eta 1e-300` and `--v-reset -1e300` were written out in
/// some 300 digits each.
#[test]
fn huge_and_tiny_parameters_are_written_short_in_the_report() {
    let dir = tmpdir("huge-tiny");
    let out = dir.join("out");
    let o = brunel(&out, &["--eta=1e-300", "--v-reset=-1e300", "--g=1e-300"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("g = 1e-300, eta = 1e-300, V_reset = -1e300 mV"),
        "{}",
        &html[..html.len().min(2000)]
    );
    assert!(!html.contains("0000000000000000000000"));
    // And the summary's dt (a run of ten steps of 1e-300 ms).
    let tiny = tmpdir("tiny-dt");
    let o = Command::new(BRUNEL)
        .args(["--order", "50", "--quiet", "--no-plot", "--no-pin", "--out"])
        .arg(&tiny)
        .args([
            "--dt=1e-300",
            "--t-sim=1e-299",
            "--delay=1e-299",
            "--t-ref=1e-299",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("dt 1e-300 ms"),
        "{stdout}"
    );
}
