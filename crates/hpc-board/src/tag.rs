//! Point-to-point tags, in a module of their own so that the errors that
//! name a tag do not reach into the communicator for it.

/// A message's tag: messages match a receive only with the same tag (or a
/// receive of [`ANY_TAG`]).
pub type Tag = u16;

/// The tag of a receive that takes a message of any tag (MPI's
/// `MPI_ANY_TAG`; the tag that came is in its `Status` (in `hpc-comm`)). A send may not
/// use it: tags of messages are `0..ANY_TAG`.
pub const ANY_TAG: Tag = Tag::MAX;
