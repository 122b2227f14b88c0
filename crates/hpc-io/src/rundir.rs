//! Output directories owned by one run (filled in next).
