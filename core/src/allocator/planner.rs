//! The dynamic planner: places tensors at virtual addresses (chunk, offset) by best fit over
//! sorted free blocks, merging blocks on free, and records each chunk's high-water mark.
//!
//! Nothing is allocated here: the high-water marks become real buffers afterwards. Chunks exist
//! because some buffer types cap their largest allocation; a plan larger than the cap spreads
//! over several chunks, one buffer each.

use alloc::vec::Vec;

use crate::error::{Error, Result};

/// A virtual address: a chunk and a byte offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    pub chunk: usize,
    pub offset: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FreeBlock {
    offset: usize,
    size: usize,
}

#[derive(Clone, Debug)]
struct Chunk {
    /// Sorted by offset, never adjacent (adjacent blocks are merged). The last block runs to
    /// the end of the chunk's capacity: taking from it grows the high-water mark.
    free: Vec<FreeBlock>,
    /// Bytes up to the end of the highest allocation ever made in this chunk.
    high_water: usize,
}

/// Best-fit planner over virtual chunks of at most `max_chunk` bytes.
///
/// `MAX_FREE` caps the free blocks of a chunk and `MAX_CHUNKS` the chunks; exceeding either
/// is [`Error::CapacityExceeded`].
#[derive(Clone, Debug)]
pub struct DynamicPlanner<const MAX_FREE: usize = 256, const MAX_CHUNKS: usize = 16> {
    alignment: usize,
    max_chunk: usize,
    chunks: Vec<Chunk>,
}

const fn align_up(n: usize, align: usize) -> Option<usize> {
    match n.checked_add(align - 1) {
        Some(v) => Some(v & !(align - 1)),
        None => None,
    }
}

impl<const MAX_FREE: usize, const MAX_CHUNKS: usize> DynamicPlanner<MAX_FREE, MAX_CHUNKS> {
    /// A planner for a buffer type with `alignment` (a power of two) and largest allocation
    /// `max_size`.
    pub fn new(alignment: usize, max_size: usize) -> Self {
        let alignment = alignment.max(1).next_power_of_two();
        DynamicPlanner { alignment, max_chunk: max_size.clamp(1, usize::MAX / 2), chunks: Vec::new() }
    }

    /// Forgets every placement.
    pub fn reset(&mut self) {
        self.chunks.clear();
    }

    /// The size a request of `size` bytes really takes.
    pub fn aligned(&self, size: usize) -> Result<usize> {
        align_up(size, self.alignment).ok_or(Error::Overflow { what: "aligned allocation size" })
    }

