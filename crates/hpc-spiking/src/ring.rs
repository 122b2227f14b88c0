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
    ///
    /// # Panics
    ///
    /// Where [`DelayRing::try_new`] is an error, naming the rows and the
    /// neurons.
    pub fn new(max_delay: u32, len: usize) -> DelayRing<T> {
        Self::try_new(max_delay, len).unwrap_or_else(|e| panic!("hpc_spiking::ring: {e:#}"))
    }

    /// Empty rows for `len` neurons and delays up to `max_delay` steps, or an
    /// error where their bytes are beyond any buffer (`isize::MAX`), more than
    /// the memory available (`MemAvailable`), or cannot be allocated: rows
    /// times neurons were multiplied unchecked ("attempt to multiply with
    /// overflow" in a debug build, wrapped in a release one) and allocated
    /// whole (2^20 rows of 2^20 `f64` aborted the process: "memory allocation
    /// of 17592186044416 bytes failed").
    pub fn try_new(max_delay: u32, len: usize) -> anyhow::Result<DelayRing<T>> {
        let rows = (max_delay as usize + 1).next_power_of_two();
        let bytes = rows
            .checked_mul(len)
            .and_then(|cells| cells.checked_mul(std::mem::size_of::<T>()))
            .filter(|&b| b <= isize::MAX as usize);
        let Some(bytes) = bytes else {
            anyhow::bail!(
                "{rows} rows (delays up to {max_delay} steps) of {len} neurons are more \
                 bytes than any buffer holds"
            );
        };
        if let Some(available) = hpc_io::read::mem_available().filter(|&a| bytes as u64 > a) {
            anyhow::bail!(
                "{rows} rows (delays up to {max_delay} steps) of {len} neurons need {bytes} \
                 bytes, more than the {available} bytes of memory available (MemAvailable)"
            );
        }
        let mut cells = Vec::new();
        cells
            .try_reserve_exact(rows * len)
            .map_err(|e| anyhow::anyhow!("allocating {bytes} bytes of delay rows: {e}"))?;
        cells.resize(rows * len, T::default());
        Ok(DelayRing {
            cells,
            len,
            mask: rows as u64 - 1,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows times neurons were multiplied unchecked ("attempt to multiply
    /// with overflow" for delays up to `u32::MAX` steps of 2^40 neurons) and
    /// allocated whole (2^20 rows of 2^20 `f64`: the process aborted,
    /// "memory allocation of 17592186044416 bytes failed"). Both are errors
    /// of `try_new` naming the rows and the neurons, and `new` panics with
    /// that text, not an abort.
    #[test]
    fn rows_beyond_any_buffer_or_the_memory_are_an_error_not_an_abort() {
        let e = DelayRing::<f64>::try_new(u32::MAX, 1 << 40).unwrap_err();
        assert!(
            format!("{e:#}").contains(
                "4294967296 rows (delays up to 4294967295 steps) of 1099511627776 neurons"
            ),
            "{e:#}"
        );
        let e = DelayRing::<f64>::try_new(1 << 20, 1 << 20).unwrap_err();
        assert!(format!("{e:#}").contains("of 1048576 neurons"), "{e:#}");
        let p = std::panic::catch_unwind(|| DelayRing::<f64>::new(1 << 20, 1 << 20)).unwrap_err();
        let p = p.downcast_ref::<String>().unwrap();
        assert!(p.starts_with("hpc_spiking::ring: 2097152 rows"), "{p}");
        assert_eq!(DelayRing::<u16>::try_new(2, 3).unwrap().rows(), 4);
    }
}
