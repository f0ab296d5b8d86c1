//! The per-thread mark "inside the library" (SPEC §9.2 "Unmodified applications"): while a
//! thread holds it, every wrapper and `dlsym` forwards to the real driver at once, and the
//! CUPTI cross-check counts that thread's launches as the library's.

use std::cell::Cell;

thread_local! {
    static INTERNAL: Cell<u32> = const { Cell::new(0) };
}

/// Marks the calling thread as inside the library until dropped: wrappers and `dlsym` then
/// forward to the real driver at once.
#[derive(Debug)]
pub struct Internal(());

impl Internal {
    /// Enters (nests).
    pub fn enter() -> Self {
        INTERNAL.with(|c| c.set(c.get() + 1));
        Self(())
    }

    /// Whether the calling thread is inside the library.
    pub fn active() -> bool {
        INTERNAL.try_with(|c| c.get() > 0).unwrap_or(true)
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        let _ = INTERNAL.try_with(|c| c.set(c.get().saturating_sub(1)));
    }
}
