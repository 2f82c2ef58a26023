//! Allocation that reports failure as [`Error::OutOfMemory`] instead of aborting.
//!
//! Collections have `try_reserve`; for the rest (`Arc::new`, error messages) these helpers
//! stand in until `alloc` has stable fallible constructors.

use alloc::string::String;
use alloc::sync::Arc;
use core::alloc::Layout;
use core::fmt;

use crate::error::{Error, Result};

/// `Error::OutOfMemory` for `requested` bytes of `what`. The message is copied only if memory
/// for it can be had (else it is empty), so building the error cannot itself fail.
pub fn out_of_memory(what: &str, requested: usize) -> Error {
    let mut message = String::new();
    if message.try_reserve_exact(what.len()).is_ok() {
        message.push_str(what);
    }
    Error::OutOfMemory { what: message, requested }
}

/// `Error::OutOfMemory` with a formatted message, written only as far as memory for it can be
/// had (if it cannot be written whole, it is left empty).
pub fn out_of_memory_fmt(what: fmt::Arguments<'_>, requested: usize) -> Error {
    /// Appends while `try_reserve` succeeds.
    struct Bounded(String);
    impl fmt::Write for Bounded {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0.try_reserve(s.len()).map_err(|_| fmt::Error)?;
            self.0.push_str(s);
            Ok(())
        }
    }
    let mut message = Bounded(String::new());
    if fmt::write(&mut message, what).is_err() {
        message.0 = String::new();
    }
    Error::OutOfMemory { what: message.0, requested }
}

/// `Arc::new(value)`, or `Error::OutOfMemory` when the allocator cannot provide the block.
///
/// `Arc::try_new` is not stable yet, so this asks the global allocator for a block at least
/// as large as the one `Arc::new` needs (the two reference counts and `value`, with room to
/// spare), returns it, and then calls `Arc::new`, which reuses that space. The answer is
/// exact for a heap that no other thread or interrupt allocates from in between (a bare-metal
/// program, a test); with concurrent users a block freed by the probe can be taken before
/// `Arc::new` runs, which then fails as `Arc::new` always does (the allocation error handler).
pub fn try_arc<T>(value: T) -> Result<Arc<T>> {
    let word = core::mem::size_of::<usize>();
    let align = core::mem::align_of::<T>().max(core::mem::align_of::<usize>());
    let size = core::mem::size_of::<T>().saturating_add(4 * word);
    let layout =
        Layout::from_size_align(size, align).map_err(|_| Error::Overflow { what: "shared allocation size" })?;
    // SAFETY: `layout` has a non-zero size (at least four words).
    let probe = unsafe { alloc::alloc::alloc(layout) };
    if probe.is_null() {
        return Err(out_of_memory("a shared (reference-counted) value", size));
    }
    // SAFETY: `probe` was just allocated with `layout` and is not used.
    unsafe { alloc::alloc::dealloc(probe, layout) };
    Ok(Arc::new(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_arc_wraps_the_value_and_oom_errors_carry_their_message() {
        let a = try_arc([7u8; 100]).unwrap();
        assert_eq!(a[99], 7);
        let e = out_of_memory("graph arena", 64);
        assert_eq!(e, Error::OutOfMemory { what: "graph arena".into(), requested: 64 });
        let e = out_of_memory_fmt(format_args!("gguf {} table", "tensor"), 8);
        assert_eq!(e, Error::OutOfMemory { what: "gguf tensor table".into(), requested: 8 });
    }
}
