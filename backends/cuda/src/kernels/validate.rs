//! What the kernels run: one check per op over the operands' types, shapes and strides, shared
//! by `supports` (over a graph's tensors) and `launch` (over the caller's operands), so the two
//! never disagree. The checks also cover everything the kernels' memory accesses rely on.

use tessera_core::{soft_max_mask_fits, DType, Op};

use super::arg::TensorArg;
use super::names;
use super::Operand;

/// Why a node cannot run, built only when a check fails.
pub(crate) type Why = String;

/// An op with its destination and sources, as `launch` receives it.
pub(crate) struct Node<'a> {
    pub op: Op,
    pub dst: Operand,
    pub srcs: &'a [Option<Operand>],
}

impl Node<'_> {
    pub(crate) fn src(&self, i: usize) -> Result<Operand, Why> {
        self.srcs.get(i).copied().flatten().ok_or_else(|| format!("source {i} is missing"))
    }
}

fn need(ok: bool, why: impl FnOnce() -> Why) -> Result<(), Why> {
    if ok {
        Ok(())
    } else {
        Err(why())
    }
}

const I32_MAX: i64 = i32::MAX as i64;

fn no_kernel(op: Op, types: &[DType]) -> Why {
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    format!("no CUDA kernel computes {} for types ({})", op.name(), names.join(", "))
}

/// Strides every kernel can address: plain values aligned to their size, quantized rows of
/// packed blocks (whole blocks, 2-byte aligned), sizes that fit the 64-bit index math.
fn addressable(t: &TensorArg, dtype: DType) -> Result<(), Why> {
    need(t.ne.iter().all(|&n| n >= 0) && t.nb.iter().all(|&b| b >= 0), || "negative sizes or strides".into())?;
    let ne_ok = t.ne.iter().try_fold(1i64, |acc, &n| acc.checked_mul(n)).is_some();
    need(ne_ok, || format!("{:?} values overflow 64-bit indices", t.ne))?;
    let align = if dtype.is_quantized() { 2 } else { dtype.block_bytes() as i64 };
    if dtype.is_quantized() {
        need(t.ne[0] % dtype.block_len() as i64 == 0, || {
            format!("rows of {} values are not whole {} blocks", t.ne[0], dtype.name())
        })?;
        need(t.ne[0] == 0 || t.nb[0] == dtype.block_bytes() as i64, || {
            format!("{} rows must be packed blocks (nb[0] = {})", dtype.name(), dtype.block_bytes())
        })?;
    }
    for d in 0..4 {
        let first = d == 0 && dtype.is_quantized();
        need(first || t.ne[d] <= 1 || t.nb[d] % align == 0, || {
            format!("stride nb[{d}] = {} of a {} tensor is not a multiple of {align} bytes", t.nb[d], dtype.name())
        })?;
    }
    Ok(())
}

