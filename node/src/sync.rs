//! Locking the node library's `std::sync::Mutex`es, in one place: a poisoned lock is taken
//! as it is.
//!
//! Why poison is tolerated: every mutex here guards plain data (maps, counters, caches,
//! records) that each critical section leaves consistent, and a daemon serving mounts must
//! go on after one thread panicked while holding a lock, rather than turn that one panic
//! into every later caller's. Not for data a panic could leave half-updated.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, also when a thread panicked while holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
