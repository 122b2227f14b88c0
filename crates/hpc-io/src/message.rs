//! An error and its causes as one line for a program's last message.
//!
//! Many error types print their cause in their own message *and* return it as
//! [`Error::source`] (thiserror's `{source}` with `#[source]`, `{0}` with `#[from]`),
//! so walking the chain as `anyhow`'s `{:#}` does prints that cause twice
//! (`cannot open c: No such file or directory (os error 2): No such file or
//! directory (os error 2)`). [`chain`] prints each cause once.

use std::error::Error;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::ReadError;

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let e = ReadError::Open {
            path: "c\u{fffd}".into(),
            source: std::io::Error::from_raw_os_error(2),
        };
        let os = std::io::Error::from_raw_os_error(2).to_string();
        let e = anyhow::Error::new(e).context("in the parameters");
        let line = chain(e.as_ref());
        assert_eq!(
            line,
            format!("in the parameters: cannot open c\u{fffd}: {os}")
        );
        assert_eq!(line.matches(&os).count(), 1, "{line}");
    }

    #[test]
    fn a_cause_not_in_the_message_is_kept() {
        let e = anyhow::Error::new(std::io::Error::other("disk full")).context("writing x");
        assert_eq!(chain(e.as_ref()), "writing x: disk full");
    }
}