/// Whether the kernels can compute `node`, and if not, why.
pub(crate) fn validate(node: &Node) -> Result<(), Why> {
    let op = node.op;
    if op == Op::None || op.is_view() {
        return Ok(());
    }
    let (dst, dt) = node.dst;
    addressable(&dst, dt)?;
    for (arg, dtype) in node.srcs.iter().flatten() {
        addressable(arg, *dtype)?;
    }
    match op {
        Op::None | Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose => Ok(()),
        Op::Binary(_) => {
            let ((a, at), (b, bt)) = (node.src(0)?, node.src(1)?);
            need(names::binary(at, bt).is_some() && dt == at, || no_kernel(op, &[at, bt, dt]))?;
            need(dst.ne == a.ne, || format!("destination {:?} is not the shape of {:?}", dst.ne, a.ne))?;
            need((0..4).all(|i| b.ne[i] > 0 && a.ne[i] % b.ne[i] == 0), || {
                format!("{:?} does not repeat to {:?}", b.ne, a.ne)
            })
        }
        Op::Scale(_) | Op::Unary(_) | Op::Norm { .. } | Op::RmsNorm { .. } | Op::DiagMaskInf { .. } => {
            let (a, at) = node.src(0)?;
            let kernel = match op {
                Op::Norm { .. } | Op::RmsNorm { .. } => names::norm(at),
                Op::DiagMaskInf { .. } => names::diag_mask_inf(at),
                _ => names::unary(at),
            };
            need(kernel.is_some() && dt == at, || no_kernel(op, &[at, dt]))?;
            need(dst.ne == a.ne, || format!("destination {:?} is not the shape of {:?}", dst.ne, a.ne))
        }
        Op::SumRows | Op::Mean => {
            let (a, at) = node.src(0)?;
            let want = if op == Op::Mean { DType::F32 } else { at };
            need(names::sum_rows(at, dt).is_some() && dt == want, || no_kernel(op, &[at, dt]))?;
            need(dst.ne == [1, a.ne[1], a.ne[2], a.ne[3]], || {
                format!("destination {:?} is not [1, {}, {}, {}]", dst.ne, a.ne[1], a.ne[2], a.ne[3])
            })
        }
        Op::Argmax => {
            let (a, at) = node.src(0)?;
            need(names::argmax(at).is_some() && dt == DType::I32, || no_kernel(op, &[at, dt]))?;
            need(a.ne[2] == 1 && a.ne[3] == 1 && a.ne[0] <= I32_MAX, || format!("{:?} is not a matrix", a.ne))?;
            need(dst.ne == [a.ne[1], 1, 1, 1], || format!("destination {:?} is not [{}, 1, 1, 1]", dst.ne, a.ne[1]))
        }
        Op::SoftMax { .. } => {
            let (a, at) = node.src(0)?;
            let mask = node.srcs.get(1).copied().flatten();
            let mt = mask.map_or(DType::F32, |(_, t)| t);
            need(names::soft_max(at, mt).is_some() && dt == at, || no_kernel(op, &[at, mt, dt]))?;
            need(dst.ne == a.ne, || format!("destination {:?} is not the shape of {:?}", dst.ne, a.ne))?;
            if let Some((m, _)) = mask {
                let dims = |ne: [i64; 4]| ne.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
                let ok = soft_max_mask_fits(dims(m.ne), dims(a.ne));
                need(ok, || format!("mask {:?} does not fit rows of {:?}", m.ne, a.ne))?;
            }
            Ok(())
        }
        Op::Rope(p) => {
            let ((a, at), (pos, pt)) = (node.src(0)?, node.src(1)?);
            need(names::rope(at).is_some() && dt == at && pt == DType::I32, || no_kernel(op, &[at, pt, dt]))?;
            need(dst.ne == a.ne, || format!("destination {:?} is not the shape of {:?}", dst.ne, a.ne))?;
            need(pos.ne == [a.ne[2], 1, 1, 1], || format!("positions {:?} are not [{}, 1, 1, 1]", pos.ne, a.ne[2]))?;
            let n_dims = i64::try_from(p.n_dims).unwrap_or(i64::MAX);
            need(n_dims > 0 && n_dims % 2 == 0 && n_dims <= a.ne[0], || {
                format!("n_dims {} must be even, positive and at most {}", p.n_dims, a.ne[0])
            })
        }
        Op::MulMat => validate_mul_mat(node),
        Op::GetRows => {
            let ((a, at), (b, bt)) = (node.src(0)?, node.src(1)?);
            let want = if at == DType::I32 { DType::I32 } else { DType::F32 };
            need(names::get_rows(at).is_some() && bt == DType::I32 && dt == want, || no_kernel(op, &[at, bt, dt]))?;
            need(b.ne[1] == a.ne[2] && b.ne[2] == a.ne[3] && b.ne[3] == 1, || {
                format!("indices {:?} do not fit rows of {:?}", b.ne, a.ne)
            })?;
            need(dst.ne == [a.ne[0], b.ne[0], a.ne[2], a.ne[3]], || {
                format!("destination {:?} is not [{}, {}, {}, {}]", dst.ne, a.ne[0], b.ne[0], a.ne[2], a.ne[3])
            })
        }
        Op::SetRows => {
            let ((b, bt), (idx, it)) = (node.src(0)?, node.src(1)?);
            need(names::set_rows(dt).is_some() && bt == DType::F32 && it == DType::I32, || {
                no_kernel(op, &[bt, it, dt])
            })?;
            need(idx.ne == [b.ne[1], b.ne[2], b.ne[3], 1], || {
                format!("indices {:?} do not fit rows of {:?}", idx.ne, b.ne)
            })?;
            need(dst.ne[0] == b.ne[0] && dst.ne[2] == b.ne[2] && dst.ne[3] == b.ne[3], || {
                format!("destination {:?} does not take rows of {:?}", dst.ne, b.ne)
            })
        }
        Op::FlashAttn { .. } => {
            let ((q, qt), (k, kt), (v, vt)) = (node.src(0)?, node.src(1)?, node.src(2)?);
            let mask = node.srcs.get(3).copied().flatten();
            let mt = mask.map_or(DType::F32, |(_, t)| t);
            let head = q.ne[0].max(v.ne[0]);
            let kernel = names::flash_attn(kt, head, q.ne[1]);
            need(kernel.is_some() && vt == kt && matches!(qt, DType::F32 | DType::F16) && dt == DType::F32, || {
                no_kernel(op, &[qt, kt, vt, mt, dt])
            })?;
            need(matches!(mt, DType::F32 | DType::F16), || no_kernel(op, &[qt, kt, vt, mt, dt]))?;
            let es = |t: DType| t.block_bytes() as i64;
            need(q.nb[0] == es(qt) && k.nb[0] == es(kt) && v.nb[0] == es(vt) && dst.nb[0] == 4, || {
                "rows must be packed".into()
            })?;
            let fits = k.ne[0] == q.ne[0]
                && k.ne[2] > 0
                && k.ne[3] > 0
                && q.ne[2] % k.ne[2] == 0
                && q.ne[3] % k.ne[3] == 0
                && v.ne[1..] == k.ne[1..]
                && dst.ne == [v.ne[0], q.ne[2], q.ne[1], q.ne[3]]
                && q.ne[1] <= I32_MAX
                && k.ne[1] <= I32_MAX
                && q.ne[2] <= 65535
                && q.ne[3] <= 65535;
            need(fits, || {
                format!("queries {:?}, keys {:?} and values {:?} do not fit {:?}", q.ne, k.ne, v.ne, dst.ne)
            })?;
            if let Some((m, _)) = mask {
                let dims = |ne: [i64; 4]| ne.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
                let ok = soft_max_mask_fits(dims(m.ne), dims([k.ne[1], q.ne[1], q.ne[2], q.ne[3]]));
                need(ok, || format!("mask {:?} does not fit the scores of {:?} over {:?}", m.ne, q.ne, k.ne))?;
            }
            Ok(())
        }
        Op::Cpy | Op::Cont => {
            let (a, at) = node.src(0)?;
            need(names::cpy(at, dt).is_some(), || no_kernel(op, &[at, dt]))?;
            need(a.nelements() == dst.nelements(), || {
                format!("source {:?} and destination {:?} hold different numbers of values", a.ne, dst.ne)
            })
        }
        Op::Concat { dim } => {
            let ((a, at), (b, bt)) = (node.src(0)?, node.src(1)?);
            need(names::concat(at).is_some() && bt == at && dt == at, || no_kernel(op, &[at, bt, dt]))?;
            let fits = dim < 4
                && (0..4).all(|d| {
                    if d == dim {
                        a.ne[d].checked_add(b.ne[d]) == Some(dst.ne[d])
                    } else {
                        a.ne[d] == dst.ne[d] && b.ne[d] == dst.ne[d]
                    }
                });
            need(fits, || format!("{:?} and {:?} do not join along {dim} into {:?}", a.ne, b.ne, dst.ne))
        }
        Op::Im2Col(p) => {
            let ((k, _), (input, it)) = (node.src(0)?, node.src(1)?);
            need(names::im2col(it, dt).is_some(), || no_kernel(op, &[it, dt]))?;
            let params = [p.s0, p.s1, p.p0, p.p1, p.d0, p.d1];
            need(params.iter().all(|&v| i64::try_from(v).is_ok_and(|v| v < I32_MAX)), || {
                "parameters too large".into()
            })?;
            let expected = if p.is_2d {
                [input.ne[2] * k.ne[1] * k.ne[0], dst.ne[1], dst.ne[2], input.ne[3]]
            } else {
                [input.ne[1] * k.ne[0], dst.ne[1], input.ne[2], 1]
            };
            need(dst.ne == expected, || format!("destination {:?} is not {expected:?}", dst.ne))
        }
        Op::Pool2d(p) => {
            let (a, at) = node.src(0)?;
            need(names::pool_2d(at).is_some() && dt == DType::F32, || no_kernel(op, &[at, dt]))?;
            let params = [p.k0, p.k1, p.s0, p.s1, p.p0, p.p1];
            need(params.iter().all(|&v| i64::try_from(v).is_ok_and(|v| v < I32_MAX)), || {
                "parameters too large".into()
            })?;
            need(dst.ne[2] == a.ne[2] && dst.ne[3] == a.ne[3], || {
                format!("destination {:?} does not fit input {:?}", dst.ne, a.ne)
            })
        }
    }
}

