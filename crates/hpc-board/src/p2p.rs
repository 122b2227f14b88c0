//! How a typed point-to-point message is named on the board and between
//! nodes (its sequence number and schedule tag), and what a receive takes.

use hpc_collectives::DataType;

/// The sequence number of every point-to-point message: one of its own, which
/// the communicator's collectives skip (as they skip the goodbye's `u32::MAX`),
/// so a user's tag never matches a collective's message. Its messages of one
/// pair and tag are matched in the order they were sent ([`Matcher`](hpc_collectives::interp::Matcher)).
pub const P2P_SEQ: u64 = 0xffff_fffe;

/// A point-to-point message's schedule tag: the user's tag in the low 16
/// bits, its element type above them (1 + its index in
/// [`DataType::ALL`]), so that a receive can tell a message of another type
/// from one of its own and refuse it by name.
pub fn p2p_tag(tag: u16, dtype: DataType) -> u32 {
    let kind = DataType::ALL.iter().position(|&d| d == dtype).unwrap_or(0) as u32 + 1;
    u32::from(tag) | kind << 16
}

/// The element type a point-to-point schedule tag carries (`"?"` for none).
pub fn p2p_type_name(tag: u32) -> &'static str {
    let kind = (tag >> 16) as usize;
    kind.checked_sub(1)
        .and_then(|i| DataType::ALL.get(i))
        .map_or("?", |d| d.name())
}

/// What a point-to-point receive takes: a message from `source` (`None`:
/// any rank) with `tag` (`None`: any tag), and the schedule tag of its own
/// element type ([`p2p_tag`]). Until it matches a message its machine is not
/// polled; the message it matches is the earliest announced of those that
/// fit (MPI's non-overtaking rule, across tags too), and one of another
/// element type fails it with [`Error::MessageType`](crate::Error::MessageType).
///
/// Twelve bytes, so that every operation's state (collectives' too) grows
/// by four over the `Option<u32>` it replaced.
#[derive(Debug, Clone, Copy)]
pub struct Want {
    /// The source; [`Want::ANY_SOURCE`]: any.
    source: u32,
    tag: Option<u16>,
    /// The element type's bits of its [`p2p_tag`].
    kind: u16,
}

impl Want {
    const ANY_SOURCE: u32 = u32::MAX;

    /// A receive from `source` (`None`: any) of `tag` (`None`: any), whose
    /// element type's [`p2p_tag`] is `kind`.
    pub fn new(source: Option<usize>, tag: Option<u16>, kind: u32) -> Want {
        Want {
            // (A communicator has fewer ranks than a `u32` counts.)
            source: source.map_or(Want::ANY_SOURCE, |s| {
                u32::try_from(s).unwrap_or(Want::ANY_SOURCE - 1)
            }),
            tag,
            kind: (kind >> 16) as u16,
        }
    }

    /// The one source it takes messages from, if one.
    pub fn source(&self) -> Option<usize> {
        (self.source != Want::ANY_SOURCE).then_some(self.source as usize)
    }

    /// Whether it takes a message from `p` with schedule tag `t`, whatever
    /// its element type.
    pub fn fits(&self, p: usize, t: u32) -> bool {
        self.source().is_none_or(|s| s == p) && self.tag.is_none_or(|w| u32::from(w) == t & 0xffff)
    }

    /// The schedule tag of its element type alone (as [`p2p_tag`] makes it,
    /// with tag 0).
    pub fn kind(&self) -> u32 {
        u32::from(self.kind) << 16
    }

    /// Whether a message of schedule tag `t` is of its element type.
    pub fn same_type(&self, t: u32) -> bool {
        (t >> 16) as u16 == self.kind
    }
}
