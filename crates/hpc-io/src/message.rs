//! An error and its causes as one line for a program's last message.
//!
//! Many error types print their cause in their own message *and* return it as
//! [`Error::source`] (thiserror's `{source}` with `#[source]`, `{0}` with `#[from]`),
//! so walking the chain as `anyhow`'s `{:#}` does prints that cause twice
//! (`cannot open c: No such file or directory (os error 2): No such file or
//! directory (os error 2)`). [`chain`] prints each cause once.
//!
//! [`last_words`] writes a program's last message to standard error in one write,
//! so that a launcher stopping the program (or a rank beside it) while it speaks
//! never leaves half a line (`brunel: error: ` and nothing after it).
//!
//! [`UsageError`] marks an error as bad input, which a program's exit status tells
//! apart from other failures (`hpc` and `cargo xtask image` give it status 2).
//!
//! [`num`] writes a number for a message: plain, or in exponent form where it
//! would otherwise print as hundreds of digits.
//!
//! [`usage_exit`] writes an argument parser's usage text and exits, checking the
//! write; it and [`error_line`] cut every line to [`LINE_CHARS`] characters.

use std::error::Error;
use std::io::Write as _;

/// The line [`last_words`] writes: `{program}: error: {message}` and a newline,
/// its control characters but line breaks and tabs escaped
/// ([`escape_controls`]) and each line cut ([`cut_line`]).
///
/// ```
/// assert_eq!(
///     hpc_io::message::error_line("fft3d", "--n 0: must be at least 2"),
///     "fft3d: error: --n 0: must be at least 2\n"
/// );
/// ```
pub fn error_line(program: &str, message: &str) -> String {
    let mut line = cut_line(&escape_controls(&format!("{program}: error: {message}"))).into_owned();
    line.push('\n');
    line
}

/// `text` with every character [`needs_escape`] counts, but the line break
/// and the tab, written as its escape (`\u{1b}`, `\r`, `\u{202e}`): the last
/// defence of a program's last line and usage text ([`error_line`],
/// [`usage_exit`]) against a value some code path quotes raw (an argument
/// parser's "invalid value '…'" echoes the value as it was given: a
/// terminal's escape in it cleared the terminal, a carriage return or a
/// right-to-left override hid or reordered the message). Line breaks are
/// kept: a message may have several lines. [`usage_exit`] leaves its text as
/// it is (a parser's coloured usage text is made of terminal escapes): a
/// caller that renders plain text escapes it with this first.
///
/// ```
/// use hpc_io::message::escape_controls;
/// assert_eq!(escape_controls("a\u{1b}[2Jb\u{202e}c\nd\te"), "a\\u{1b}[2Jb\\u{202e}c\nd\te");
/// assert_eq!(escape_controls("plain"), "plain");
/// ```
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| needs_escape(c) && c != '\n' && c != '\t';
    if !text.chars().any(hidden) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// The most characters of a line of a program's last words ([`error_line`]),
/// usage text ([`usage_exit`]) or log (`hpc_trace::LogWriter`), the program's
/// name, a rank's tag and the note of a cut included: a line longer than this
/// is cut by [`cut_line`], with the count of the characters left out. Every
/// value a message quotes is cut much shorter where it is written
/// (`hpc_env::shown`, [`cut`]); this bound is the last
/// one, for a value some code path quotes whole (an argument parser's "invalid
/// value" of 100,000 characters), and keeps a line within the 4 KiB that reach
/// a pipe in one piece.
pub const LINE_CHARS: usize = 1000;

