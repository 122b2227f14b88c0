//! Ring buffers of the input pending for a block of neurons ([`DelayRing`]):
//! one row of a value per neuron for each of the next steps, the input a spike
//! delivers landing in the row of the step it arrives in.
//!
//! A network whose delays are at most `D` steps keeps `next_pow2(D + 1)` rows, so
//! that the row of a step is `step mod rows` (a mask) and the row being read is
//! never the one a delivery of the same interval writes. Counting or summing in
//! the rows in a fixed order keeps the spikes independent of the decomposition
//! (brunel counts spikes in `u16`, hpc_benchmark sums STDP weights in `f64` in
//! the order of the sorted spikes). Public for a network of your own.

/// The input pending for `len` neurons over the next steps: a row of `len`
/// values per step, for delays up to the `max_delay` steps it was made for.
///
/// ```
/// use hpc_spiking::ring::DelayRing;
///
/// // Three neurons, delays up to 2 steps: 4 rows.
/// let mut ring = DelayRing::<u16>::new(2, 3);
/// assert_eq!(ring.rows(), 4);
/// // A spike of step 5 with a delay of 2 reaches neuron 1 in step 7.
/// ring.row_mut(5 + 2)[1] += 1;
/// assert_eq!(ring.row(7), &[0, 1, 0]);
/// // Step 11 is read from the same row (11 mod 4 = 7 mod 4).
/// assert_eq!(std::mem::take(&mut ring.row_mut(11)[1]), 1);
/// assert_eq!(ring.row(7), &[0, 0, 0]);
/// ```
#[derive(Clone, Debug)]
pub struct DelayRing<T> {
    cells: Vec<T>,
    len: usize,
    mask: u64,
}

impl<T: Copy + Default> DelayRing<T> {
    /// Empty rows for `len` neurons and delays up to `max_delay` steps.
    pub fn new(max_delay: u32, len: usize) -> DelayRing<T> {
        let rows = (max_delay as usize + 1).next_power_of_two();
        DelayRing {
            cells: vec![T::default(); rows * len],
            len,
            mask: rows as u64 - 1,
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.mask as usize + 1
    }

    /// The row of step `step`: the input of each neuron arriving in it.
    #[inline]
    pub fn row(&self, step: u64) -> &[T] {
        let at = (step & self.mask) as usize * self.len;
        &self.cells[at..at + self.len]
    }

    /// The row of step `step`, to add input to or take it from.
    #[inline]
    pub fn row_mut(&mut self, step: u64) -> &mut [T] {
        let at = (step & self.mask) as usize * self.len;
        &mut self.cells[at..at + self.len]
    }

    /// Empties every row.
    pub fn clear(&mut self) {
        self.cells.fill(T::default());
    }

    /// Bytes of the rows.
    pub fn bytes(&self) -> usize {
        self.cells.capacity() * std::mem::size_of::<T>()
    }
}
