//! A progress loop's time with collectives in flight, as one span on the timeline
//! (`HPC_TRACE`): entered when the first collective arrives, left when the last one
//! ends, so that a pass of the loop costs no span of its own.

use tracing::span::EnteredSpan;

/// The span of a loop's busy period, if one is open.
#[derive(Default)]
pub struct Busy(Option<EnteredSpan>);

impl Busy {
    /// Opens the span (made by `span`) when `active` collectives are in flight and
    /// none was open; closes it when none is.
    pub fn track(&mut self, active: usize, span: impl FnOnce() -> tracing::Span) {
        match (active, self.0.is_some()) {
            (0, true) => self.0 = None,
            (a, false) if a > 0 => self.0 = Some(span().entered()),
            _ => {}
        }
    }
}
