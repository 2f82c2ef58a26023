//! A bounds-checked little-endian reader over borrowed bytes: every read either returns what
//! it read or says how short the input was, and never moves past the end.

/// A read that needed more bytes than were left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// Where the read started.
    pub at: usize,
    /// Bytes it needed (saturated when a declared length does not fit a `usize`).
    pub need: usize,
    /// Bytes that were left.
    pub left: usize,
}

/// A position in a byte slice.
#[derive(Clone, Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

macro_rules! read_le {
    ($($name:ident -> $ty:ty),* $(,)?) => {
        $(
            pub(crate) fn $name(&mut self) -> Result<$ty, Short> {
                self.array().map(<$ty>::from_le_bytes)
            }
        )*
    };
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    /// Bytes read so far (the offset of the next read).
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The bytes from offset `start` up to the current position (empty if `start` is past it).
    pub(crate) fn since(&self, start: usize) -> &'a [u8] {
        self.bytes.get(start..self.pos).unwrap_or(&[])
    }

    fn short(&self, need: usize) -> Short {
        Short { at: self.pos, need, left: self.remaining() }
    }

    /// The next `n` bytes, borrowed from the input.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        let slice = self.pos.checked_add(n).and_then(|end| self.bytes.get(self.pos..end)).ok_or(self.short(n))?;
        self.pos += slice.len();
        Ok(slice)
    }

    /// The next `n` bytes where `n` was read from the file as a `u64`.
    pub(crate) fn take_u64(&mut self, n: u64) -> Result<&'a [u8], Short> {
        let n = usize::try_from(n).map_err(|_| self.short(usize::MAX))?;
        self.take(n)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    read_le!(u8 -> u8, i8 -> i8, u16 -> u16, i16 -> i16, u32 -> u32, i32 -> i32, u64 -> u64, i64 -> i64, f32 -> f32, f64 -> f64);

    /// A GGUF string's bytes: a `u64` length and that many bytes (UTF-8 is checked by the caller).
    pub(crate) fn string_bytes(&mut self) -> Result<&'a [u8], Short> {
        let start = self.pos;
        let len = self.u64()?;
        self.take_u64(len).inspect_err(|_| self.pos = start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_values_in_order() {
        let mut bytes = alloc::vec::Vec::new();
        bytes.push(0xfe);
        bytes.extend_from_slice(&0x1234u16.to_le_bytes());
        bytes.extend_from_slice(&(-5i32).to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        bytes.extend_from_slice(&1.5f32.to_le_bytes());
        bytes.extend_from_slice(&(-2.25f64).to_le_bytes());
        bytes.extend_from_slice(&(-7i64).to_le_bytes());
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.i8(), Ok(-2));
        assert_eq!(c.u16(), Ok(0x1234));
        assert_eq!(c.i32(), Ok(-5));
        assert_eq!(c.u64(), Ok(u64::MAX));
        assert_eq!(c.f32(), Ok(1.5));
        assert_eq!(c.f64(), Ok(-2.25));
        assert_eq!(c.i64(), Ok(-7));
        assert_eq!(c.remaining(), 0);
        assert_eq!(c.pos(), bytes.len());
        assert_eq!(c.u8(), Err(Short { at: bytes.len(), need: 1, left: 0 }));
    }

    #[test]
    fn a_short_read_reports_and_does_not_move() {
        let bytes = [1u8, 2, 3];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u16(), Ok(0x0201));
        assert_eq!(c.u32(), Err(Short { at: 2, need: 4, left: 1 }));
        assert_eq!(c.pos(), 2);
        assert_eq!(c.u8(), Ok(3));
        assert_eq!(c.take(usize::MAX), Err(Short { at: 3, need: usize::MAX, left: 0 }));
        assert_eq!(c.take(0), Ok(&[][..]));
    }

    #[test]
    fn huge_lengths_are_short_reads_not_overflows() {
        let bytes = [0u8; 4];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.take(1).map(<[u8]>::len), Ok(1));
        assert!(c.take(usize::MAX).is_err());
        assert!(c.take_u64(u64::MAX).is_err());
        assert_eq!(c.pos(), 1);
    }

    #[test]
    fn strings_are_length_prefixed_and_rewind_when_short() {
        let mut bytes = alloc::vec::Vec::new();
        bytes.extend_from_slice(&3u64.to_le_bytes());
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&10u64.to_le_bytes());
        bytes.extend_from_slice(b"xy");
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.string_bytes(), Ok(&b"abc"[..]));
        assert_eq!(c.string_bytes(), Err(Short { at: 19, need: 10, left: 2 }));
        assert_eq!(c.pos(), 11);
    }
}
