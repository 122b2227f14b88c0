//! Byte counts as people read them, below the modules that print them.

/// Formats a byte count with binary units (`32.0 GiB`, `256 KiB`).
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
