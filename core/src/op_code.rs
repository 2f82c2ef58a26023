//! Ops and types as numbers: an op is an id and eight parameter words, a type ggml's type id.
//! The plugin ABI sends graphs this way, and the scheduler hashes ops this way to tell
//! whether a plan changed.

use alloc::format;
use alloc::string::String;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::op::{BinaryOp, Im2ColParams, Op, Pool2dParams, PoolKind, Precision, RopeMode, RopeParams, UnaryOp};
use crate::tensor::MAX_DIMS;

fn invalid(message: String) -> Error {
    Error::InvalidParam { op: "PLUGIN_GRAPH", message }
}

/// ggml's id of a type (the ids GGUF files use).
pub const fn dtype_id(dtype: DType) -> u32 {
    crate::gguf::ggml_type_id(dtype)
}

/// The type with ggml's id `id`.
pub fn dtype_from_id(id: u32) -> Result<DType> {
    DType::ALL.into_iter().find(|d| dtype_id(*d) == id).ok_or_else(|| {
        invalid(format!(
            "unknown type id {id} (known: 0 f32, 1 f16, 2 q4_0, 3 q4_1, 6 q5_0, 7 q5_1, 8 q8_0, 10 q2_K, 11 q3_K, 12 q4_K, 13 q5_K, 14 q6_K, 26 i32, 30 bf16)"
        ))
    })
}

const OP_NONE: u32 = 0;
const OP_BINARY: u32 = 1;
const OP_SCALE: u32 = 2;
const OP_UNARY: u32 = 3;
const OP_SUM_ROWS: u32 = 4;
const OP_MEAN: u32 = 5;
const OP_ARGMAX: u32 = 6;
const OP_SOFT_MAX: u32 = 7;
const OP_NORM: u32 = 8;
const OP_RMS_NORM: u32 = 9;
const OP_MUL_MAT: u32 = 10;
const OP_GET_ROWS: u32 = 11;
const OP_CPY: u32 = 12;
const OP_CONT: u32 = 13;
const OP_CONCAT: u32 = 14;
const OP_ROPE: u32 = 15;
const OP_DIAG_MASK_INF: u32 = 16;
const OP_IM2COL: u32 = 17;
const OP_POOL_2D: u32 = 18;
const OP_VIEW: u32 = 19;
const OP_RESHAPE: u32 = 20;
const OP_PERMUTE: u32 = 21;
const OP_TRANSPOSE: u32 = 22;
const OP_SET_ROWS: u32 = 23;
const OP_FLASH_ATTN: u32 = 24;
const OP_LAST: u32 = OP_FLASH_ATTN;

const BINARY_OPS: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];

fn f32_param(x: f32) -> u64 {
    u64::from(x.to_bits())
}

/// An op as its id and parameters.
pub fn encode_op(op: Op) -> (u32, [u64; 8]) {
    let mut p = [0u64; 8];
    let id = match op {
        Op::None => OP_NONE,
        Op::Binary(b) => {
            p[0] = BINARY_OPS.iter().position(|x| *x == b).unwrap_or(0) as u64;
            OP_BINARY
        }
        Op::Scale(s) => {
            p[0] = f32_param(s);
            OP_SCALE
        }
        Op::Unary(u) => {
            p[0] = UnaryOp::ALL.iter().position(|x| *x == u).unwrap_or(0) as u64;
            OP_UNARY
        }
        Op::SumRows => OP_SUM_ROWS,
        Op::Mean => OP_MEAN,
        Op::Argmax => OP_ARGMAX,
        Op::SoftMax { scale } => {
            p[0] = f32_param(scale);
            OP_SOFT_MAX
        }
        Op::Norm { eps } => {
            p[0] = f32_param(eps);
            OP_NORM
        }
        Op::RmsNorm { eps } => {
            p[0] = f32_param(eps);
            OP_RMS_NORM
        }
        Op::MulMat => OP_MUL_MAT,
        Op::GetRows => OP_GET_ROWS,
        Op::Cpy => OP_CPY,
        Op::SetRows => OP_SET_ROWS,
        Op::FlashAttn { scale, precision } => {
            p[0] = f32_param(scale);
            p[1] = u64::from(precision == Precision::Reduced);
            OP_FLASH_ATTN
        }
        Op::Cont => OP_CONT,
        Op::Concat { dim } => {
            p[0] = dim as u64;
            OP_CONCAT
        }
        Op::Rope(r) => {
            p[0] = match r.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => 2,
            };
            p[1] = r.n_dims as u64;
            p[2] = f32_param(r.freq_base);
            p[3] = f32_param(r.freq_scale);
            OP_ROPE
        }
        Op::DiagMaskInf { n_past } => {
            p[0] = n_past as u64;
            OP_DIAG_MASK_INF
        }
        Op::Im2Col(c) => {
            p[..7].copy_from_slice(&[c.s0, c.s1, c.p0, c.p1, c.d0, c.d1, usize::from(c.is_2d)].map(|v| v as u64));
            OP_IM2COL
        }
        Op::Pool2d(q) => {
            p[0] = match q.kind {
                PoolKind::Max => 0,
                PoolKind::Avg => 1,
            };
            p[1..7].copy_from_slice(&[q.k0, q.k1, q.s0, q.s1, q.p0, q.p1].map(|v| v as u64));
            OP_POOL_2D
        }
        Op::View => OP_VIEW,
        Op::Reshape => OP_RESHAPE,
        Op::Permute(axes) => {
            for (dst, a) in p.iter_mut().zip(axes) {
                *dst = u64::from(a);
            }
            OP_PERMUTE
        }
        Op::Transpose => OP_TRANSPOSE,
    };
    (id, p)
}