/// MUL_MAT: `a: [K, M, a2, a3]` of a float or quantized type with packed rows, `b: [K, N, b2,
/// b3]` F32 with any strides, `dst: [M, N, b2, b3]` F32 with packed columns (cuBLAS writes it),
/// sizes within cuBLAS's 32-bit arguments.
fn validate_mul_mat(node: &Node) -> Result<(), Why> {
    let op = Op::MulMat;
    let ((a, at), (b, bt)) = (node.src(0)?, node.src(1)?);
    let (dst, dt) = node.dst;
    // Every float and quantized type: a matrix-vector kernel for up to 8 columns, a GEMM after
    // conversion for more.
    let weight_ok = names::mul_mat_vec(at, 1).is_some();
    // An f16 result is a product with a CPY to f16 fused in (MUL_MAT nodes write f32).
    need(weight_ok && bt == DType::F32 && matches!(dt, DType::F32 | DType::F16), || no_kernel(op, &[at, bt, dt]))?;
    let ds = dt.block_bytes() as i64;
    need(a.ne[0] <= 1 || a.nb[0] == at.block_bytes() as i64, || "the rows of a must be packed".into())?;
    let [k, m, a2, a3] = a.ne;
    let [_, n, b2, b3] = b.ne;
    let shapes = b.ne[0] == k && a2 > 0 && a3 > 0 && b2 % a2 == 0 && b3 % a3 == 0 && dst.ne == [m, n, b2, b3];
    need(shapes, || {
        format!("{:?} x {:?} -> {:?} is not [K, M, a2, a3] x [K, N, b2, b3] -> [M, N, b2, b3]", a.ne, b.ne, dst.ne)
    })?;
    need(dst.nb[0] == ds && (n <= 1 || dst.nb[1] / ds >= m), || {
        format!("the destination's columns {:?} overlap", dst.nb)
    })?;
    let limits = [k, m, n, n.saturating_mul(b2).saturating_mul(b3), b2.saturating_mul(b3), dst.nb[1] / ds];
    need(limits.iter().all(|&v| v <= I32_MAX), || format!("{:?} x {:?} exceeds cuBLAS's 32-bit sizes", a.ne, b.ne))
}

