//! Lab tests (coming).
