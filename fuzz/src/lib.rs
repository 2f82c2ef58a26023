//! Structured fuzz cases: random graphs decoded from the fuzzer's bytes with `arbitrary`.

use arbitrary::Arbitrary;
use tessera::{DType, Graph, Result, TensorId};

/// One op applied to tensors picked from those built so far (indices wrap around).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum OpChoice {
    Unary(u8, u8),
    Binary(u8, u8, u8),
    Scale(u8),
    SoftMax(u8, bool),
    Norm(u8),
    RmsNorm(u8),
    /// `aᵀ · (a · b)`: two matrix products back to the working shape.
    MatMul(u8, u8),
    /// A transposed copy, transposed back (non-contiguous views in between).
    TransposeCont(u8),
    /// `a + a[row 0]` through a view.
    AddRow(u8),
    /// `a` copied into a fresh leaf of another type.
    CpyInto(u8, u8),
    /// `a` and `b` joined along dim 1, then the first half viewed back.
    ConcatView(u8, u8),
    /// Through a 1-D reshape and back.
    ReshapeNeg(u8),
    /// Cast to another float type.
    Cast(u8, u8),
    /// Mark a tensor as an output.
    Output(u8),
}

/// A random graph over `[n0, n1]` f32 tensors.
#[derive(Arbitrary, Debug, Clone)]
pub struct GraphCase {
    pub n0: u8,
    pub n1: u8,
    /// Leafs (1 to 4), each flagged as an input or not.
    pub leafs: Vec<bool>,
    pub ops: Vec<OpChoice>,
}

/// A built case: the graph, its leafs (to fill) and its final output.
pub struct Built {
    pub graph: Graph,
    pub leafs: Vec<TensorId>,
    pub output: TensorId,
}

const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

impl GraphCase {
    /// Builds the graph (at most 48 ops, small shapes); `None` if the case is empty.
    pub fn build(&self) -> Result<Option<Built>> {
        let (n0, n1) = (1 + self.n0 as usize % 40, 1 + self.n1 as usize % 12);
        let mut g = Graph::new();
        let mut pool: Vec<TensorId> = Vec::new();
        let mut leafs = Vec::new();
        for &input in self.leafs.iter().take(4) {
            let id = g.new_tensor(DType::F32, &[n0, n1])?;
            if input {
                g.set_input(id)?;
            }
            pool.push(id);
            leafs.push(id);
        }
        if pool.is_empty() {
            return Ok(None);
        }
        let pick = |pool: &[TensorId], i: u8| pool[i as usize % pool.len()];
        for op in self.ops.iter().take(48) {
            let next = match *op {
                OpChoice::Unary(which, a) => {
                    let a = pick(&pool, a);
                    let u = tessera::UnaryOp::ALL[which as usize % tessera::UnaryOp::ALL.len()];
                    // SQRT of negative values is NaN on every backend alike; keep values finite.
                    let u = if u == tessera::UnaryOp::Sqrt || u == tessera::UnaryOp::Exp {
                        tessera::UnaryOp::Tanh
                    } else {
                        u
                    };
                    g.unary(u, a)?
                }
                OpChoice::Binary(which, a, b) => {
                    let (a, b) = (pick(&pool, a), pick(&pool, b));
                    match which % 3 {
                        0 => g.add(a, b)?,
                        1 => g.sub(a, b)?,
                        _ => g.mul(a, b)?,
                    }
                }
                OpChoice::Scale(a) => g.scale(pick(&pool, a), 0.5)?,
                OpChoice::SoftMax(a, scaled) => g.soft_max(pick(&pool, a), None, if scaled { 0.25 } else { 1.0 })?,
                OpChoice::Norm(a) => g.norm(pick(&pool, a), 1e-5)?,
                OpChoice::RmsNorm(a) => g.rms_norm(pick(&pool, a), 1e-5)?,
                OpChoice::MatMul(a, b) => {
                    let (a, b) = (pick(&pool, a), pick(&pool, b));
                    let square = g.mul_mat(a, b)?; // [n1, n1]
                    let at = g.transpose(a)?;
                    let at = g.cont(at)?; // [n1, n0]
                    g.mul_mat(at, square)? // [n0, n1]
                }
                OpChoice::TransposeCont(a) => {
                    let t = g.transpose(pick(&pool, a))?;
                    let t = g.cont(t)?;
                    let t = g.transpose(t)?;
                    g.cont(t)?
                }
                OpChoice::AddRow(a) => {
                    let a = pick(&pool, a);
                    let nb1 = g.tensor(a)?.nb()[1];
                    let row = g.view_2d(a, n0, 1, nb1, 0)?;
                    g.add(a, row)?
                }
                OpChoice::CpyInto(a, t) => {
                    let dst = g.new_tensor(FLOATS[t as usize % FLOATS.len()], &[n0, n1])?;
                    leafs.push(dst);
                    let c = g.cpy(pick(&pool, a), dst)?;
                    g.cast(c, DType::F32)?
                }
                OpChoice::ConcatView(a, b) => {
                    let c = g.concat(pick(&pool, a), pick(&pool, b), 1)?;
                    let nb1 = g.tensor(c)?.nb()[1];
                    let v = g.view_2d(c, n0, n1, nb1, 0)?;
                    g.cont(v)?
                }
                OpChoice::ReshapeNeg(a) => {
                    let r = g.reshape(pick(&pool, a), &[n0 * n1])?;
                    let r = g.neg(r)?;
                    g.reshape(r, &[n0, n1])?
                }
                OpChoice::Cast(a, t) => {
                    let c = g.cast(pick(&pool, a), FLOATS[t as usize % FLOATS.len()])?;
                    g.cast(c, DType::F32)?
                }
                OpChoice::Output(a) => {
                    g.set_output(pick(&pool, a))?;
                    continue;
                }
            };
            pool.push(next);
        }
        // Sum the last few results so that most of the graph feeds the output.
        let mut out = pool[pool.len() - 1];
        for &t in pool.iter().rev().skip(1).take(3) {
            out = g.add(out, t)?;
        }
        g.set_output(out)?;
        g.build_forward(out)?;
        Ok(Some(Built { graph: g, leafs, output: out }))
    }
}

