//! Scales: round tick values, axis ends that outliers do not flatten, and titles
//! wrapped to a width.

/// Ticks at round numbers from `lo` to `hi`, at most about `max_n`.
pub(super) fn ticks(lo: f64, hi: f64, max_n: usize) -> Vec<f64> {
    let step = nice_step((hi - lo) / max_n.max(1) as f64);
    let mut v = Vec::new();
    let mut i = (lo / step - 1e-9).ceil() as i64;
    loop {
        let x = i as f64 * step;
        if x > hi + step * 1e-9 {
            break;
        }
        // Round away the representation error of i * step (0.30000000000000004).
        v.push((x / step).round() * step);
        i += 1;
    }
    v
}

/// An axis end at a round tick above `hi`, and the ticks up to it.
pub(super) fn axis_to(hi: f64, max_n: usize) -> (f64, Vec<f64>) {
    let hi = if hi.is_finite() && hi > 0.0 { hi } else { 1.0 };
    let step = nice_step(hi / max_n.max(1) as f64);
    let end = (hi / step - 1e-9).ceil().max(1.0) * step;
    (end, ticks(0.0, end, max_n + 1))
}
/// Splits a long title at its `·` separators into lines no wider than `max`.
pub(super) fn wrap_title(title: &str, width: impl Fn(&str) -> i32, max: i32) -> Vec<String> {
    if width(title) <= max {
        return vec![title.to_string()];
    }
    let parts: Vec<&str> = title.split(" · ").collect();
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for p in parts {
        let cand = if cur.is_empty() {
            p.to_string()
        } else {
            format!("{cur} · {p}")
        };
        if !cur.is_empty() && width(&cand) > max {
            lines.push(cur);
            cur = p.to_string();
        } else {
            cur = cand;
        }
    }
    lines.push(cur);
    lines
}

/// The smallest of 1, 2, 2.5, 5 × 10^k that is at least `x`.
pub(crate) fn nice_step(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= x * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// `x` rounded up to 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 or 10 × 10^k: an axis end.
pub(crate) fn nice_ceil(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= x * (1.0 - 1e-9) {
            return m * p;
        }
    }
    10.0 * p
}

/// The top of the population-rate axis: all of the trace, unless a few bins (the
/// synchronous onset of a network started from identical states) are far above
/// the rest; then 1.3 times the 99.5th percentile, and those bins are marked.
pub(super) fn rate_axis_max(rate: &[f64]) -> f64 {
    let max = rate.iter().copied().fold(0.0, f64::max);
    let mut s = rate.to_vec();
    s.sort_by(f64::total_cmp);
    let p995 = s
        .get((s.len().saturating_sub(1)) * 995 / 1000)
        .copied()
        .unwrap_or(0.0);
    let top = if max > 2.0 * p995.max(1e-9) {
        p995 * 1.3
    } else {
        max * 1.08
    };
    nice_ceil(top.max(1.0))
}

/// The end of the CV axis: a quarter past the 99th percentile, so that a narrow
/// distribution (a regular network has CVs near 0.1) spreads over the bins.
pub(super) fn cv_axis_max(cvs: &[f64]) -> f64 {
    let mut s = cvs.to_vec();
    s.sort_by(f64::total_cmp);
    let p99 = s
        .get(s.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or(0.0);
    nice_ceil((p99 * 1.25).max(0.05))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_numbers() {
        assert_eq!(nice_step(7.1), 10.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(0.21), 0.25);
        assert_eq!(nice_step(100.0), 100.0);
        assert_eq!(nice_ceil(37.2), 40.0);
        assert_eq!(nice_ceil(0.11), 0.12);
        assert_eq!(nice_ceil(1.0), 1.0);
        assert_eq!(nice_ceil(f64::NAN), 1.0);
    }

    #[test]
    fn an_onset_peak_does_not_flatten_the_rate_axis() {
        let mut r = vec![30.0; 1000];
        r[10] = 1000.0;
        assert_eq!(rate_axis_max(&r), 40.0);
        let r = vec![30.0, 60.0, 45.0];
        assert_eq!(rate_axis_max(&r), 80.0);
    }

    #[test]
    fn long_titles_wrap_at_separators() {
        let w = |s: &str| s.chars().count() as i32;
        assert_eq!(wrap_title("a · b", w, 10), vec!["a · b"]);
        assert_eq!(
            wrap_title("aaaa · bbbb · cc", w, 11),
            vec!["aaaa · bbbb", "cc"]
        );
    }
}
