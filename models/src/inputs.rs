//! The values of a BERT graph's positional, attention and pooling inputs for a batch of
//! sequences, in the layouts of [`Layout`].

use crate::bert::Layout;

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
pub fn inputs_for(layout: &Layout, lens: &[usize]) -> PackedInputs {
    if layout.is_packed() {
        packed_inputs(lens)
    } else {
        padded_inputs(lens, layout.tokens)
    }
}

/// Positions, the attention blocks' gather and scatter indices and key masks, and the pooling
/// weights for sequences of lengths `lens` packed one after another into one row
/// ([`Layout::packed`](crate::Layout::packed)): one block of `longest` slots per sequence.
pub fn packed_inputs(lens: &[usize]) -> PackedInputs {
    let t: usize = lens.iter().sum();
    let a = lens.iter().copied().max().unwrap_or(0);
    let mut positions = Vec::with_capacity(t);
    let mut attention_gather = vec![0i32; a * lens.len()];
    let mut attention_scatter = Vec::with_capacity(t);
    let mut attention_mask = vec![f32::NEG_INFINITY; a * lens.len()];
    let mut pooling = vec![0.0f32; a * lens.len()];
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
    PackedInputs { positions, attention_mask, pooling, attention_gather, attention_scatter }
}

/// The same for sequences padded to `tokens` each, one per row ([`Layout::padded`](crate::Layout::padded)):
/// padding keys are masked out and padding tokens left out of the mean.
pub fn padded_inputs(lens: &[usize], tokens: usize) -> PackedInputs {
    let rows = lens.len();
    let mut positions = Vec::with_capacity(tokens * rows);
    let mut attention_mask = vec![f32::NEG_INFINITY; tokens * rows];
    let mut pooling = vec![0.0f32; tokens * rows];
    for (r, &len) in lens.iter().enumerate() {
        let len = len.min(tokens);
        positions.extend((0..tokens).map(|p| p as i32));
        attention_mask[r * tokens..][..len].fill(0.0);
        pooling[r * tokens..][..len].fill(1.0 / len as f32);
    }
    PackedInputs { positions, attention_mask, pooling, attention_gather: Vec::new(), attention_scatter: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEG: f32 = f32::NEG_INFINITY;

    #[test]
    fn packed_sequences_attend_in_their_own_blocks() {
        let p = packed_inputs(&[2, 3]);
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
        let p = padded_inputs(&[1, 3], 3);
        assert_eq!(p.positions, [0, 1, 2, 0, 1, 2]);
        assert_eq!(p.attention_mask, [0.0, NEG, NEG, 0.0, 0.0, 0.0]);
        let b = 1.0 / 3.0;
        assert_eq!(p.pooling, [1.0, 0.0, 0.0, b, b, b]);
        assert!(p.attention_gather.is_empty() && p.attention_scatter.is_empty());
    }

    #[test]
    fn no_sequences_no_values() {
        let p = packed_inputs(&[]);
        assert!(p.positions.is_empty() && p.attention_mask.is_empty() && p.pooling.is_empty());
    }
}
