//! The report opens in a real browser: headless Chromium (Debian's `chromium`),
//! driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: no
//! port, no network). For each page it collects every console error, uncaught
//! exception and browser log error (a blocked or failed load lands there), and
//! asks the page whether each image decoded (`complete && naturalWidth > 0`).
//!
//! Without Chromium the test says so and passes, unless `HPC_REQUIRE_BROWSER=1`
//! (set by `cargo xtask test`, whose set-up installs it).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use hpc_spike_report::plot::{PlotOptions, Rows};
use hpc_spike_report::report::{self, Check, Phase, Report, Tolerance, Validation};
use hpc_spike_report::{Recording, RunInfo};
use serde_json::{json, Value};

/// A page's verdict.
#[derive(Debug)]
struct Outcome {
    /// `(alt text, decoded, natural width, natural height)` of every `<img>`.
    images: Vec<(String, bool, u64, u64)>,
    /// Console errors, exceptions, browser log errors.
    errors: Vec<String>,
    /// The page's title.
    title: String,
}

struct Browser {
    child: Child,
    to: ChildStdin,
    from: Receiver<Value>,
    next: u64,
    session: String,
    _profile: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("spike-report-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(String::from)
}

const TIMEOUT: Duration = Duration::from_secs(60);

/// Run in the page: for every image, whether it loaded (`complete &&
/// naturalWidth > 0`), decoded (`decode()` resolves) and has every pixel opaque
/// when drawn (the report's PNGs are opaque RGB: a truncated PNG decodes its top
/// rows only and leaves the rest transparent).
const IMAGES_LOADED: &str = r#"(async () => {
  const out = [];
  for (const i of Array.from(document.images)) {
    let ok = i.complete && i.naturalWidth > 0;
    try { await i.decode(); } catch (e) { ok = false; }
    if (ok) {
      const c = document.createElement("canvas");
      c.width = i.naturalWidth; c.height = i.naturalHeight;
      const g = c.getContext("2d");
      g.drawImage(i, 0, 0);
      const d = g.getImageData(0, 0, c.width, c.height).data;
      for (let k = 3; k < d.length; k += 4) { if (d[k] !== 255) { ok = false; break; } }
    }
    out.push([i.alt, ok, i.naturalWidth, i.naturalHeight]);
  }
  return JSON.stringify({title: document.title, images: out});
})()"#;