/// The op with id `id` and parameters `p`; every parameter is range-checked.
pub fn decode_op(id: u32, p: &[u64; 8]) -> Result<Op> {
    let size = |i: usize| usize::try_from(p[i]).map_err(|_| invalid(format!("op {id}: parameter {i} is too large")));
    let float = |i: usize| {
        u32::try_from(p[i]).map(f32::from_bits).map_err(|_| invalid(format!("op {id}: parameter {i} is not f32 bits")))
    };
    let pick = |i: usize, n: usize| -> Result<usize> {
        match usize::try_from(p[i]) {
            Ok(k) if k < n => Ok(k),
            _ => Err(invalid(format!("op {id}: parameter {i} = {} is not below {n}", p[i]))),
        }
    };
    Ok(match id {
        OP_NONE => Op::None,
        OP_BINARY => Op::Binary(BINARY_OPS[pick(0, BINARY_OPS.len())?]),
        OP_SCALE => Op::Scale(float(0)?),
        OP_UNARY => Op::Unary(UnaryOp::ALL[pick(0, UnaryOp::ALL.len())?]),
        OP_SUM_ROWS => Op::SumRows,
        OP_MEAN => Op::Mean,
        OP_ARGMAX => Op::Argmax,
        OP_SOFT_MAX => Op::SoftMax { scale: float(0)? },
        OP_NORM => Op::Norm { eps: float(0)? },
        OP_RMS_NORM => Op::RmsNorm { eps: float(0)? },
        OP_MUL_MAT => Op::MulMat,
        OP_GET_ROWS => Op::GetRows,
        OP_CPY => Op::Cpy,
        OP_SET_ROWS => Op::SetRows,
        OP_FLASH_ATTN => Op::FlashAttn {
            scale: float(0)?,
            precision: match p[1] {
                0 => Precision::Full,
                1 => Precision::Reduced,
                x => return Err(invalid(format!("FLASH_ATTN: unknown precision {x} (0 full, 1 reduced)"))),
            },
        },
        OP_CONT => Op::Cont,
        OP_CONCAT => Op::Concat { dim: pick(0, MAX_DIMS)? },
        OP_ROPE => Op::Rope(RopeParams {
            mode: match p[0] {
                0 => RopeMode::Normal,
                2 => RopeMode::Neox,
                m => return Err(invalid(format!("ROPE: unknown mode {m} (0 normal, 2 neox)"))),
            },
            n_dims: size(1)?,
            freq_base: float(2)?,
            freq_scale: float(3)?,
        }),
        OP_DIAG_MASK_INF => Op::DiagMaskInf { n_past: size(0)? },
        OP_IM2COL => Op::Im2Col(Im2ColParams {
            s0: size(0)?,
            s1: size(1)?,
            p0: size(2)?,
            p1: size(3)?,
            d0: size(4)?,
            d1: size(5)?,
            is_2d: pick(6, 2)? == 1,
        }),
        OP_POOL_2D => Op::Pool2d(Pool2dParams {
            kind: if pick(0, 2)? == 0 { PoolKind::Max } else { PoolKind::Avg },
            k0: size(1)?,
            k1: size(2)?,
            s0: size(3)?,
            s1: size(4)?,
            p0: size(5)?,
            p1: size(6)?,
        }),
        OP_VIEW => Op::View,
        OP_RESHAPE => Op::Reshape,
        OP_PERMUTE => Op::Permute([pick(0, 4)?, pick(1, 4)?, pick(2, 4)?, pick(3, 4)?].map(|a| a as u8)),
        OP_TRANSPOSE => Op::Transpose,
        _ => return Err(invalid(format!("unknown op id {id} (this build knows 0..={OP_LAST})"))),
    })
}
