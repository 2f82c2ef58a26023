//! FLASH_ATTN: attention of each query row over its head's keys and values without a score
//! matrix (`flash_attn.comp`), one workgroup per query row and head.

use tessera_core::{soft_max_mask_fits, DType, Op};

use super::{args_of, linear_groups, need, no_shader, src, Dispatch, Operand, Why};
use crate::shaders::Shader;

/// Longest value rows the shader sums (4 elements per invocation).
const MAX_DV: u32 = 1024;

pub(super) fn plan(op: Op, dst: Operand, srcs: &[Option<Operand>]) -> Result<Dispatch, Why> {
    let Op::FlashAttn { scale, .. } = op else { return Err(no_shader(op, &[dst.dtype])) };
    let (q, k, v) = (src(srcs, 0)?, src(srcs, 1)?, src(srcs, 2)?);
    let mask = srcs.get(3).copied().flatten();
    let mt = mask.map_or(DType::F32, |m| m.dtype);
    let types = [q.dtype, k.dtype, v.dtype, mt, dst.dtype];
    let float_kv = matches!(k.dtype, DType::F32 | DType::F16 | DType::BF16) && v.dtype == k.dtype;
    need(
        matches!(q.dtype, DType::F32 | DType::F16)
            && float_kv
            && matches!(mt, DType::F32 | DType::F16)
            && dst.dtype == DType::F32,
        || no_shader(op, &types),
    )?;
    let ([d, n, hq, b], [dk, kv, hk, bk], nv) = (q.desc.ne, k.desc.ne, v.desc.ne);
    let fits = dk == d
        && hk > 0
        && bk > 0
        && hq % hk == 0
        && b % bk == 0
        && nv[1..] == k.desc.ne[1..]
        && nv[0] <= MAX_DV
        && dst.desc.ne == [nv[0], hq, n, b];
    need(fits, || {
        format!("queries {:?}, keys {:?} and values {:?} do not fit {:?}", q.desc.ne, k.desc.ne, nv, dst.desc.ne)
    })?;
    if let Some(m) = mask {
        let scores = [kv, n, hq, b].map(|x| x as usize);
        need(soft_max_mask_fits(m.desc.ne.map(|x| x as usize), scores), || {
            format!("mask {:?} does not fit the scores {scores:?}", m.desc.ne)
        })?;
    }
    let mut args = args_of(dst, srcs);
    args.i[0] = i32::from(mask.is_some());
    args.f[0] = scale;
    let rows = u64::from(hq) * u64::from(n) * u64::from(b);
    Ok(Dispatch { shader: Shader::FlashAttn, args, groups: linear_groups(rows, 1)? })
}
