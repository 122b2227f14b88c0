//! Bounded reads of user-named files (filled in next).
