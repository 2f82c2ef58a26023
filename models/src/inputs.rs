//! The values of a BERT graph's positional, attention and pooling inputs for a batch of
//! sequences, in the layouts of [`Layout`].

use tessera_core::fallible::out_of_memory;
use tessera_core::{Error, Result};

use crate::bert::Layout;

/// `n` copies of `value`, the size computed with checks and the memory asked for without
/// aborting: a batch too large for this machine is an out-of-memory error naming `what`.
fn filled<T: Clone>(what: &'static str, sizes: &[usize], value: T) -> Result<Vec<T>> {
    let n = sizes.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).ok_or(Error::Overflow { what })?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| out_of_memory(what, n.saturating_mul(std::mem::size_of::<T>())))?;
    v.resize(n, value);
    Ok(v)
}

/// The values of the inputs for sequences of the given lengths.
pub struct PackedInputs {
    pub positions: Vec<i32>,
    pub attention_mask: Vec<f32>,
    pub pooling: Vec<f32>,
    /// Packed layout only (empty otherwise): see [`BertGraph::attention_gather`](crate::BertGraph::attention_gather).
    pub attention_gather: Vec<i32>,
    /// Packed layout only (empty otherwise): see [`BertGraph::attention_scatter`](crate::BertGraph::attention_scatter).
    pub attention_scatter: Vec<i32>,
}

/// The input values of a graph built for `layout` ([`Layout::for_lengths`] of `lens`).
pub fn inputs_for(layout: &Layout, lens: &[usize]) -> Result<PackedInputs> {
    if layout.is_packed() {
        packed_inputs(lens)
    } else {
        padded_inputs(lens, layout.tokens)
    }
}

/// Positions, the attention blocks' gather and scatter indices and key masks, and the pooling
/// weights for sequences of lengths `lens` packed one after another into one row
/// ([`Layout::packed`](crate::Layout::packed)): one block of `longest` slots per sequence.
pub fn packed_inputs(lens: &[usize]) -> Result<PackedInputs> {
    let t =
        lens.iter().try_fold(0usize, |a, &b| a.checked_add(b)).ok_or(Error::Overflow { what: "tokens of a batch" })?;
    let (a, n) = (lens.iter().copied().max().unwrap_or(0), lens.len());
    let mut positions = filled("token positions", &[t], 0i32)?;
    positions.clear();
    let mut attention_gather = filled("attention gather indices", &[a, n], 0i32)?;
    let mut attention_scatter = filled("attention scatter indices", &[t], 0i32)?;
    attention_scatter.clear();
    let mut attention_mask = filled("attention mask", &[a, n], f32::NEG_INFINITY)?;
    let mut pooling = filled("pooling weights", &[a, n], 0.0f32)?;
    let mut start = 0;
    for (s, &len) in lens.iter().enumerate() {
        positions.extend((0..len).map(|p| p as i32));
        for p in 0..len {
            attention_gather[s * a + p] = (start + p) as i32;
            attention_scatter.push((s * a + p) as i32);
        }
        // Every query slot (padding ones too, whose results are dropped) sees the keys of
        // its own sequence.
        attention_mask[s * a..][..len].fill(0.0);
        pooling[s * a..][..len].fill(1.0 / len as f32);
        start += len;
    }
    Ok(PackedInputs { positions, attention_mask, pooling, attention_gather, attention_scatter })
}

/// The same for sequences padded to `tokens` each, one per row ([`Layout::padded`](crate::Layout::padded)):
/// padding keys are masked out and padding tokens left out of the mean.
pub fn padded_inputs(lens: &[usize], tokens: usize) -> Result<PackedInputs> {
    let rows = lens.len();
    let mut positions = filled("token positions", &[tokens, rows], 0i32)?;
    positions.clear();
    let mut attention_mask = filled("attention mask", &[tokens, rows], f32::NEG_INFINITY)?;
    let mut pooling = filled("pooling weights", &[tokens, rows], 0.0f32)?;
    for (r, &len) in lens.iter().enumerate() {
        let len = len.min(tokens);
        positions.extend((0..tokens).map(|p| p as i32));
        attention_mask[r * tokens..][..len].fill(0.0);
        pooling[r * tokens..][..len].fill(1.0 / len as f32);
    }
    Ok(PackedInputs { positions, attention_mask, pooling, attention_gather: Vec::new(), attention_scatter: Vec::new() })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn batches_too_large_to_hold_are_typed_errors() {
        assert!(matches!(packed_inputs(&[usize::MAX, 2]), Err(Error::Overflow { .. })));
        let err = padded_inputs(&[1; 4], usize::MAX / 8).err().unwrap();
        assert!(matches!(err, Error::OutOfMemory { .. } | Error::Overflow { .. }), "{err:?}");
        let err = packed_inputs(&[1 << 40, 1 << 40]).err().unwrap();
        assert!(matches!(err, Error::OutOfMemory { .. } | Error::Overflow { .. }), "{err:?}");
    }

    const NEG: f32 = f32::NEG_INFINITY;

    #[test]
    fn packed_sequences_attend_in_their_own_blocks() {
        let p = packed_inputs(&[2, 3]).unwrap();
        assert_eq!(p.positions, [0, 1, 0, 1, 2]);
        // Blocks of 3 slots: sequence 0 in tokens 0-1 (slot 2 is padding), sequence 1 in 2-4.
        assert_eq!(p.attention_gather, [0, 1, 0, 2, 3, 4]);
        assert_eq!(p.attention_scatter, [0, 1, 3, 4, 5]);
        // The queries of block 0 see keys 0-1; of block 1, keys 0-2.
        assert_eq!(p.attention_mask, [0.0, 0.0, NEG, 0.0, 0.0, 0.0]);
        // Pooling [slots, blocks]: each sequence averages the slots holding its tokens.
        let (a, b) = (1.0 / 2.0, 1.0 / 3.0);
        assert_eq!(p.pooling, [a, a, 0.0, b, b, b]);
    }

    #[test]
    fn padded_rows_mask_and_skip_their_padding() {
        let p = padded_inputs(&[1, 3], 3).unwrap();
        assert_eq!(p.positions, [0, 1, 2, 0, 1, 2]);
        assert_eq!(p.attention_mask, [0.0, NEG, NEG, 0.0, 0.0, 0.0]);
        let b = 1.0 / 3.0;
        assert_eq!(p.pooling, [1.0, 0.0, 0.0, b, b, b]);
        assert!(p.attention_gather.is_empty() && p.attention_scatter.is_empty());
    }

    #[test]
    fn no_sequences_no_values() {
        let p = packed_inputs(&[]).unwrap();
        assert!(p.positions.is_empty() && p.attention_mask.is_empty() && p.pooling.is_empty());
    }
}
