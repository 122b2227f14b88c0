//! What the microcircuit tests share.

/// The flags of a small run: 1.5 % of the neurons and 5 % of the in-degrees, 20 ms
/// of warm-up, then `t_sim` ms.
pub fn small_model(t_sim: &'static str) -> [&'static str; 8] {
    [
        "--n-scaling",
        "0.015",
        "--k-scaling",
        "0.05",
        "--t-presim",
        "20",
        "--t-sim",
        t_sim,
    ]
}
