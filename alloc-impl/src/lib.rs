//! tessera-alloc: a bounded heap for bare-metal targets.
//!
//! [`BoundedHeap`] is a `#[global_allocator]`-ready allocator over a caller-provided static
//! region ([`Region`], or any memory handed to [`BoundedHeap::init`]):
//!
//! - a hard limit on the bytes handed out ([`BoundedHeap::set_limit`]); a request past it, or
//!   one the region cannot place, returns null, which `try_reserve`-style callers turn into an
//!   error and infallible ones into `handle_alloc_error`;
//! - current and peak usage, allocation and failure counts ([`BoundedHeap::stats`]);
//! - an optional error reserve ([`BoundedHeap::set_error_reserve`]): right after a failure, a
//!   few extra bytes are granted past the limit so that the code which saw the failure can
//!   build its error value (a message string) instead of failing a second time;
//! - a spin lock around the heap, so threads may share it; with the `critical-section`
//!   feature the lock is taken with interrupts masked, so interrupt handlers may allocate too.
//!
//! The placement algorithm is `linked_list_allocator`'s first-fit free list, which keeps its
//! bookkeeping inside the free blocks: a heap of `N` bytes needs no other memory.
//!
//! ```no_run
//! use tessera_alloc::{BoundedHeap, Region};
//!
//! static REGION: Region<{ 48 * 1024 }> = Region::new();
//! #[global_allocator]
//! static HEAP: BoundedHeap = BoundedHeap::new(&REGION);
//! # fn main() {}
//! ```
#![no_std]
#![forbid(unsafe_op_in_unsafe_fn)]

mod heap;
mod region;

pub use heap::{BoundedHeap, HeapStats, InitError};
pub use region::Region;

#[cfg(test)]
mod tests;