/// Deterministic leaf values in [-1, 1).
pub fn values(n: usize, seed: usize) -> Vec<f32> {
    let mut x = (seed as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Host memory with an adjustable largest allocation (one static per slot, so fuzz cases
/// need not leak buffer types).
pub struct CappedHost {
    pub name: &'static str,
    pub alignment: usize,
    pub max: std::sync::atomic::AtomicUsize,
}

impl tessera::BufferType for CappedHost {
    fn name(&self) -> &str {
        self.name
    }
    fn alignment(&self) -> usize {
        self.alignment
    }
    fn max_size(&self) -> usize {
        self.max.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn is_host(&self) -> bool {
        true
    }
    fn alloc_buffer(&'static self, size: usize) -> Result<std::sync::Arc<dyn tessera::Buffer>> {
        Ok(std::sync::Arc::new(tessera::host_buffer::HostBuffer::alloc(self, size)?))
    }
}

/// The bytes of `id`'s data.
pub fn bytes_of(g: &Graph, id: TensorId) -> Result<Vec<u8>> {
    let mut out = vec![0u8; g.tensor(id)?.nbytes()];
    g.get_bytes(id, 0, &mut out)?;
    Ok(out)
}

/// Fills every leaf of `leafs` that has memory in `g` with values determined by its id.
pub fn fill_leafs(g: &Graph, leafs: &[TensorId]) -> Result<()> {
    for &id in leafs {
        if g.data(id).is_some() {
            let n = g.tensor(id)?.nelements();
            g.set_f32(id, &values(n, id.index()))?;
        }
    }
    Ok(())
}

/// The output of `b` computed on the CPU alone, each tensor in its own memory.
pub fn cpu_reference(b: &Built) -> Result<Vec<u8>> {
    use tessera::Backend;
    let mut g = b.graph.clone();
    tessera::allocator::alloc_graph_tensors(&mut g, &tessera::host_buffer::HOST_BUFFER_TYPE)?;
    fill_leafs(&g, &b.leafs)?;
    tessera::cpu::CpuBackend::reference().compute_graph(&g)?;
    bytes_of(&g, b.output)
}
