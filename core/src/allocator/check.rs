//! The invariants every allocated graph must satisfy, checked from the bindings alone:
//!
//! - every tensor that needs memory has some, inside its buffer, and planned ones are aligned;
//! - two tensors whose memory overlaps are never live at the same time, except a result that
//!   took over the memory of an operand it may overwrite (in place), at the node computing it;
//! - outputs stay live to the end (nothing overwrites them).

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::{TensorFlags, TensorId};

/// A broken allocation invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    Unbound {
        tensor: String,
    },
    OutsideBuffer {
        tensor: String,
        end: usize,
        size: usize,
    },
    Misaligned {
        tensor: String,
        offset: usize,
        alignment: usize,
    },
    /// Two tensors share bytes while both are live (`first` is live over nodes `a`, the
    /// other over `b`, as inclusive node-index ranges; -1 is "before the first node").
    Overlap {
        first: String,
        second: String,
        a: (isize, isize),
        b: (isize, isize),
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Unbound { tensor } => write!(f, "'{tensor}' needs memory but has none"),
            Violation::OutsideBuffer { tensor, end, size } => {
                write!(f, "'{tensor}' ends at byte {end} of a {size}-byte buffer")
            }
            Violation::Misaligned { tensor, offset, alignment } => {
                write!(f, "'{tensor}' starts at offset {offset}, not a multiple of {alignment}")
            }
            Violation::Overlap { first, second, a, b } => write!(
                f,
                "'{first}' (live over nodes {}..={}) and '{second}' (live over nodes {}..={}) share memory",
                a.0, a.1, b.0, b.1
            ),
        }
    }
}

/// A tensor that owns memory, with the node range over which that memory must hold it.
struct Owner {
    id: TensorId,
    buffer: usize,
    start: usize,
    end: usize,
    first: isize,
    last: isize,
}

/// Checks the allocation of `graph` (after binding); `Ok(Err(v))` reports a violation,
/// `Err(e)` a graph that cannot be checked.
pub fn check_allocation(graph: &Graph) -> Result<core::result::Result<(), Violation>> {
    let n = graph.tensors().len();
    let last_node = graph.nodes().len() as isize - 1;
    // First node writing and last node reading each memory owner (views count for their source).
    let mut first = vec![-1isize; n];
    let mut last = vec![-1isize; n];
    let root = |id: TensorId| graph.tensor(id).map(|t| t.view_src().unwrap_or(id));
    for (i, &node) in graph.nodes().iter().enumerate() {
        let i = i as isize;
        let t = graph.tensor(node)?;
        if t.view_src().is_none() && !t.flags().contains(TensorFlags::INPUT) {
            first[node.index()] = i;
            last[node.index()] = last[node.index()].max(i);
        }
        for (_, src) in t.srcs() {
            let r = root(src)?;
            last[r.index()] = last[r.index()].max(i);
        }
        if t.flags().contains(TensorFlags::OUTPUT) {
            let r = root(node)?;
            last[r.index()] = last_node.max(0);
        }
    }
    let mut buffers: Vec<*const ()> = Vec::new();
    let mut owners = Vec::new();
    for &id in graph.leafs().iter().chain(graph.nodes()) {
        let t = graph.tensor(id)?;
        if t.view_src().is_some() || t.nbytes() == 0 {
            continue;
        }
        let Some(d) = t.data() else {
            return Ok(Err(Violation::Unbound { tensor: graph.label(id) }));
        };
        let end = d.offset.checked_add(t.nbytes()).ok_or(Error::Overflow { what: "tensor end" })?;
        if end > d.buffer.size() {
            return Ok(Err(Violation::OutsideBuffer { tensor: graph.label(id), end, size: d.buffer.size() }));
        }
        if !t.flags().contains(TensorFlags::PLANNED) {
            continue;
        }
        let alignment = d.buffer.buffer_type().alignment();
        if d.offset % alignment != 0 {
            return Ok(Err(Violation::Misaligned { tensor: graph.label(id), offset: d.offset, alignment }));
        }
        let key = Arc::as_ptr(&d.buffer) as *const ();
        let buffer = buffers.iter().position(|b| *b == key).unwrap_or_else(|| {
            buffers.push(key);
            buffers.len() - 1
        });
        let (f, l) = (first[id.index()], last[id.index()].max(first[id.index()]));
        owners.push(Owner { id, buffer, start: d.offset, end, first: f, last: l });
    }
    owners.sort_by_key(|o| (o.buffer, o.start));
    for (i, a) in owners.iter().enumerate() {
        for b in owners[i + 1..].iter().take_while(|b| b.buffer == a.buffer && b.start < a.end) {
            let disjoint_in_time = a.last < b.first || b.last < a.first;
            if disjoint_in_time || in_place(graph, a, b)? || in_place(graph, b, a)? {
                continue;
            }
            return Ok(Err(Violation::Overlap {
                first: graph.label(a.id),
                second: graph.label(b.id),
                a: (a.first, a.last),
                b: (b.first, b.last),
            }));
        }
    }
    Ok(Ok(()))
}

/// Whether `result` legitimately took over `operand`'s memory: it is computed, in place, by
/// the node that last reads `operand`, from `operand` (or a view at offset 0 of it) with the
/// same layout, and the two are live together only at that node.
fn in_place(graph: &Graph, operand: &Owner, result: &Owner) -> Result<bool> {
    if result.first < 0 || operand.last != result.first {
        return Ok(false);
    }
    let t = graph.tensor(result.id)?;
    if !t.op().can_inplace() {
        return Ok(false);
    }
    for (_, src) in t.srcs() {
        let s = graph.tensor(src)?;
        let direct = src == operand.id;
        let via_view = s.view_src() == Some(operand.id) && s.view_offset() == 0;
        if (direct || via_view) && s.same_layout(t) {
            return Ok(true);
        }
    }
    Ok(false)
}
