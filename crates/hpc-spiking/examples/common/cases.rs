//! The text cases that the `stdp_trace` and `alpha_trace` examples read (numbers
//! as Rust parses them, correctly rounded, which is what a comparison to the last
//! bit needs): a case is a line `case NAME numbers...` followed by one line per
//! named series, `SERIES numbers...`.

use anyhow::{bail, Context, Result};

/// One case: its name, its header's numbers, and its series in the order asked.
pub struct TextCase {
    /// The case's name.
    pub name: String,
    /// The numbers after the name.
    pub params: Vec<f64>,
    /// The numbers of each series.
    pub series: Vec<Vec<f64>>,
}

fn numbers(words: std::str::SplitWhitespace, line: usize) -> Result<Vec<f64>> {
    words
        .map(|w| {
            w.parse::<f64>()
                .with_context(|| format!("line {line}: {w:?} is not a number"))
        })
        .collect()
}

/// The cases of the file at `path`, each with `params` numbers and the lines
/// `series`, in that order.
pub fn read(path: &str, params: usize, series: &[&str]) -> Result<Vec<TextCase>> {
    let text = hpc_io::read::read_regular_to_string(path, 1 << 30)
        .with_context(|| format!("reading {path}"))?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let mut cases = Vec::new();
    while let Some((i, line)) = lines.next() {
        let mut words = line.split_whitespace();
        let (Some("case"), Some(name)) = (words.next(), words.next()) else {
            bail!("{path}:{}: expected `case NAME ...`", i + 1);
        };
        let p = numbers(words, i + 1)?;
        if p.len() != params {
            bail!(
                "{path}:{}: case {name} needs {params} numbers, has {}",
                i + 1,
                p.len()
            );
        }
        let mut case = TextCase {
            name: name.to_string(),
            params: p,
            series: Vec::new(),
        };
        for &what in series {
            let (j, line) = lines
                .next()
                .with_context(|| format!("{path}: case {name} has no `{what}` line"))?;
            let mut words = line.split_whitespace();
            if words.next() != Some(what) {
                bail!("{path}:{}: expected `{what} ...`", j + 1);
            }
            case.series.push(numbers(words, j + 1)?);
        }
        cases.push(case);
    }
    Ok(cases)
}