    /// The high-water mark of each chunk: the buffer sizes this plan needs.
    pub fn chunk_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.chunks.iter().map(|c| c.high_water)
    }

    /// Total bytes of all chunks.
    pub fn total_size(&self) -> usize {
        self.chunks.iter().map(|c| c.high_water).sum()
    }

    /// Places `size` bytes.
    pub fn alloc(&mut self, size: usize) -> Result<Address> {
        let size = self.aligned(size)?;
        if size > self.max_chunk {
            return Err(Error::OutOfMemory {
                what: alloc::format!(
                    "one tensor in a buffer type whose largest allocation is {} bytes",
                    self.max_chunk
                ),
                requested: size,
            });
        }
        let (chunk, block) = match self.best_fit_hole(size).or_else(|| self.best_tail(size)) {
            Some(found) => found,
            None => self.new_chunk()?,
        };
        let c = &mut self.chunks[chunk];
        let b = &mut c.free[block];
        let offset = b.offset;
        b.offset += size;
        b.size -= size;
        if b.size == 0 {
            c.free.remove(block);
        }
        c.high_water = c.high_water.max(offset + size);
        Ok(Address { chunk, offset })
    }

    /// The smallest free block that fits, ignoring each chunk's tail (reusing a hole never
    /// grows a buffer); on equal sizes the later block wins.
    fn best_fit_hole(&self, size: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None;
        for (ci, c) in self.chunks.iter().enumerate() {
            let holes = c.free.len().saturating_sub(1);
            for (bi, b) in c.free[..holes].iter().enumerate() {
                if b.size >= size && best.is_none_or(|(_, _, s)| b.size <= s) {
                    best = Some((ci, bi, b.size));
                }
            }
        }
        best.map(|(c, b, _)| (c, b))
    }

    /// Among the chunks' tail blocks that fit: one needing no growth with the least surplus
    /// below the high-water mark, else the one needing the least growth.
    fn best_tail(&self, size: usize) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, isize)> = None;
        for (ci, c) in self.chunks.iter().enumerate() {
            let Some((bi, b)) = c.free.iter().enumerate().next_back() else { continue };
            if b.size < size {
                continue;
            }
            // Positive: bytes left below the high-water mark; negative: growth needed.
            let reuse = c.high_water as isize - (b.offset + size) as isize;
            let better = match best {
                None => true,
                Some((_, _, r)) if reuse >= 0 => r < 0 || reuse < r,
                Some((_, _, r)) => r < 0 && reuse > r,
            };
            if better {
                best = Some((ci, bi, reuse));
            }
        }
        best.map(|(c, b, _)| (c, b))
    }

    fn new_chunk(&mut self) -> Result<(usize, usize)> {
        if self.chunks.len() >= MAX_CHUNKS {
            return Err(Error::CapacityExceeded { what: "chunks per buffer type", limit: MAX_CHUNKS });
        }
        let mut free = Vec::new();
        free.try_reserve(4).map_err(|_| oom())?;
        free.push(FreeBlock { offset: 0, size: self.max_chunk });
        self.chunks.try_reserve(1).map_err(|_| oom())?;
        self.chunks.push(Chunk { free, high_water: 0 });
        Ok((self.chunks.len() - 1, 0))
    }

    /// Returns `size` bytes at `addr` to the free list, merging with neighbours.
    pub fn free(&mut self, addr: Address, size: usize) -> Result<()> {
        let size = self.aligned(size)?;
        let c = self.chunks.get_mut(addr.chunk).ok_or_else(|| Error::InvalidParam {
            op: "FREE",
            message: alloc::format!("chunk {} was never allocated", addr.chunk),
        })?;
        let end = addr.offset + size;
        // First block starting after the freed range.
        let next = c.free.partition_point(|b| b.offset < addr.offset);
        let merges_prev = next > 0 && c.free[next - 1].offset + c.free[next - 1].size == addr.offset;
        let merges_next = next < c.free.len() && c.free[next].offset == end;
        match (merges_prev, merges_next) {
            (true, true) => {
                c.free[next - 1].size += size + c.free[next].size;
                c.free.remove(next);
            }
            (true, false) => c.free[next - 1].size += size,
            (false, true) => {
                c.free[next].offset = addr.offset;
                c.free[next].size += size;
            }
            (false, false) => {
                if c.free.len() >= MAX_FREE {
                    return Err(Error::CapacityExceeded { what: "free blocks per chunk", limit: MAX_FREE });
                }
                c.free.try_reserve(1).map_err(|_| oom())?;
                c.free.insert(next, FreeBlock { offset: addr.offset, size });
            }
        }
        Ok(())
    }
}

fn oom() -> Error {
    crate::fallible::out_of_memory("allocation planner tables", core::mem::size_of::<FreeBlock>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_holes_are_reused_by_best_fit() {
        let mut p: DynamicPlanner = DynamicPlanner::new(16, usize::MAX);
        let a = p.alloc(100).unwrap(); // 112
        let b = p.alloc(40).unwrap(); // 48
        let c = p.alloc(200).unwrap();
        assert_eq!((a.offset, b.offset, c.offset), (0, 112, 160));
        p.free(a, 100).unwrap();
        p.free(b, 40).unwrap(); // merges with a: one hole of 160
        let d = p.alloc(150).unwrap();
        assert_eq!(d.offset, 0);
        assert_eq!(p.total_size(), 368);
        // Freeing everything leaves one free block again.
        p.free(d, 150).unwrap();
        p.free(c, 200).unwrap();
        assert_eq!(p.chunks[0].free, [FreeBlock { offset: 0, size: usize::MAX / 2 }]);
    }

    #[test]
    fn capped_buffer_types_spread_over_chunks() {
        let mut p: DynamicPlanner = DynamicPlanner::new(1, 100);
        let a = p.alloc(60).unwrap();
        let b = p.alloc(60).unwrap();
        let c = p.alloc(30).unwrap();
        assert_eq!((a.chunk, b.chunk, c.chunk), (0, 1, 0));
        assert_eq!(p.chunk_sizes().collect::<Vec<_>>(), [90, 60]);
        assert!(matches!(p.alloc(101), Err(Error::OutOfMemory { .. })));
    }

    #[test]
    fn running_out_of_tables_is_a_typed_error() {
        let mut p: DynamicPlanner<2, 1> = DynamicPlanner::new(1, 1000);
        let addrs: Vec<_> = (0..6).map(|_| p.alloc(10).unwrap()).collect();
        p.free(addrs[0], 10).unwrap();
        assert_eq!(p.free(addrs[2], 10), Err(Error::CapacityExceeded { what: "free blocks per chunk", limit: 2 }));
        let mut q: DynamicPlanner<4, 1> = DynamicPlanner::new(1, 100);
        q.alloc(80).unwrap();
        assert_eq!(q.alloc(80), Err(Error::CapacityExceeded { what: "chunks per buffer type", limit: 1 }));
    }
}