/// Writes `text`, a program's usage text as its argument parser rendered it
/// (`--help`, `--version`, a usage error), to standard error (`to_stderr`) or
/// standard output, each line cut to [`LINE_CHARS`] characters ([`cut_line`]), and ends the
/// process with `code`. A failed write is not silent, as an argument parser's
/// own exit leaves it (`--help > /dev/full` ended 0): a closed pipe ends the
/// process with status 141 (as `SIGPIPE` would), any other error with
/// [`last_words`] naming the stream and status 2.
///
/// ```no_run
/// # let (text, to_stderr, code) = ("usage: x [--n N]\n", true, 2);
/// // Args::try_parse().unwrap_or_else(|e| hpc_io::message::usage_exit(
/// //     "x", &e.render().to_string(), e.use_stderr(), e.exit_code()))
/// hpc_io::message::usage_exit("x", text, to_stderr, code);
/// ```
pub fn usage_exit(program: &str, text: &str, to_stderr: bool, code: i32) -> ! {
    let text = cut_line(text);
    let written = if to_stderr {
        let mut err = std::io::stderr().lock();
        err.write_all(text.as_bytes()).and_then(|()| err.flush())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    match written {
        Ok(()) => std::process::exit(code),
        Err(w) if w.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(141),
        Err(w) => {
            let stream = if to_stderr {
                "standard error"
            } else {
                "standard output"
            };
            last_words(program, &format!("writing to {stream}: {w}"));
            std::process::exit(2);
        }
    }
}

/// Writes [`error_line`] to standard error with one `write` (Rust's standard error
/// is unbuffered, and `writeln!` with arguments writes each piece on its own, so a
/// program stopped between two pieces left its message cut). A line of at most
/// `PIPE_BUF` (4 KiB) reaches a pipe whole, never mixed with another process's
/// output. A failed write changes nothing: the exit status still says what
/// happened.
pub fn last_words(program: &str, message: &str) {
    let _ = std::io::stderr().write_all(error_line(program, message).as_bytes());
}

/// `err` and each of its causes, joined by `": "`, skipping a cause whose text the
/// line so far already ends with (it was printed as part of the message above it).
///
/// ```
/// let e = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
/// let e = anyhow::Error::new(e).context("reading c.toml");
/// assert_eq!(hpc_io::message::chain(e.as_ref()), "reading c.toml: no such file");
/// ```
pub fn chain(err: &(dyn Error + 'static)) -> String {
    let mut line = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !line.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// Bad input (a usage error, an invalid value), reported with its message; a
/// program finds it in an error's chain (`downcast_ref`) to choose its exit status.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for UsageError {}

/// `x` for a message: plain for ordinary magnitudes, in exponent form
/// (`1e300`, `1e-300`) for huge and tiny ones, which would otherwise print as
/// hundreds of digits.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() || a == 0.0 || (1e-4..1e15).contains(&a) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// `text` from outside (a path, a lock's holder, a reason from a manifest) as
/// a message quotes it: as it is, or quoted and escaped when it holds a control
/// character, so that a line break or a terminal's escape in it cannot break the
/// message's line or move the terminal's cursor.
///
/// A bidirectional control (a right-to-left override, U+202E) is escaped as
/// a control character is ([`needs_escape`]): a terminal or editor that
/// reorders the text after it would show `/data/report\u{202e}txt.exe` as `/data/reportexe.txt`.
///
/// ```
/// assert_eq!(hpc_io::message::said("run 7"), "run 7");
/// assert_eq!(hpc_io::message::said("a\nb"), "\"a\\nb\"");
/// assert_eq!(hpc_io::message::said("a\u{202e}b"), r#""a\u{202e}b""#);
/// ```
pub fn said(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(needs_escape) {
        format!("{text:?}").into()
    } else {
        text.into()
    }
}

/// Whether a message writes `c` escaped ([`said`], [`path`]): a control
/// character (`char::is_control`: a line break, a terminal's escape), a
/// bidirectional control (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066
/// to U+2069: format characters that make a terminal or an editor show the
/// text around them in another order, as "Trojan Source" spoofs code) or a
/// line or paragraph separator (U+2028, U+2029: a line break to some
/// terminals and editors). It is `hpc_env::needs_escape`, re-exported: one rule
/// for the settings `hpc_env::short` writes and the paths and values here.
///
/// ```
/// use hpc_io::message::needs_escape;
/// assert!(needs_escape('\n') && needs_escape('\u{1b}') && needs_escape('\u{202e}'));
/// assert!(!needs_escape('a') && !needs_escape('é') && !needs_escape(' '));
/// ```
pub use hpc_env::needs_escape;

/// The longest path a message shows whole, in bytes: the most the system
/// takes in a path (`PATH_MAX`), so that only a path no call could use is cut.
pub const PATH_SHOWN_BYTES: usize = 4096;

/// `path` as a message shows it: whole up to [`PATH_SHOWN_BYTES`] bytes, else
/// cut as [`cut`] cuts a line (a path of 100,000 characters, which the system
/// refuses, was echoed whole in the refusal); an empty path as `""` (shown as
/// nothing, "cannot open : No such file" named no file). A path holding a
/// control character (a line break, a terminal's escape: a file may be named
/// so) is quoted and escaped, as `hpc_env::short` shows a value, so that it
/// cannot break the message's line or move the terminal's cursor. A path that
/// is not UTF-8 is quoted with its other bytes escaped (`"n\xFF.xml"`): each
/// was shown as U+FFFD, a name no one can type back, and two files differing
/// there were named alike.
///
/// ```
/// use std::path::Path;
/// use std::os::unix::ffi::OsStrExt as _;
/// assert_eq!(hpc_io::message::path(Path::new("/tmp/x")), "/tmp/x");
/// let odd = Path::new(std::ffi::OsStr::from_bytes(b"n\xff.xml"));
/// assert_eq!(hpc_io::message::path(odd), r#""n\xFF.xml""#);
/// assert_eq!(hpc_io::message::path(Path::new("")), "\"\"");
/// let long = format!("/{}", "x".repeat(100_000));
/// let t = hpc_io::message::path(Path::new(&long));
/// assert!(t.len() < 400 && t.ends_with("... (99701 more characters)"), "{t}");
/// assert_eq!(hpc_io::message::path(Path::new("/tmp/a\nb")), "\"/tmp/a\\nb\"");
/// // A terminal's escape too.
/// assert_eq!(hpc_io::message::path(Path::new("d\u{1b}[31m/a\nb")), r#""d\u{1b}[31m/a\nb""#);
/// ```
pub fn path(path: &std::path::Path) -> String {
    let text = match path.to_str() {
        Some(t) => said(t).into_owned(),
        // Debug quotes it and escapes its control characters and the bytes
        // that are not UTF-8.
        None => format!("{path:?}"),
    };
    if text.is_empty() {
        "\"\"".into()
    } else if text.len() <= PATH_SHOWN_BYTES {
        text
    } else {
        cut(&text).into_owned()
    }
}

/// `text` as one word a POSIX shell reads back as it is: as it is where it is
/// made of letters, digits and `-_./=:,@` only, else between single quotes
/// (each `'` written `'\''`). For a script; a message that offers a command to
/// paste uses [`shell_word`].
///
/// ```
/// use hpc_io::message::shell_quote;
/// assert_eq!(shell_quote("/etc/hpc/dpu.key"), "/etc/hpc/dpu.key");
/// assert_eq!(shell_quote("my key's"), "'my key'\\''s'");
/// ```
pub fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// `path` as a word to paste into a shell from a message ([`shell_quote`]), or
/// `None` where no such word can be shown: a path that is not UTF-8, or that
/// holds a character a message shows escaped ([`needs_escape`]: a control
/// character, a bidirectional control), whose escaped form ([`path`]) is not
/// the file's name to a shell.
///
/// ```
/// use std::path::Path;
/// use hpc_io::message::shell_word;
/// assert_eq!(shell_word(Path::new("a b")).as_deref(), Some("'a b'"));
/// assert_eq!(shell_word(Path::new("k\u{1b}[31m")), None);
/// ```
pub fn shell_word(path: &std::path::Path) -> Option<String> {
    let text = path.to_str()?;
    (!text.chars().any(needs_escape)).then(|| shell_quote(text))
}

/// The most characters [`cut`] keeps of a line of a text from a file.
pub const CUT_CHARS: usize = 300;

/// `text` (a reason that quotes what a file holds: a manifest's field, a parser's
/// message with the string or the line it refused) with each line cut after
/// [`CUT_CHARS`] characters and the count of those left out, so that a
/// hand-edited file's 100,000-character string or line is not echoed whole in a
/// message or a warning (a parser's excerpt of the line keeps its shape).
///
/// ```
/// let long = "x".repeat(100_000);
/// let t = hpc_io::message::cut(&long);
/// assert!(t.len() < 400 && t.ends_with("... (99700 more characters)"), "{t}");
/// assert_eq!(hpc_io::message::cut("short\nlines"), "short\nlines");
/// ```
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    cut_at(text, CUT_CHARS)
}

/// `text` with each line of more than [`LINE_CHARS`] characters cut so that,
/// with the note of the cut (`... (N more characters)`), it is [`LINE_CHARS`]
/// characters long: the last bound on a line out of a process, whatever wrote it.
///
/// ```
/// use hpc_io::message::{cut_line, LINE_CHARS};
/// let t = cut_line(&"x".repeat(100_000)).into_owned();
/// assert_eq!(t.chars().count(), LINE_CHARS);
/// assert!(t.ends_with("xxx... (99027 more characters)"), "{t}");
/// assert_eq!(cut_line("short\nlines"), "short\nlines");
/// ```
pub fn cut_line(text: &str) -> std::borrow::Cow<'_, str> {
    // The note is "... (" and " more characters)" (22 characters) around the
    // count's digits: keep as much as leaves room for it.
    let digits = |n: usize| n.to_string().len();
    cut_lines(text, LINE_CHARS, |n| {
        let mut keep = LINE_CHARS - 22 - digits(n);
        while keep + 1 + 22 + digits(n - keep - 1) <= LINE_CHARS {
            keep += 1;
        }
        keep
    })
}

/// `text` with each line cut after `max` characters and the count of those left
/// out, as [`cut`] cuts at [`CUT_CHARS`].
///
/// ```
/// let t = hpc_io::message::cut_at("abcdef\nxy", 2);
/// assert_eq!(t, "ab... (4 more characters)\nxy");
/// ```
pub fn cut_at(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    cut_lines(text, max, |_| max)
}

/// `text` with each line of more than `limit` characters cut after `keep(its
/// length)` of them, and the count of those left out.
fn cut_lines(text: &str, limit: usize, keep: impl Fn(usize) -> usize) -> std::borrow::Cow<'_, str> {
    let too_long = |line: &str| line.chars().nth(limit).is_some();
    if !text.split('\n').any(too_long) {
        return text.into();
    }
    let lines: Vec<String> = text
        .split('\n')
        .map(|l| {
            if !too_long(l) {
                return l.to_string();
            }
            let n = l.chars().count();
            let at = l.char_indices().nth(keep(n)).map_or(l.len(), |(at, _)| at);
            format!(
                "{}... ({} more characters)",
                &l[..at],
                l[at..].chars().count()
            )
        })
        .collect();
    lines.join("\n").into()
}

