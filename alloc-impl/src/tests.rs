extern crate std;

use core::alloc::{GlobalAlloc, Layout};
use core::mem::MaybeUninit;
use std::vec::Vec;

use crate::{BoundedHeap, InitError, Region};

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn alloc(heap: &BoundedHeap, size: usize) -> *mut u8 {
    // SAFETY: non-zero size.
    unsafe { heap.alloc(layout(size)) }
}

fn free(heap: &BoundedHeap, ptr: *mut u8, size: usize) {
    // SAFETY: `ptr` came from `alloc(heap, size)`.
    unsafe { heap.dealloc(ptr, layout(size)) }
}

#[test]
fn counts_current_and_peak_and_frees() {
    static REGION: Region<4096> = Region::new();
    static HEAP: BoundedHeap = BoundedHeap::new(&REGION);
    let a = alloc(&HEAP, 100);
    let b = alloc(&HEAP, 200);
    assert!(!a.is_null() && !b.is_null());
    assert_eq!(a as usize % 8, 0);
    let s = HEAP.stats();
    assert_eq!((s.current, s.peak, s.allocations, s.failures), (300, 300, 2, 0));
    assert!(s.region_used >= 300 && s.capacity <= 4096 && s.capacity >= 4096 - 16);
    free(&HEAP, a, 100);
    assert_eq!(HEAP.stats().current, 200);
    assert_eq!(HEAP.stats().peak, 300);
    HEAP.reset_peak();
    assert_eq!(HEAP.stats().peak, 200);
    free(&HEAP, b, 200);
    assert_eq!(HEAP.stats().current, 0);
    assert_eq!(HEAP.stats().region_used, 0);
}

#[test]
fn the_limit_is_hard_and_failures_return_null() {
    static REGION: Region<4096> = Region::new();
    static HEAP: BoundedHeap = BoundedHeap::new(&REGION);
    assert_eq!(HEAP.limit(), 4096);
    HEAP.set_limit(1000);
    let a = alloc(&HEAP, 600);
    assert!(!a.is_null());
    assert!(alloc(&HEAP, 401).is_null(), "600 + 401 bytes is past the 1000-byte limit");
    let b = alloc(&HEAP, 400);
    assert!(!b.is_null(), "exactly at the limit is allowed");
    assert_eq!(HEAP.stats().failures, 1);
    free(&HEAP, a, 600);
    free(&HEAP, b, 400);
    // The region itself running out is a failure too, whatever the limit.
    HEAP.set_limit(usize::MAX);
    assert!(alloc(&HEAP, 8192).is_null());
    assert_eq!(HEAP.stats().failures, 2);
}

#[test]
fn the_error_reserve_opens_after_a_failure_and_closes_when_memory_is_returned() {
    static REGION: Region<4096> = Region::new();
    static HEAP: BoundedHeap = BoundedHeap::new(&REGION);
    HEAP.set_limit(1000);
    HEAP.set_error_reserve(64);
    let a = alloc(&HEAP, 990);
    assert!(alloc(&HEAP, 32).is_null(), "no reserve before a failure");
    // Right after the failure, a message-sized allocation past the limit succeeds.
    let msg = alloc(&HEAP, 32);
    assert!(!msg.is_null());
    assert!(alloc(&HEAP, 64).is_null(), "the reserve is bounded");
    // Temporaries made and freed while the message lives keep it open...
    let tmp = alloc(&HEAP, 16);
    assert!(!tmp.is_null());
    free(&HEAP, tmp, 16);
    let tmp = alloc(&HEAP, 16);
    assert!(!tmp.is_null());
    free(&HEAP, tmp, 16);
    // ...until usage is back where it failed (the error is gone), which closes it.
    free(&HEAP, msg, 32);
    assert!(alloc(&HEAP, 32).is_null(), "closed, so this fails (and opens it again)");
    let msg = alloc(&HEAP, 32);
    assert!(!msg.is_null());
    free(&HEAP, msg, 32);
    // A new limit closes it too, even where usage never falls below the failure point.
    assert!(alloc(&HEAP, 32).is_null());
    HEAP.set_limit(1000);
    assert!(alloc(&HEAP, 16).is_null(), "closed by set_limit");
    HEAP.set_limit(1000);
    free(&HEAP, a, 990);
    let s = HEAP.stats();
    assert!(s.peak <= 1000 + 64, "{s}");
}

#[test]
fn a_region_serves_one_heap_only() {
    static REGION: Region<1024> = Region::new();
    static FIRST: BoundedHeap = BoundedHeap::new(&REGION);
    static SECOND: BoundedHeap = BoundedHeap::new(&REGION);
    let a = alloc(&FIRST, 64);
    assert!(!a.is_null());
    assert!(alloc(&SECOND, 64).is_null(), "the region already belongs to FIRST");
    assert_eq!(SECOND.stats().capacity, 0);
    free(&FIRST, a, 64);
}

#[test]
fn an_empty_heap_takes_memory_once() {
    static HEAP: BoundedHeap = BoundedHeap::empty();
    assert!(alloc(&HEAP, 8).is_null(), "no memory yet");
    let memory: &'static mut [MaybeUninit<u8>] = Vec::leak(std::vec![MaybeUninit::uninit(); 2048]);
    let (start, size) = (memory.as_mut_ptr().cast::<u8>(), memory.len());
    // SAFETY: leaked, so valid for the rest of the program and used by nothing else.
    assert_eq!(unsafe { HEAP.init(start, 8) }, Err(InitError::TooSmall { size: 8, min: 32 }));
    // SAFETY: as above.
    assert_eq!(unsafe { HEAP.init(start, size) }, Ok(()));
    // SAFETY: as above (refused before the memory is touched).
    assert_eq!(unsafe { HEAP.init(start, size) }, Err(InitError::AlreadyInitialized));
    assert_eq!(HEAP.limit(), 2048);
    let a = alloc(&HEAP, 1000);
    assert!(!a.is_null());
    free(&HEAP, a, 1000);

    static REGION: Region<256> = Region::new();
    static WITH_REGION: BoundedHeap = BoundedHeap::new(&REGION);
    // SAFETY: refused before the memory is touched.
    assert_eq!(unsafe { WITH_REGION.init(start, size) }, Err(InitError::AlreadyInitialized));
}

#[test]
fn threads_never_get_overlapping_blocks() {
    static REGION: Region<{ 64 * 1024 }> = Region::new();
    static HEAP: BoundedHeap = BoundedHeap::new(&REGION);
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..2000usize {
                    let size = 16 + (round * 7 + usize::from(t) * 13) % 200;
                    let p = alloc(&HEAP, size);
                    assert!(!p.is_null());
                    // SAFETY: `p` is a fresh block of `size` bytes owned by this thread.
                    let block = unsafe { core::slice::from_raw_parts_mut(p, size) };
                    block.fill(t);
                    std::thread::yield_now();
                    assert!(block.iter().all(|&b| b == t), "another thread wrote into this block");
                    free(&HEAP, p, size);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = HEAP.stats();
    assert_eq!((s.current, s.region_used, s.allocations, s.failures), (0, 0, 8000, 0));
}
