//! What the brunel tests share.

/// The flags of the small runs whose spikes the tests compare: the NEST preset at
/// order 100, 100 ms.
pub const NEST_100: [&str; 6] = ["--preset", "nest", "--order", "100", "--t-sim", "100"];