/// Formats a byte count with binary units (`32.0 GiB`, `256 KiB`): the one
/// form every message of a size takes (`hpc_topology::format_bytes` is this).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit >= 3 || value.fract() != 0.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that is not UTF-8 (`hpc topo --input` of `n\xff.xml`) was shown
    /// as "n\u{fffd}.xml": a name no one can type back, and the same for
    /// `n\xfe.xml`. Its bytes are shown escaped, in quotes; control characters
    /// and right-to-left overrides in it are escaped as well.
    #[test]
    fn a_path_not_in_utf8_is_shown_with_its_bytes() {
        use std::os::unix::ffi::OsStrExt as _;
        let shown = |b: &[u8]| path(std::path::Path::new(std::ffi::OsStr::from_bytes(b)));
        assert_eq!(shown(b"/d/n\xff.xml"), r#""/d/n\xFF.xml""#);
        assert_ne!(shown(b"n\xff"), shown(b"n\xfe"));
        let odd = shown(
            "a\n\u{1b}[2J\u{202e}\u{fffd}"
                .as_bytes()
                .iter()
                .chain(b"\xff")
                .copied()
                .collect::<Vec<u8>>()
                .as_slice(),
        );
        assert!(!odd.contains(['\n', '\u{1b}', '\u{202e}']), "{odd}");
        assert!(odd.starts_with('"') && odd.contains("\\xFF"), "{odd}");
    }

    #[test]
    fn numbers_are_plain_unless_huge_or_tiny() {
        assert_eq!(num(0.1), "0.1");
        assert_eq!(num(-2500.0), "-2500");
        assert_eq!(num(0.0), "0");
        assert_eq!(num(1e300), "1e300");
        assert_eq!(num(-1e-300), "-1e-300");
        assert_eq!(num(f64::INFINITY), "inf");
        assert_eq!(num(f64::NAN), "NaN");
    }
    /// A last line of any length is cut (an argument parser's or a library's
    /// message that quotes a value of 100,000 characters whole), and stays one
    /// write a pipe takes in one piece.
    #[test]
    fn last_words_are_cut_to_a_line_a_pipe_takes_whole() {
        let long = format!("--n {}: not a number", "9".repeat(100_000));
        let line = error_line("fft3d", &long);
        assert!(line.len() < 4096, "{} bytes", line.len());
        assert!(line.starts_with("fft3d: error: --n 999"), "{line:.60}");
        assert!(line.ends_with("... (99059 more characters)\n"), "{line}");
        assert_eq!(line.trim_end().chars().count(), LINE_CHARS);
        for n in [
            LINE_CHARS - 1,
            LINE_CHARS,
            LINE_CHARS + 1,
            9_999,
            10_000,
            10_001,
        ] {
            let cut = cut_line(&"é".repeat(n)).into_owned();
            let m = cut.chars().count();
            assert!(
                m <= LINE_CHARS && m + 1 >= n.min(LINE_CHARS),
                "a line of {n}: {m}"
            );
            assert_eq!(cut == "é".repeat(n), n <= LINE_CHARS, "a line of {n}");
        }
        assert_eq!(
            error_line("fft3d", "short\nlines"),
            "fft3d: error: short\nlines\n"
        );
        assert_eq!(cut_at("abc", 3), "abc");
        assert_eq!(cut_at("abcd", 3), "abc... (1 more characters)");
        assert_eq!(cut_at("ééé\né", 1), "é... (2 more characters)\né");
    }

    /// What [`cut_line`] promises, exactly: a line of at most [`LINE_CHARS`]
    /// characters is kept as it is; a longer one becomes exactly
    /// [`LINE_CHARS`] characters, the longest start of it that leaves room
    /// for the note, and the note counts the characters left out. Lines of
    /// characters of one to four bytes (the cut falls on each width), at
    /// every length up to past the first cut and around each length where
    /// the count gains a digit; empty lines and a text of lines of both
    /// kinds keep their line breaks.
    #[test]
    fn a_cut_line_is_exactly_line_chars_long_and_counts_what_it_left_out() {
        let widths = ['a', 'é', '€', '😀'];
        let line = |n: usize, shift: usize| -> String {
            (0..n).map(|i| widths[(i + shift) % widths.len()]).collect()
        };
        let check = |l: &str| {
            let n = l.chars().count();
            let cut = cut_line(l).into_owned();
            if n <= LINE_CHARS {
                assert_eq!(cut, l, "a line of {n}");
                return;
            }
            assert_eq!(cut.chars().count(), LINE_CHARS, "a line of {n}: {cut}");
            let (kept, note) = cut.rsplit_once("... (").expect("a note");
            let left: usize = note
                .strip_suffix(" more characters)")
                .and_then(|c| c.parse().ok())
                .unwrap_or_else(|| panic!("a line of {n}: the note {note:?}"));
            assert!(l.starts_with(kept), "a line of {n}: not its start");
            assert_eq!(kept.chars().count() + left, n, "a line of {n}");
            // The longest start that fits: one more character kept would
            // not leave room for its note.
            let longer = kept.chars().count() + 1 + 22 + (left - 1).to_string().len();
            assert!(
                longer > LINE_CHARS,
                "a line of {n}: a shorter cut than fits"
            );
        };
        // Where the count of the characters left out gains a digit (99 to
        // 100, 999 to 1,000, ...): the kept start shrinks by one there.
        let near = |n: usize| n.saturating_sub(4)..=n + 4;
        let lengths = (0..=LINE_CHARS + 30)
            .chain(near(LINE_CHARS + 75))
            .chain(near(LINE_CHARS + 976))
            .chain(near(10_976))
            .chain(near(100_976));
        for n in lengths {
            for shift in 0..widths.len() {
                check(&line(n, shift));
            }
        }
        assert_eq!(cut_line(""), "");
        assert_eq!(cut_line("\n\n"), "\n\n");
        let long = line(LINE_CHARS + 1, 0);
        let at = line(LINE_CHARS, 1);
        let text = format!("\n{long}\n{at}\n\n{long}\n");
        let cut = cut_line(&text).into_owned();
        let lines: Vec<&str> = cut.split('\n').collect();
        assert_eq!(lines.len(), 6, "{cut}");
        assert_eq!(lines[1], cut_line(&long));
        assert_eq!(lines[2], at);
        assert_eq!((lines[0], lines[3], lines[5]), ("", "", ""));
        assert_eq!(lines[4], lines[1]);
        assert!(
            lines[1].ends_with("... (25 more characters)"),
            "{}",
            lines[1]
        );
        // An empty message and a note longer than what it cuts (`cut_at`'s
        // small bounds).
        assert_eq!(error_line("x", ""), "x: error: \n");
        assert_eq!(cut_at("ab", 0), "... (2 more characters)");
        assert_eq!(cut_at("😀😀😀", 1), "😀... (2 more characters)");
        assert_eq!(cut_at("", 0), "");
    }

    #[test]
    fn a_cause_not_in_the_message_is_kept() {
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing x");
        assert_eq!(chain(e.as_ref()), "writing x: disk full");
    }

    /// A path or a value holding a bidirectional control or a line
    /// separator is quoted and escaped as one holding a control character
    /// (a right-to-left override was written as it is: a terminal showed
    /// `/data/report\u{202e}txt.exe` as `/data/reportexe.txt`, pass 18's
    /// C35), and one of ordinary letters is not quoted.
    #[test]
    fn bidirectional_controls_are_quoted_escaped() {
        let bidi = ('\u{202a}'..='\u{202e}')
            .chain('\u{2066}'..='\u{2069}')
            .chain(['\u{200e}', '\u{200f}', '\u{061c}', '\u{2028}', '\u{2029}']);
        for c in bidi {
            let text = format!("/data/report{c}txt.exe");
            let want = format!("\"/data/report\\u{{{:x}}}txt.exe\"", c as u32);
            assert_eq!(said(&text), want);
            assert_eq!(path(std::path::Path::new(&text)), want);
        }
        assert_eq!(said("/data/café/x y"), "/data/café/x y");
    }

    /// A program's last line escapes what a value quoted raw brought into it (an argument parser's "invalid value" echoes
    /// the value as given: a terminal's escape in it cleared the terminal,
    /// a carriage return hid the start of the line, a right-to-left
    /// override reordered it), and keep their line breaks and tabs.
    #[test]
    fn a_last_line_escapes_what_a_value_brought_into_it() {
        let line = error_line(
            "fft3d",
            "invalid value '\u{1b}[2J\r\u{202e}x' for '--n'\n\tusage: fft3d",
        );
        assert_eq!(
            line,
            "fft3d: error: invalid value '\\u{1b}[2J\\r\\u{202e}x' for '--n'\n\tusage: fft3d\n"
        );
        assert!(!line.contains(['\u{1b}', '\r', '\u{202e}']));
        // The cut counts what is shown: an escaped line is cut as long.
        let long = error_line("x", &"\u{7}".repeat(2_000));
        assert_eq!(long.trim_end().chars().count(), LINE_CHARS, "{long}");
        assert!(!long.contains('\u{7}'));
        assert_eq!(escape_controls("short\nlines"), "short\nlines");
    }
}
