//! The bounded heap: a lock, a first-fit free list, a limit and counters.

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;
use core::ptr::{null_mut, NonNull};
use core::sync::atomic::AtomicBool;

use linked_list_allocator::Heap;
use spin::Mutex;

use crate::region::{claim, Region};

/// The fewest bytes a heap can be built over: the free list's first entry (two words) plus
/// room to align the start.
const MIN_HEAP_BYTES: usize = 4 * core::mem::size_of::<usize>();

/// Where a heap's memory comes from.
enum Source {
    /// A [`Region`], claimed (and the free list built) on first use.
    Region { start: *mut u8, size: usize, claimed: &'static AtomicBool },
    /// Memory handed to [`BoundedHeap::init`].
    Manual,
}

/// Why [`BoundedHeap::init`] refused memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitError {
    /// The heap already has memory (a region, or an earlier `init`).
    AlreadyInitialized,
    /// The memory is too small to hold the free list's bookkeeping (or the pointer is null).
    TooSmall { size: usize, min: usize },
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitError::AlreadyInitialized => f.write_str("the heap already has its memory; init is called once"),
            InitError::TooSmall { size, min } => {
                write!(f, "a heap of {size} bytes is too small; it needs at least {min} bytes")
            }
        }
    }
}

impl core::error::Error for InitError {}

/// What a heap has handed out, and what it refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes of the region the free list manages (0 before first use).
    pub capacity: usize,
    /// The most bytes (requested sizes) that may be live at once.
    pub limit: usize,
    /// Bytes granted past the limit right after a failure (see `set_error_reserve`).
    pub error_reserve: usize,
    /// Requested bytes live now.
    pub current: usize,
    /// The most requested bytes live at once since the last `reset_peak`.
    pub peak: usize,
    /// Region bytes in use now: requested sizes rounded up to the free list's granule.
    pub region_used: usize,
    /// The most region bytes in use at once since the last `reset_peak`.
    pub region_peak: usize,
    /// Successful allocations so far.
    pub allocations: u64,
    /// Refused allocations so far (over the limit, or no free block large enough).
    pub failures: u64,
}

impl fmt::Display for HeapStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} B live (peak {} B; region {} B, peak {} B) of limit {} B, capacity {} B; {} allocations, {} refused",
            self.current,
            self.peak,
            self.region_used,
            self.region_peak,
            self.limit,
            self.capacity,
            self.allocations,
            self.failures
        )
    }
}

struct State {
    heap: Heap,
    ready: bool,
    limit: usize,
    error_reserve: usize,
    /// Set by a failure: live bytes at that moment. While set, the limit is raised by the
    /// error reserve; it clears once usage is back at or below it (what was allocated after
    /// the failure is freed), or when a new limit is set.
    failed_at: Option<usize>,
    current: usize,
    peak: usize,
    region_peak: usize,
    allocations: u64,
    failures: u64,
}

impl State {
    fn alloc(&mut self, layout: Layout) -> *mut u8 {
        let size = layout.size();
        let allowed = match self.failed_at {
            Some(_) => self.limit.saturating_add(self.error_reserve),
            None => self.limit,
        };
        let fits = self.current.checked_add(size).is_some_and(|total| total <= allowed);
        let placed = if fits && self.ready { self.heap.allocate_first_fit(layout).ok() } else { None };
        let Some(ptr) = placed else {
            self.failures += 1;
            self.failed_at.get_or_insert(self.current);
            return null_mut();
        };
        self.allocations += 1;
        self.current += size;
        self.peak = self.peak.max(self.current);
        self.region_peak = self.region_peak.max(self.heap.used());
        ptr.as_ptr()
    }

    /// # Safety
    /// `ptr` was returned by `alloc` of this state with the same `layout` and not freed since.
    unsafe fn dealloc(&mut self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: forwarded from the caller: `ptr` came from `allocate_first_fit(layout)`.
        unsafe { self.heap.deallocate(ptr, layout) };
        self.current = self.current.saturating_sub(layout.size());
        if self.failed_at.is_some_and(|mark| self.current <= mark) {
            self.failed_at = None;
        }
    }

    fn stats(&self) -> HeapStats {
        HeapStats {
            capacity: if self.ready { self.heap.size() } else { 0 },
            limit: self.limit,
            error_reserve: self.error_reserve,
            current: self.current,
            peak: self.peak,
            region_used: self.heap.used(),
            region_peak: self.region_peak,
            allocations: self.allocations,
            failures: self.failures,
        }
    }

    /// Builds the free list over `start..start + size`.
    ///
    /// # Safety
    /// The memory is valid for reads and writes for `'static` and used by nothing else.
    unsafe fn take_memory(&mut self, start: *mut u8, size: usize) -> Result<(), InitError> {
        if self.ready {
            return Err(InitError::AlreadyInitialized);
        }
        if start.is_null() || size < MIN_HEAP_BYTES {
            return Err(InitError::TooSmall { size, min: MIN_HEAP_BYTES });
        }
        // SAFETY: forwarded from the caller; `size` is large enough for the free list's first
        // entry after aligning `start` (checked above), so `init` does not panic.
        unsafe { self.heap.init(start, size) };
        self.ready = true;
        Ok(())
    }
}

