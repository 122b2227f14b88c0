//! The log's writer: each event to standard error in one write, its lines cut.

use std::io::Write;

/// A `tracing_subscriber` writer of the log: each event goes to standard error
/// in one write (so that the lines of ranks and proxies sharing a terminal or a
/// pipe never interleave within a line), after the process's tag where it has
/// one (`[3] `, a rank's), with every line cut after
/// [`hpc_io::message::LINE_CHARS`] characters and the count of those left out.
/// The values a message quotes are cut much shorter where it is written
/// (`hpc_env::shown`); this is the last bound, for a field some code path
/// quotes whole, so that no value of 100,000 characters fills a job's log.
///
/// ```
/// use tracing_subscriber::util::SubscriberInitExt as _;
/// let _guard = tracing_subscriber::fmt()
///     .with_writer(hpc_trace::LogWriter::stderr())
///     .finish()
///     .set_default();
/// tracing::warn!("{} is not a setting", "x".repeat(100_000)); // one line of about 1,100 characters
/// ```
#[derive(Clone, Debug, Default)]
pub struct LogWriter {
    tag: Option<String>,
}

impl LogWriter {
    /// The writer to standard error, untagged.
    pub fn stderr() -> LogWriter {
        LogWriter { tag: None }
    }

    /// The writer to standard error, each event after `tag` (such as `"[3] "`).
    pub fn tagged(tag: impl Into<String>) -> LogWriter {
        LogWriter {
            tag: Some(tag.into()),
        }
    }
}

/// One event's writer of [`LogWriter`].
#[derive(Debug)]
pub struct LogEvent<'a> {
    tag: Option<&'a str>,
}

impl Write for LogEvent<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        write_event(&mut std::io::stderr().lock(), self.tag, buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogEvent<'a>;

    fn make_writer(&'a self) -> LogEvent<'a> {
        LogEvent {
            tag: self.tag.as_deref(),
        }
    }
}

/// Writes the event `buf` (one formatted event, as `tracing_subscriber`'s
/// formatter hands it over) to `out` with one `write_all`: after `tag`, its
/// lines cut to [`hpc_io::message::LINE_CHARS`] characters, the tag included.
/// An event of at most that many bytes with its tag (every event but a rare
/// one) is neither decoded nor scanned for its lines.
fn write_event(out: &mut impl Write, tag: Option<&str>, buf: &[u8]) -> std::io::Result<()> {
    let tag = tag.unwrap_or("");
    if tag.len() + buf.len() <= hpc_io::message::LINE_CHARS {
        let mut line = Vec::with_capacity(tag.len() + buf.len());
        line.extend_from_slice(tag.as_bytes());
        line.extend_from_slice(buf);
        return out.write_all(&line);
    }
    let line = format!("{tag}{}", String::from_utf8_lossy(buf));
    out.write_all(hpc_io::message::cut_line(&line).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log line quoting a value of 100,000 characters is cut, in one write,
    /// after the rank's tag; short events are written as they are.
    #[test]
    fn an_event_is_tagged_and_its_long_lines_cut() {
        let mut out = Vec::new();
        write_event(&mut out, None, b"WARN short\n").unwrap();
        write_event(&mut out, Some("[3] "), b"WARN also short\n").unwrap();
        let long = format!("WARN x={}\n", "x".repeat(100_000));
        write_event(&mut out, Some("[3] "), long.as_bytes()).unwrap();
        write_event(&mut out, None, long.as_bytes()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..2], ["WARN short", "[3] WARN also short"]);
        assert!(lines[2].starts_with("[3] WARN x=xxx"), "{:.40}", lines[2]);
        for l in &lines[2..] {
            assert!(
                l.chars().count() == hpc_io::message::LINE_CHARS
                    && l.ends_with(" more characters)"),
                "{} characters: {:.40}...{}",
                l.chars().count(),
                l,
                &l[l.len() - 40..]
            );
        }
        assert_eq!(lines.len(), 4);
    }
}
