//! The held-out images, as `scripts/train_digits.py` writes them:
//!
//! ```text
//! magic b"TDIG", u16 version (1), u16 pixels per image (64), u32 count N,
//! then N records of 68 bytes: 64 pixels (0..16), label, the script's predicted label with
//! F32 weights, its predicted label with Q8_0 weights, a zero byte.
//! ```

use crate::classifier::PIXELS;
use crate::error::Error;

const MAGIC: &[u8; 4] = b"TDIG";
const HEADER: usize = 12;
const RECORD: usize = PIXELS + 4;

/// A test set borrowed from its bytes (nothing is copied).
#[derive(Clone, Copy, Debug)]
pub struct TestSet<'a> {
    records: &'a [u8],
    len: usize,
}

/// One image of the test set.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    /// Pixel intensities 0..16, row by row.
    pub pixels: &'a [u8; PIXELS],
    pub label: u8,
    /// What the training script predicts with the F32 weights.
    pub python_f32: u8,
    /// What the training script predicts with the Q8_0 weights.
    pub python_q8_0: u8,
}

impl<'a> TestSet<'a> {
    /// Checks the header and the length.
    pub fn parse(bytes: &'a [u8]) -> Result<TestSet<'a>, Error> {
        let err = |what, offset| Error::TestSet { what, offset };
        let header = bytes.get(..HEADER).ok_or(err("the file is shorter than its 12-byte header", 0))?;
        if &header[..4] != MAGIC {
            return Err(err("the file does not start with b\"TDIG\"", 0));
        }
        if u16::from_le_bytes([header[4], header[5]]) != 1 {
            return Err(err("unsupported version, expected 1", 4));
        }
        if usize::from(u16::from_le_bytes([header[6], header[7]])) != PIXELS {
            return Err(err("images are not 8x8 (64 pixels)", 6));
        }
        let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let records = &bytes[HEADER..];
        if len.checked_mul(RECORD) != Some(records.len()) {
            return Err(err("the image count does not match the file length (68 bytes per image)", 8));
        }
        Ok(TestSet { records, len })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The images in file order.
    pub fn iter(&self) -> impl Iterator<Item = Sample<'a>> + 'a {
        self.records.chunks_exact(RECORD).filter_map(|r| {
            let (pixels, tail) = r.split_first_chunk::<PIXELS>()?;
            Some(Sample { pixels, label: tail[0], python_f32: tail[1], python_q8_0: tail[2] })
        })
    }
}