/// A global allocator over one static region, with a hard limit and usage counters.
///
/// All methods take `&self` and may be called from any thread (and, with the
/// `critical-section` feature, from interrupt handlers).
pub struct BoundedHeap {
    source: Source,
    state: Mutex<State>,
}

// SAFETY: the raw pointer in `source` is only dereferenced by the free list, under the lock,
// after the region has been claimed for this heap alone.
unsafe impl Sync for BoundedHeap {}
// SAFETY: as above; nothing in the heap is tied to a thread.
unsafe impl Send for BoundedHeap {}

impl BoundedHeap {
    const fn with_source(source: Source, limit: usize) -> BoundedHeap {
        BoundedHeap {
            source,
            state: Mutex::new(State {
                heap: Heap::empty(),
                ready: false,
                limit,
                error_reserve: 0,
                failed_at: None,
                current: 0,
                peak: 0,
                region_peak: 0,
                allocations: 0,
                failures: 0,
            }),
        }
    }

    /// A heap over `region`, usable at once (also as the global allocator, before `main`).
    /// The limit starts at the region's size.
    pub const fn new<const N: usize>(region: &'static Region<N>) -> BoundedHeap {
        BoundedHeap::with_source(Source::Region { start: region.start(), size: N, claimed: region.claim_flag() }, N)
    }

    /// A heap with no memory yet: every allocation fails until [`init`](Self::init).
    pub const fn empty() -> BoundedHeap {
        BoundedHeap::with_source(Source::Manual, usize::MAX)
    }

    /// Gives an [`empty`](Self::empty) heap its memory (from a linker symbol, say). The limit
    /// becomes `size` unless one was set.
    ///
    /// # Safety
    /// `start..start + size` must be valid for reads and writes for the rest of the program
    /// and used by nothing but this heap.
    pub unsafe fn init(&self, start: *mut u8, size: usize) -> Result<(), InitError> {
        self.locked(|s| {
            if matches!(self.source, Source::Region { .. }) {
                return Err(InitError::AlreadyInitialized);
            }
            // SAFETY: forwarded from the caller.
            unsafe { s.take_memory(start, size) }?;
            if s.limit == usize::MAX {
                s.limit = size;
            }
            Ok(())
        })
    }

    /// Runs `f` on the state with the lock held (and interrupts masked, with the
    /// `critical-section` feature), first building the free list over the region if needed.
    fn locked<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        masked(|| {
            let mut state = self.state.lock();
            if let Source::Region { start, size, claimed } = self.source {
                if !state.ready && claim(claimed) {
                    // SAFETY: the region is `'static`, and `claim` succeeded: no other heap
                    // uses it, and this one takes it once (under the lock, `ready` is false).
                    // Its size is at least `MIN_HEAP_BYTES` or `take_memory` refuses it.
                    let _ = unsafe { state.take_memory(start, size) };
                }
            }
            f(&mut state)
        })
    }

    /// Sets the most bytes that may be live at once (and closes an open error reserve).
    /// Lowering it below the current usage frees nothing; later allocations fail until usage
    /// drops under it.
    pub fn set_limit(&self, bytes: usize) {
        self.locked(|s| {
            s.limit = bytes;
            s.failed_at = None;
        });
    }

    /// The most bytes that may be live at once.
    pub fn limit(&self) -> usize {
        self.locked(|s| s.limit)
    }

    /// Bytes granted past the limit after a failure, until usage is back to what was live
    /// when it failed (or a new limit is set): room to build the error that reports the
    /// failure. Usage can then exceed the limit by at most this much. 0 (the default) makes
    /// the limit exact.
    pub fn set_error_reserve(&self, bytes: usize) {
        self.locked(|s| s.error_reserve = bytes);
    }

    /// Usage counters and limits.
    pub fn stats(&self) -> HeapStats {
        self.locked(|s| s.stats())
    }

    /// Starts a new peak measurement at the current usage.
    pub fn reset_peak(&self) {
        self.locked(|s| {
            s.peak = s.current;
            s.region_peak = s.heap.used();
        });
    }
}

/// Runs `f` with interrupts masked (through the `critical-section` implementation the
/// program links).
#[cfg(feature = "critical-section")]
fn masked<R>(f: impl FnOnce() -> R) -> R {
    critical_section::with(|_| f())
}

/// Runs `f`: without the `critical-section` feature only the spin lock guards the heap, so an
/// interrupt handler must not allocate.
#[cfg(not(feature = "critical-section"))]
fn masked<R>(f: impl FnOnce() -> R) -> R {
    f()
}

// SAFETY: `alloc` returns null or a block of `layout` from the free list that is not in use;
// `dealloc` returns blocks to the same list. The lock serializes every access to the list.
unsafe impl GlobalAlloc for BoundedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.locked(|s| s.alloc(layout))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(ptr) = NonNull::new(ptr) else { return };
        // SAFETY: the caller passes a pointer this allocator returned for `layout`.
        self.locked(|s| unsafe { s.dealloc(ptr, layout) });
    }
}
