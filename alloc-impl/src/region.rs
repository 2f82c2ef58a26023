//! Static memory a heap can own.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};

/// `N` bytes of static memory for one [`BoundedHeap`](crate::BoundedHeap), aligned to 16.
///
/// A region is claimed by the first heap that allocates from it; any other heap built over
/// the same region stays empty (every allocation fails), so two heaps never share memory.
#[repr(C, align(16))]
pub struct Region<const N: usize> {
    bytes: UnsafeCell<MaybeUninit<[u8; N]>>,
    claimed: AtomicBool,
}

// SAFETY: the bytes are only reached through the one heap that claims the region (`claim`
// succeeds once), and that heap serializes every access with its lock.
unsafe impl<const N: usize> Sync for Region<N> {}

impl<const N: usize> Region<N> {
    /// An unclaimed region (in `.bss` when used as a `static`).
    pub const fn new() -> Region<N> {
        Region { bytes: UnsafeCell::new(MaybeUninit::uninit()), claimed: AtomicBool::new(false) }
    }

    /// Bytes in the region.
    pub const fn len(&self) -> usize {
        N
    }

    /// Whether the region has no bytes.
    pub const fn is_empty(&self) -> bool {
        N == 0
    }

    pub(crate) const fn start(&self) -> *mut u8 {
        self.bytes.get().cast()
    }

    pub(crate) const fn claim_flag(&self) -> &AtomicBool {
        &self.claimed
    }
}

impl<const N: usize> Default for Region<N> {
    fn default() -> Self {
        Region::new()
    }
}

/// Claims a region's memory for one heap: true the first time only.
pub(crate) fn claim(flag: &AtomicBool) -> bool {
    flag.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok()
}