#[cfg(test)]
mod tests {
    use tessera_core::{BinaryOp, Pool2dParams, PoolKind};

    use super::*;

    fn arg(dtype: DType, ne: [i64; 4]) -> Operand {
        (TensorArg::contiguous(0, dtype, ne).unwrap(), dtype)
    }

    fn check(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<(), Why> {
        validate(&Node { op, dst, srcs })
    }

    #[test]
    fn copies_between_float_and_quantized_types_and_i32_to_i32() {
        let floats = [DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0];
        let plain = [DType::F32, DType::F16, DType::BF16];
        let legacy = [DType::Q4_1, DType::Q5_0, DType::Q5_1];
        let k_quants = [DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];
        for s in DType::ALL {
            for d in DType::ALL {
                // 256 values per row: whole blocks of every type.
                let ok = check(Op::Cpy, arg(d, [256, 3, 1, 1]), &[Some(arg(s, [256, 3, 1, 1]))]).is_ok();
                // Q4_1, Q5_0 and Q5_1 to and from the float types; the K-quants into them only:
                // quantizing into them is left to the CPU.
                let expected = (s == DType::I32 && d == DType::I32)
                    || (floats.contains(&s) && floats.contains(&d))
                    || (legacy.contains(&s) && plain.contains(&d))
                    || (plain.contains(&s) && legacy.contains(&d))
                    || (k_quants.contains(&s) && plain.contains(&d));
                assert_eq!(ok, expected, "{s} -> {d}");
            }
        }
        // Values in row-major order into another shape.
        assert!(check(Op::Cpy, arg(DType::Q8_0, [64, 6, 1, 1]), &[Some(arg(DType::F16, [32, 4, 3, 1]))]).is_ok());
        assert!(check(Op::Cpy, arg(DType::F32, [64, 6, 1, 1]), &[Some(arg(DType::F16, [32, 4, 2, 1]))]).is_err());
    }

    #[test]
    fn binary_ops_need_the_destination_in_the_first_operands_type() {
        let op = Op::Binary(BinaryOp::Add);
        let a = arg(DType::F16, [10, 5, 4, 3]);
        assert!(check(op, a, &[Some(a), Some(arg(DType::F32, [1, 5, 1, 1]))]).is_ok());
        assert!(check(op, arg(DType::F32, [10, 5, 4, 3]), &[Some(a), Some(a)]).is_err());
        assert!(check(op, a, &[Some(a), Some(arg(DType::F32, [3, 5, 1, 1]))]).is_err());
        assert!(check(op, a, &[Some(a), Some(arg(DType::I32, [1, 1, 1, 1]))]).is_err());
    }

    #[test]
    fn mul_mat_weights_of_every_float_and_quantized_type() {
        for at in DType::ALL {
            let a = arg(at, [256, 7, 2, 1]);
            let b = arg(DType::F32, [256, 9, 4, 3]);
            let ok = check(Op::MulMat, arg(DType::F32, [7, 9, 4, 3]), &[Some(a), Some(b)]).is_ok();
            assert_eq!(ok, at != DType::I32, "{at}");
        }
        // A transposed destination cannot be written by cuBLAS.
        let mut dst = arg(DType::F32, [7, 9, 1, 1]);
        dst.0.nb = [36, 4, 252, 252];
        let (a, b) = (arg(DType::F32, [64, 7, 1, 1]), arg(DType::F32, [64, 9, 1, 1]));
        assert!(check(Op::MulMat, dst, &[Some(a), Some(b)]).is_err());
    }

    #[test]
    fn misaligned_strides_are_refused() {
        let mut a = arg(DType::F32, [10, 5, 1, 1]);
        a.0.nb[1] = 42;
        assert!(check(Op::Unary(tessera_core::UnaryOp::Relu), arg(DType::F32, [10, 5, 1, 1]), &[Some(a)]).is_err());
    }

    #[test]
    fn pool_and_views() {
        let p = Pool2dParams { kind: PoolKind::Avg, k0: 2, k1: 2, s0: 2, s1: 2, p0: 0, p1: 0 };
        assert!(check(Op::Pool2d(p), arg(DType::F32, [5, 4, 3, 2]), &[Some(arg(DType::BF16, [10, 9, 3, 2]))]).is_ok());
        assert!(check(Op::Pool2d(p), arg(DType::F16, [5, 4, 3, 2]), &[Some(arg(DType::F16, [10, 9, 3, 2]))]).is_err());
        assert!(check(Op::Transpose, arg(DType::Q4_0, [32, 1, 1, 1]), &[]).is_ok());
    }
}