impl Browser {
    /// Starts headless Chromium with the protocol on its fds 3 (commands in) and
    /// 4 (replies out), which a shell maps onto our pipes.
    fn launch(bin: &str) -> Browser {
        let profile = temp_dir("chromium-profile");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >&2"#)
            .arg(bin)
            .args([
                "--headless",
                // CI runs as root, where Chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ])
            .arg(format!("--user-data-dir={}", profile.0.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let to = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            // Messages are JSON texts, each ended by a NUL byte.
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
                buf.clear();
            }
        });
        let mut b = Browser {
            child,
            to,
            from,
            next: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = b.call(
            None,
            "Target.createTarget",
            json!({"url": "about:blank"}),
            &mut Vec::new(),
        );
        let target = target["targetId"]
            .as_str()
            .expect("a target id")
            .to_string();
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            &mut Vec::new(),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_string();
        for m in ["Page.enable", "Runtime.enable", "Log.enable"] {
            let s = b.session.clone();
            b.call(Some(&s), m, json!({}), &mut Vec::new());
        }
        b
    }

    /// Sends a command and waits for its reply; events that arrive meanwhile go
    /// to `events`.
    fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        events: &mut Vec<Value>,
    ) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .and_then(|_| self.to.flush())
            .unwrap_or_else(|e| panic!("sending {method} to Chromium: {e}"));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let v = self.recv(deadline, method);
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("Chromium refused {method}: {e}");
                }
                return v["result"].clone();
            }
            events.push(v);
        }
    }

    fn recv(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        match self
            .from
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => {
                panic!("Chromium did not answer {waiting_for} within {TIMEOUT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.try_wait().ok().flatten();
                panic!("Chromium closed the protocol pipe while we waited for {waiting_for} (exit: {status:?})")
            }
        }
    }

    /// Opens `page` and reports its images and errors.
    fn open(&mut self, page: &Path) -> Outcome {
        let s = self.session.clone();
        let mut events = Vec::new();
        let url = format!("file://{}", page.display());
        let nav = self.call(Some(&s), "Page.navigate", json!({"url": url}), &mut events);
        if let Some(e) = nav.get("errorText") {
            panic!("Chromium could not open {url}: {e}");
        }
        // Wait for the load event (images included), then a moment for late errors.
        let deadline = Instant::now() + TIMEOUT;
        while !events.iter().any(|e| e["method"] == "Page.loadEventFired") {
            let v = self.recv(deadline, "the page's load event");
            events.push(v);
        }
        let settle = Instant::now() + Duration::from_millis(300);
        while let Ok(v) = self
            .from
            .recv_timeout(settle.saturating_duration_since(Instant::now()))
        {
            events.push(v);
        }
        let r = self.call(
            Some(&s),
            "Runtime.evaluate",
            json!({"expression": IMAGES_LOADED, "returnByValue": true, "awaitPromise": true}),
            &mut events,
        );
        let v: Value =
            serde_json::from_str(r["result"]["value"].as_str().expect("a JSON string")).unwrap();
        let images = v["images"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i[0].as_str().unwrap_or_default().to_string(),
                    i[1].as_bool().unwrap_or(false),
                    i[2].as_u64().unwrap_or(0),
                    i[3].as_u64().unwrap_or(0),
                )
            })
            .collect();
        let mut errors = Vec::new();
        for e in &events {
            let p = &e["params"];
            match e["method"].as_str() {
                Some("Runtime.exceptionThrown") => {
                    errors.push(format!("exception: {}", p["exceptionDetails"]))
                }
                Some("Runtime.consoleAPICalled")
                    if matches!(p["type"].as_str(), Some("error" | "assert")) =>
                {
                    errors.push(format!("console.{}: {}", p["type"], p["args"]))
                }
                Some("Log.entryAdded") if p["entry"]["level"] == "error" => {
                    errors.push(format!("log: {} {}", p["entry"]["text"], p["entry"]["url"]))
                }
                _ => {}
            }
        }
        Outcome {
            images,
            errors,
            title: v["title"].as_str().unwrap_or_default().to_string(),
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let mut ignore = Vec::new();
        let id = self.next + 1;
        let msg = json!({"id": id, "method": "Browser.close", "params": {}});
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        let _ = self.to.write_all(&bytes);
        let _ = self.to.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            while let Ok(v) = self.from.try_recv() {
                ignore.push(v);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn full_report(run: RunInfo) -> Report {
    let mut r = Report::new(run);
    r.notes
        .push("A test run <with> characters & quotes \"to escape\".".into());
    r.summary = vec![
        ("spikes".into(), "1,234".into()),
        ("mean rate".into(), "32.02 Hz".into()),
    ];
    r.parameters = vec![("order".into(), "100".into()), ("g".into(), "5".into())];
    r.timing = vec![
        Phase::new("build", 0.1),
        Phase::new("update", 1.0),
        Phase::new("communicate/wait", 0.2),
    ];
    r.validation = Some(Validation {
        reference: "NEST 3.10.0".into(),
        how: "Same parameters, one process.".into(),
        checks: vec![Check {
            quantity: "mean rate".into(),
            unit: "Hz".into(),
            reference: 31.0,
            value: 31.4,
            tolerance: Tolerance::Relative(0.05),
        }],
    });
    r
}

fn write_report(dir: &Path, rec: &Recording, run: RunInfo, rows: Rows) -> PathBuf {
    let opts = PlotOptions {
        rows,
        ..PlotOptions::default()
    };
    report::write(dir, &full_report(run), rec, &opts)
        .unwrap()
        .report
        .unwrap()
}

fn assert_clean(page: &Path, o: &Outcome, title: &str) {
    assert!(
        o.errors.is_empty(),
        "{}: errors in the browser: {:#?}",
        page.display(),
        o.errors
    );
    assert_eq!(o.title, title);
    assert_eq!(
        o.images.len(),
        4,
        "{}: images {:?}",
        page.display(),
        o.images
    );
    for (alt, ok, w, h) in &o.images {
        assert!(
            *ok && *w >= 1000 && *h >= 700,
            "{}: image {alt:?} did not load ({w}x{h})",
            page.display()
        );
    }
}

#[test]
fn the_report_opens_in_a_browser_with_every_image_and_no_error() {
    let Some(bin) = chromium() else {
        assert_ne!(
            std::env::var("HPC_REQUIRE_BROWSER").as_deref(),
            Ok("1"),
            "HPC_REQUIRE_BROWSER=1 but Chromium is not installed (cargo xtask setup installs Debian's chromium)"
        );
        eprintln!("skipped: Chromium is not installed (apt-get install chromium)");
        return;
    };
    let dir = temp_dir("browser");
    let mut browser = Browser::launch(&bin);

    // Two populations, and the eight of the microcircuit with layers.
    let (rec, run) = common::brunel();
    let title = run.title(rec.duration_ms());
    let a = dir.0.join("brunel");
    std::fs::create_dir_all(&a).unwrap();
    let page = write_report(&a, &rec, run, Rows::PerPopulation(50));
    assert_clean(&page, &browser.open(&page), &title);

    let (rec, run) = common::microcircuit();
    let title = run.title(rec.duration_ms());
    let b = dir.0.join("microcircuit");
    std::fs::create_dir_all(&b).unwrap();
    let page = write_report(&b, &rec, run, Rows::Proportional(600));
    assert_clean(&page, &browser.open(&page), &title);

    // The check sees a broken image: the same page with one image's data cut.
    let html = std::fs::read_to_string(&page).unwrap();
    let marker = "data:image/png;base64,iVBORw0KGgo";
    let i = html.find(marker).expect("an inlined PNG") + marker.len();
    let broken = format!("{}AAAA{}", &html[..i], &html[i + 4000..]);
    let bad_page = b.join("broken.html");
    std::fs::write(&bad_page, broken).unwrap();
    let o = browser.open(&bad_page);
    let bad: Vec<_> = o.images.iter().filter(|i| !i.1).collect();
    assert_eq!(
        bad.len(),
        1,
        "the cut image must be reported as not loaded: {:?}",
        o.images
    );

    // A truncated PNG (its first half): Chromium shows the top rows, so only the
    // decode and pixel check catch it.
    let start = html.find(marker).unwrap() + "data:image/png;base64,".len();
    let end = start + html[start..].find('"').unwrap();
    let half = start + ((end - start) / 2 / 4) * 4;
    let truncated = format!("{}{}", &html[..half], &html[end..]);
    let truncated_page = b.join("truncated.html");
    std::fs::write(&truncated_page, truncated).unwrap();
    let o = browser.open(&truncated_page);
    let bad: Vec<_> = o.images.iter().filter(|i| !i.1).collect();
    assert_eq!(
        bad.len(),
        1,
        "the truncated image must be reported: {:?}",
        o.images
    );

    // And a console error: a page that loads a file the policy forbids.
    let blocked = html.replacen(
        "<body>",
        "<body><img src=\"missing.png\" alt=\"outside\">",
        1,
    );
    let blocked_page = b.join("blocked.html");
    std::fs::write(&blocked_page, blocked).unwrap();
    let o = browser.open(&blocked_page);
    assert!(
        !o.errors.is_empty(),
        "a blocked load must show as an error: {o:?}"
    );
    assert!(o.images.iter().any(|i| i.0 == "outside" && !i.1));
}
