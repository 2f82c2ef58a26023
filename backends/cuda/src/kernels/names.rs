//! Which kernel computes an op for given operand types: `None` where no kernel exists.
//!
//! `validate` accepts a node only when these give a kernel, so `supports` and `launch` agree
//! by construction; the tests check every name given here is in the module table.

use tessera_core::DType::{self, BF16, F16, F32, I32, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0};

/// CPY and CONT from `src` to `dst`.
pub(crate) fn cpy(src: DType, dst: DType) -> Option<&'static str> {
    Some(match (src, dst) {
        (F32, F32) | (I32, I32) => "cpy_b32",
        (F16, F16) | (BF16, BF16) => "cpy_b16",
        (F32, F16) => "cpy_f32_f16",
        (F32, BF16) => "cpy_f32_bf16",
        (F16, F32) => "cpy_f16_f32",
        (F16, BF16) => "cpy_f16_bf16",
        (BF16, F32) => "cpy_bf16_f32",
        (BF16, F16) => "cpy_bf16_f16",
        (Q8_0, F32) => "cpy_q8_0_f32",
        (Q8_0, F16) => "cpy_q8_0_f16",
        (Q8_0, BF16) => "cpy_q8_0_bf16",
        (Q4_0, F32) => "cpy_q4_0_f32",
        (Q4_0, F16) => "cpy_q4_0_f16",
        (Q4_0, BF16) => "cpy_q4_0_bf16",
        (F32, Q8_0) => "cpy_f32_q8_0",
        (F16, Q8_0) => "cpy_f16_q8_0",
        (BF16, Q8_0) => "cpy_bf16_q8_0",
        (Q8_0, Q8_0) => "cpy_q8_0_q8_0",
        (Q4_0, Q8_0) => "cpy_q4_0_q8_0",
        (F32, Q4_0) => "cpy_f32_q4_0",
        (F16, Q4_0) => "cpy_f16_q4_0",
        (BF16, Q4_0) => "cpy_bf16_q4_0",
        (Q8_0, Q4_0) => "cpy_q8_0_q4_0",
        (Q4_0, Q4_0) => "cpy_q4_0_q4_0",
        // Q4_1, Q5_0 and Q5_1 to and from the float types; the K-quants into them only (see
        // copy.cu).
        (Q4_1, F32) => "cpy_q4_1_f32",
        (Q4_1, F16) => "cpy_q4_1_f16",
        (Q4_1, BF16) => "cpy_q4_1_bf16",
        (Q5_0, F32) => "cpy_q5_0_f32",
        (Q5_0, F16) => "cpy_q5_0_f16",
        (Q5_0, BF16) => "cpy_q5_0_bf16",
        (Q5_1, F32) => "cpy_q5_1_f32",
        (Q5_1, F16) => "cpy_q5_1_f16",
        (Q5_1, BF16) => "cpy_q5_1_bf16",
        (Q2_K, F32) => "cpy_q2_K_f32",
        (Q2_K, F16) => "cpy_q2_K_f16",
        (Q2_K, BF16) => "cpy_q2_K_bf16",
        (Q3_K, F32) => "cpy_q3_K_f32",
        (Q3_K, F16) => "cpy_q3_K_f16",
        (Q3_K, BF16) => "cpy_q3_K_bf16",
        (F32, Q4_1) => "cpy_f32_q4_1",
        (F16, Q4_1) => "cpy_f16_q4_1",
        (BF16, Q4_1) => "cpy_bf16_q4_1",
        (F32, Q5_0) => "cpy_f32_q5_0",
        (F16, Q5_0) => "cpy_f16_q5_0",
        (BF16, Q5_0) => "cpy_bf16_q5_0",
        (F32, Q5_1) => "cpy_f32_q5_1",
        (F16, Q5_1) => "cpy_f16_q5_1",
        (BF16, Q5_1) => "cpy_bf16_q5_1",
        (Q4_K, F32) => "cpy_q4_K_f32",
        (Q4_K, F16) => "cpy_q4_K_f16",
        (Q4_K, BF16) => "cpy_q4_K_bf16",
        (Q5_K, F32) => "cpy_q5_K_f32",
        (Q5_K, F16) => "cpy_q5_K_f16",
        (Q5_K, BF16) => "cpy_q5_K_bf16",
        (Q6_K, F32) => "cpy_q6_K_f32",
        (Q6_K, F16) => "cpy_q6_K_f16",
        (Q6_K, BF16) => "cpy_q6_K_bf16",
        _ => return None,
    })
}

/// ADD, SUB, MUL, DIV of `a` (also the destination's type) and `b`.
pub(crate) fn binary(a: DType, b: DType) -> Option<&'static str> {
    Some(match (a, b) {
        (F32, F32) => "binary_f32_f32",
        (F32, F16) => "binary_f32_f16",
        (F32, BF16) => "binary_f32_bf16",
        (F16, F32) => "binary_f16_f32",
        (F16, F16) => "binary_f16_f16",
        (F16, BF16) => "binary_f16_bf16",
        (BF16, F32) => "binary_bf16_f32",
        (BF16, F16) => "binary_bf16_f16",
        (BF16, BF16) => "binary_bf16_bf16",
        _ => return None,
    })
}

/// The kernel of float type `t` among `[f32, f16, bf16]` variants.
fn by_float(t: DType, names: [&'static str; 3]) -> Option<&'static str> {
    match t {
        F32 => Some(names[0]),
        F16 => Some(names[1]),
        BF16 => Some(names[2]),
        _ => None,
    }
}

/// The unary functions and SCALE (source and destination of type `t`).
pub(crate) fn unary(t: DType) -> Option<&'static str> {
    by_float(t, ["unary_f32", "unary_f16", "unary_bf16"])
}

/// SUM_ROWS (`dst` = `src`'s type) and MEAN (`dst` F32).
pub(crate) fn sum_rows(src: DType, dst: DType) -> Option<&'static str> {
    Some(match (src, dst) {
        (F32, F32) => "sum_rows_f32_f32",
        (F16, F16) => "sum_rows_f16_f16",
        (BF16, BF16) => "sum_rows_bf16_bf16",
        (F16, F32) => "sum_rows_f16_f32",
        (BF16, F32) => "sum_rows_bf16_f32",
        _ => return None,
    })
}

pub(crate) fn argmax(src: DType) -> Option<&'static str> {
    by_float(src, ["argmax_f32", "argmax_f16", "argmax_bf16"])
}

/// SOFT_MAX of type `t` with a mask of type `mask` (F32 when there is none).
pub(crate) fn soft_max(t: DType, mask: DType) -> Option<&'static str> {
    Some(match (t, mask) {
        (F32, F32) => "soft_max_f32_f32",
        (F32, F16) => "soft_max_f32_f16",
        (F16, F32) => "soft_max_f16_f32",
        (F16, F16) => "soft_max_f16_f16",
        (BF16, F32) => "soft_max_bf16_f32",
        (BF16, F16) => "soft_max_bf16_f16",
        _ => return None,
    })
}

/// NORM and RMS_NORM.
pub(crate) fn norm(t: DType) -> Option<&'static str> {
    by_float(t, ["norm_f32", "norm_f16", "norm_bf16"])
}

/// The index of a packed-row kernel (rows_packed.cu) among its variants for rows of up to
/// 128, 256, ..., 8192 values.
fn packed_row_variant(max_ne0: i64) -> Option<usize> {
    [128, 256, 512, 1024, 2048, 4096, 8192].iter().position(|&n| n == max_ne0)
}

/// SOFT_MAX of packed f32 rows of up to `max_ne0` values (a power of two from 128 to 8192)
/// with a mask of type `mask` (F32 when there is none).
pub(crate) fn soft_max_packed(mask: DType, max_ne0: i64) -> Option<&'static str> {
    let names = match mask {
        F32 => [
            "soft_max_f32_f32_row128",
            "soft_max_f32_f32_row256",
            "soft_max_f32_f32_row512",
            "soft_max_f32_f32_row1024",
            "soft_max_f32_f32_row2048",
            "soft_max_f32_f32_row4096",
            "soft_max_f32_f32_row8192",
        ],
        F16 => [
            "soft_max_f32_f16_row128",
            "soft_max_f32_f16_row256",
            "soft_max_f32_f16_row512",
            "soft_max_f32_f16_row1024",
            "soft_max_f32_f16_row2048",
            "soft_max_f32_f16_row4096",
            "soft_max_f32_f16_row8192",
        ],
        _ => return None,
    };
    Some(names[packed_row_variant(max_ne0)?])
}

/// NORM and RMS_NORM of packed f32 rows of up to `max_ne0` values (a power of two from 128 to
/// 8192).
pub(crate) fn norm_packed(max_ne0: i64) -> Option<&'static str> {
    let names = [
        "norm_f32_row128",
        "norm_f32_row256",
        "norm_f32_row512",
        "norm_f32_row1024",
        "norm_f32_row2048",
        "norm_f32_row4096",
        "norm_f32_row8192",
    ];
    Some(names[packed_row_variant(max_ne0)?])
}

/// [`norm_packed`] for rows of `ne0` values, at most `max_ne0`: rows of 257 to 384 values take
/// a kernel of their own.
pub(crate) fn norm_packed_for(ne0: i64, max_ne0: i64) -> Option<&'static str> {
    if max_ne0 == 512 && ne0 <= 384 {
        return Some("norm_f32_row384");
    }
    norm_packed(max_ne0)
}

/// `norm_packed_f16` (rows_packed.cu, f16 rows into f16 rows a warp a row) for rows of `ne0`
/// values, at most `max_ne0` (128 to 1024).
pub(crate) fn norm_packed_f16(ne0: i64, max_ne0: i64) -> Option<&'static str> {
    match max_ne0 {
        128 => Some("norm_f16_row128"),
        256 => Some("norm_f16_row256"),
        512 if ne0 <= 384 => Some("norm_f16_row384"),
        512 => Some("norm_f16_row512"),
        1024 => Some("norm_f16_row1024"),
        _ => None,
    }
}

/// The embeddings norm (`norm_gathered` in rows_packed.cu) for rows of `ne0` values, at most
/// 512.
pub(crate) fn norm_gathered(ne0: i64) -> Option<&'static str> {
    let names = [
        (128, "norm_gathered_f32_row128"),
        (256, "norm_gathered_f32_row256"),
        (384, "norm_gathered_f32_row384"),
        (512, "norm_gathered_f32_row512"),
    ];
    names.iter().find(|&&(most, _)| ne0 <= most).map(|&(_, name)| name)
}

pub(crate) fn diag_mask_inf(t: DType) -> Option<&'static str> {
    by_float(t, ["diag_mask_inf_f32", "diag_mask_inf_f16", "diag_mask_inf_bf16"])
}

pub(crate) fn rope(t: DType) -> Option<&'static str> {
    by_float(t, ["rope_f32", "rope_f16", "rope_bf16"])
}

/// GET_ROWS from rows of type `a` (into F32, or I32 from I32).
pub(crate) fn get_rows(a: DType) -> Option<&'static str> {
    Some(match a {
        F32 => "get_rows_f32",
        F16 => "get_rows_f16",
        BF16 => "get_rows_bf16",
        Q8_0 => "get_rows_q8_0",
        Q4_0 => "get_rows_q4_0",
        Q4_1 => "get_rows_q4_1",
        Q5_0 => "get_rows_q5_0",
        Q5_1 => "get_rows_q5_1",
        Q2_K => "get_rows_q2_K",
        Q3_K => "get_rows_q3_K",
        Q4_K => "get_rows_q4_K",
        Q5_K => "get_rows_q5_K",
        Q6_K => "get_rows_q6_K",
        I32 => "get_rows_i32",
    })
}

/// GET_ROWS of packed float rows, 8 values a thread.
pub(crate) fn get_rows_x8(a: DType) -> Option<&'static str> {
    by_float(a, ["get_rows_x8_f32", "get_rows_x8_f16", "get_rows_x8_bf16"])
}

/// CONT of a transposed view of `t` values, bits as they are.
pub(crate) fn cpy_transposed(t: DType) -> Option<&'static str> {
    match t {
        F32 | I32 => Some("cpy_transposed_b32"),
        F16 | BF16 => Some("cpy_transposed_b16"),
        _ => None,
    }
}

/// SET_ROWS of F32 values into rows of type `dst`.
pub(crate) fn set_rows(dst: DType) -> Option<&'static str> {
    by_float(dst, ["set_rows_f32", "set_rows_f16", "set_rows_bf16"])
}

/// The row width (32, 64 or 128 values) of the FLASH_ATTN kernels for heads of `head` values.
pub(crate) fn flash_attn_width(head: i64) -> Option<i64> {
    match head {
        1..=32 => Some(32),
        33..=64 => Some(64),
        65..=128 => Some(128),
        _ => None,
    }
}

/// The kernel that merges the per-chunk results of a one-row FLASH_ATTN, for heads of `head`
/// values.
pub(crate) fn flash_attn_combine(head: i64) -> Option<&'static str> {
    match flash_attn_width(head)? {
        32 => Some("flash_attn_combine_d32"),
        64 => Some("flash_attn_combine_d64"),
        _ => Some("flash_attn_combine_d128"),
    }
}

/// FLASH_ATTN over keys and values of type `kv` with heads of up to `head` values, for
/// `rows` query rows: a block per 16 rows, or per chunk of keys when there is one row (a
/// decoded token; [`flash_attn_combine`] merges the chunks).
pub(crate) fn flash_attn(kv: DType, head: i64, rows: i64) -> Option<&'static str> {
    let by_head = |names: [[&'static str; 3]; 2]| {
        let r = usize::from(rows > 1);
        match flash_attn_width(head)? {
            32 => Some(names[r][0]),
            64 => Some(names[r][1]),
            _ => Some(names[r][2]),
        }
    };
    match kv {
        F32 => by_head([
            ["flash_attn_f32_r1_d32", "flash_attn_f32_r1_d64", "flash_attn_f32_r1_d128"],
            ["flash_attn_f32_r16_d32", "flash_attn_f32_r16_d64", "flash_attn_f32_r16_d128"],
        ]),
        F16 => by_head([
            ["flash_attn_f16_r1_d32", "flash_attn_f16_r1_d64", "flash_attn_f16_r1_d128"],
            ["flash_attn_f16_r16_d32", "flash_attn_f16_r16_d64", "flash_attn_f16_r16_d128"],
        ]),
        BF16 => by_head([
            ["flash_attn_bf16_r1_d32", "flash_attn_bf16_r1_d64", "flash_attn_bf16_r1_d128"],
            ["flash_attn_bf16_r16_d32", "flash_attn_bf16_r16_d64", "flash_attn_bf16_r16_d128"],
        ]),
        _ => None,
    }
}

/// Query rows from which a FLASH_ATTN takes the tensor-core kernel (flash_attn_mma.cu), where
/// its heads fit: blocks of 64 rows, so fewer rows would leave most of a block idle.
pub(crate) const FLASH_ATTN_MMA_MIN_ROWS: i64 = 16;

/// FLASH_ATTN on tensor cores over keys and values of type `kv` with heads of exactly 32, 64
/// or 128 values (`d` for queries and keys, `dv` for values, equal), for `rows` query rows;
/// with `reduced`, its products in one TF32 pass ([`tessera_core::Precision::Reduced`]).
pub(crate) fn flash_attn_mma(kv: DType, d: i64, dv: i64, rows: i64, reduced: bool) -> Option<&'static str> {
    if d != dv || rows < FLASH_ATTN_MMA_MIN_ROWS {
        return None;
    }
    let names = match (d, reduced) {
        (32, false) => ["flash_attn_mma_f32_d32", "flash_attn_mma_f16_d32", "flash_attn_mma_bf16_d32"],
        (64, false) => ["flash_attn_mma_f32_d64", "flash_attn_mma_f16_d64", "flash_attn_mma_bf16_d64"],
        (128, false) => ["flash_attn_mma_f32_d128", "flash_attn_mma_f16_d128", "flash_attn_mma_bf16_d128"],
        (32, true) => ["flash_attn_mma_tf32_f32_d32", "flash_attn_mma_tf32_f16_d32", "flash_attn_mma_tf32_bf16_d32"],
        (64, true) => ["flash_attn_mma_tf32_f32_d64", "flash_attn_mma_tf32_f16_d64", "flash_attn_mma_tf32_bf16_d64"],
        (128, true) => {
            ["flash_attn_mma_tf32_f32_d128", "flash_attn_mma_tf32_f16_d128", "flash_attn_mma_tf32_bf16_d128"]
        }
        _ => return None,
    };
    by_float(kv, names)
}

/// FLASH_ATTN in reduced precision on f16 tensor cores (flash_attn_half.cu) over f16 keys and
/// values with heads of exactly 32, 64 or 128 values, for `rows` query rows over `keys` key
/// positions (heads of 32 over at most 128 keys take a kernel that holds them all at once, one
/// of its own where more than 64 query rows share one mask row or there is no mask,
/// `one_mask_row`, and blocks of 128 query rows would be many, `many_blocks`: see
/// [`FLASH_ATTN_HALF_WIDE_MIN_ROWS`]), with the query rows a block of it takes.
pub(crate) fn flash_attn_half(
    k: DType,
    v: DType,
    (d, dv): (i64, i64),
    (rows, keys): (i64, i64),
    one_mask_row: bool,
    many_blocks: bool,
) -> Option<(&'static str, i64)> {
    if k != F16 || v != F16 || d != dv || rows < FLASH_ATTN_MMA_MIN_ROWS {
        return None;
    }
    let name = match d {
        32 if keys <= FLASH_ATTN_HALF_SHORT_KEYS
            && one_mask_row
            && many_blocks
            && rows > FLASH_ATTN_HALF_WIDE_MIN_ROWS =>
        {
            return Some(("flash_attn_half_d32_kv128", 128))
        }
        32 if keys <= FLASH_ATTN_HALF_SHORT_KEYS => "flash_attn_half_d32_kv128_rows",
        32 => "flash_attn_half_d32",
        64 => "flash_attn_half_d64",
        128 => "flash_attn_half_d128",
        _ => return None,
    };
    Some((name, 64))
}

/// The most keys `flash_attn_half_d32_kv128[_rows]` take (`KV` of their `FahWhole`).
const FLASH_ATTN_HALF_SHORT_KEYS: i64 = 128;

/// Query rows from which `flash_attn_half_d32_kv128` (warps of 32 rows, 128 a block) takes a
/// one-row mask's attention, where its blocks are also many (at least
/// [`FLASH_ATTN_HALF_WIDE_BLOCKS_PER_SM`] an SM). Its warps share each key and value they load
/// between two tiles of 16 rows, which pays where blocks queue for the SMs; with fewer rows a
/// block would hold at most two busy warps, and with fewer blocks each one's time is the
/// call's, both better spread as `_rows` spreads them (warps of 16 rows, 64 a block). On an
/// H200, MiniLM over one sequence of 16 tokens took 0.186-0.190 ms with the wide warps against
/// 0.177-0.183 with `_rows`; over one of 128 tokens the two differed by less than the noise.
pub(crate) const FLASH_ATTN_HALF_WIDE_MIN_ROWS: i64 = 64;

/// Blocks of 128 query rows an SM from which `flash_attn_half_d32_kv128` takes a one-row mask's
/// attention (four waves at its 4 blocks an SM); MiniLM over 1024 sequences of 128 tokens gives
/// 12288 blocks, 93 an SM of an H200.
pub(crate) const FLASH_ATTN_HALF_WIDE_BLOCKS_PER_SM: i64 = 16;

/// CONCAT of tensors of type `t` (bits copied by size).
pub(crate) fn concat(t: DType) -> Option<&'static str> {
    match t {
        F32 | I32 => Some("concat_b32"),
        F16 | BF16 => Some("concat_b16"),
        _ => None,
    }
}

/// IM2COL of an input of type `input` into `dst`.
pub(crate) fn im2col(input: DType, dst: DType) -> Option<&'static str> {
    Some(match (input, dst) {
        (F32, F32) => "im2col_f32_f32",
        (F32, F16) => "im2col_f32_f16",
        (F16, F32) => "im2col_f16_f32",
        (F16, F16) => "im2col_f16_f16",
        (BF16, F32) => "im2col_bf16_f32",
        (BF16, F16) => "im2col_bf16_f16",
        _ => return None,
    })
}

/// POOL_2D of an input of type `src` (into F32).
pub(crate) fn pool_2d(src: DType) -> Option<&'static str> {
    by_float(src, ["pool_2d_f32", "pool_2d_f16", "pool_2d_bf16"])
}

/// The matrix-vector product of weights of type `a` with `ncols` (1 to 8) columns.
pub(crate) fn mul_mat_vec(a: DType, ncols: usize) -> Option<&'static str> {
    macro_rules! by_cols {
        ($t:literal) => {
            [
                concat!("mul_mat_vec_", $t, "_1"),
                concat!("mul_mat_vec_", $t, "_2"),
                concat!("mul_mat_vec_", $t, "_3"),
                concat!("mul_mat_vec_", $t, "_4"),
                concat!("mul_mat_vec_", $t, "_5"),
                concat!("mul_mat_vec_", $t, "_6"),
                concat!("mul_mat_vec_", $t, "_7"),
                concat!("mul_mat_vec_", $t, "_8"),
            ]
        };
    }
    let names: [&'static str; 8] = match a {
        F32 => by_cols!("f32"),
        F16 => by_cols!("f16"),
        BF16 => by_cols!("bf16"),
        Q8_0 => by_cols!("q8_0"),
        Q4_0 => by_cols!("q4_0"),
        Q4_1 => by_cols!("q4_1"),
        Q5_0 => by_cols!("q5_0"),
        Q5_1 => by_cols!("q5_1"),
        Q2_K => by_cols!("q2_K"),
        Q3_K => by_cols!("q3_K"),
        Q4_K => by_cols!("q4_K"),
        Q5_K => by_cols!("q5_K"),
        Q6_K => by_cols!("q6_K"),
        _ => return None,
    };
    names.get(ncols.checked_sub(1)?).copied()
}

/// The tensor-core matrix-vector kernel of weights `a` (several columns, up to 8).
pub(crate) fn mul_mat_vec_mma(a: DType) -> Option<&'static str> {
    Some(match a {
        Q8_0 => "mul_mat_vec_mma_q8_0",
        Q4_0 => "mul_mat_vec_mma_q4_0",
        F16 => "mul_mat_vec_mma_f16",
        BF16 => "mul_mat_vec_mma_bf16",
        _ => return None,
    })
}

/// The one-column matrix-vector kernel of weights `a` that computes a gate and an up
/// projection of one activation at once and stores silu(gate) * up (SwiGLU).
pub(crate) fn mul_mat_vec_glu(a: DType) -> Option<&'static str> {
    Some(match a {
        F32 => "mul_mat_vec_glu_f32",
        F16 => "mul_mat_vec_glu_f16",
        BF16 => "mul_mat_vec_glu_bf16",
        Q8_0 => "mul_mat_vec_glu_q8_0",
        Q4_0 => "mul_mat_vec_glu_q4_0",
        Q4_1 => "mul_mat_vec_glu_q4_1",
        Q5_0 => "mul_mat_vec_glu_q5_0",
        Q5_1 => "mul_mat_vec_glu_q5_1",
        Q2_K => "mul_mat_vec_glu_q2_K",
        Q3_K => "mul_mat_vec_glu_q3_K",
        Q4_K => "mul_mat_vec_glu_q4_K",
        Q5_K => "mul_mat_vec_glu_q5_K",
        Q6_K => "mul_mat_vec_glu_q6_K",
        _ => return None,
    })
}

/// The one-column matrix-vector kernel of weights `a` that computes up to three products at
/// once, each stored through its own ROPE and SET_ROWS (`launch_projections`).
pub(crate) fn mul_mat_vec_proj(a: DType) -> Option<&'static str> {
    Some(match a {
        F32 => "mul_mat_vec_proj_f32",
        F16 => "mul_mat_vec_proj_f16",
        BF16 => "mul_mat_vec_proj_bf16",
        Q8_0 => "mul_mat_vec_proj_q8_0",
        Q4_0 => "mul_mat_vec_proj_q4_0",
        Q4_1 => "mul_mat_vec_proj_q4_1",
        Q5_0 => "mul_mat_vec_proj_q5_0",
        Q5_1 => "mul_mat_vec_proj_q5_1",
        Q2_K => "mul_mat_vec_proj_q2_K",
        Q3_K => "mul_mat_vec_proj_q3_K",
        Q4_K => "mul_mat_vec_proj_q4_K",
        Q5_K => "mul_mat_vec_proj_q5_K",
        Q6_K => "mul_mat_vec_proj_q6_K",
        _ => return None,
    })
}

/// Quantized weights of type `a` dequantized into packed f16 for MUL_MAT's GEMM.
pub(crate) fn dequantize_f16(a: DType) -> Option<&'static str> {
    Some(match a {
        Q2_K => "dequantize_f16_q2_K",
        Q3_K => "dequantize_f16_q3_K",
        Q4_K => "dequantize_f16_q4_K",
        Q5_K => "dequantize_f16_q5_K",
        Q6_K => "dequantize_f16_q6_K",
        Q8_0 => "dequantize_f16_q8_0",
        Q4_0 => "dequantize_f16_q4_0",
        Q4_1 => "dequantize_f16_q4_1",
        Q5_0 => "dequantize_f16_q5_0",
        Q5_1 => "dequantize_f16_q5_1",
        _ => return None,
    })
}

/// f32 rows (16-byte aligned, a multiple of 8 values) packed as f16 or bf16 for MUL_MAT's GEMM.
pub(crate) const PACK_F32_F16: &str = "pack_f32_f16";
pub(crate) const PACK_F32_BF16: &str = "pack_f32_bf16";
/// As [`PACK_F32_F16`] and [`PACK_F32_BF16`], each value first taken through GELU_ERF.
pub(crate) const PACK_GELU_ERF_F32_F16: &str = "pack_gelu_erf_f32_f16";
pub(crate) const PACK_GELU_ERF_F32_BF16: &str = "pack_gelu_erf_f32_bf16";
/// As the four above, for packed tensors taken as one run of values.
pub(crate) const PACK_FLAT_F32_F16: &str = "pack_flat_f32_f16";
pub(crate) const PACK_FLAT_F32_BF16: &str = "pack_flat_f32_bf16";
pub(crate) const PACK_FLAT_GELU_ERF_F32_F16: &str = "pack_flat_gelu_erf_f32_f16";
pub(crate) const PACK_FLAT_GELU_ERF_F32_BF16: &str = "pack_flat_gelu_erf_f32_bf16";
/// As [`PACK_FLAT_GELU_ERF_F32_F16`] and [`PACK_FLAT_GELU_ERF_F32_BF16`] for packed f16 values
/// whose GELU_ERF is rounded to f16 (a GELU_ERF node of f16 values widened to f32).
pub(crate) const PACK_FLAT_GELU_ERF_F16_F16: &str = "pack_flat_gelu_erf_f16_f16";
pub(crate) const PACK_FLAT_GELU_ERF_F16_BF16: &str = "pack_flat_gelu_erf_f16_bf16";
/// Splits an f32 operand of a split product into TF32 parts and remainders.
pub(crate) const SPLIT_TF32: &str = "split_tf32";
/// As [`SPLIT_TF32`], each value first taken through GELU_ERF.
pub(crate) const SPLIT_TF32_GELU_ERF: &str = "split_tf32_gelu_erf";

/// Quantizes the columns of a matrix-vector product's b for quantized weights.
pub(crate) const QUANTIZE_Q8_1: &str = "quantize_q8_1";

/// One column of b by q8_0 weights read as runs of 16-byte pieces (a product, SwiGLU's pair,
/// projections), and b quantized for them.
pub(crate) const MUL_MAT_VEC_Q8_0_ROWS: &str = "mul_mat_vec_q8_0_rows_1";
pub(crate) const MUL_MAT_VEC_GLU_Q8_0_ROWS: &str = "mul_mat_vec_glu_q8_0_rows";
pub(crate) const MUL_MAT_VEC_PROJ_Q8_0_ROWS: &str = "mul_mat_vec_proj_q8_0_rows";
pub(crate) const QUANTIZE_Q8_0_ROWS: &str = "quantize_q8_0_rows";

/// Quantizes the columns of b for the tensor-core matrix-vector kernels.
pub(crate) const QUANTIZE_Q8_1_MMA: &str = "quantize_q8_1_mma";
pub(crate) const CONVERT_B_MMA_F16: &str = "convert_b_mma_f16";
pub(crate) const CONVERT_B_MMA_BF16: &str = "convert_b_mma_bf16";

/// ADD, SUB, MUL, DIV of packed, 16-byte aligned f32 operands.
pub(crate) const BINARY_F32_PACKED: &str = "binary_f32_packed";

/// Unary ops and SCALE of a packed, 16-byte aligned f32 tensor into another.
pub(crate) const UNARY_F32_PACKED: &str = "unary_f32_packed";
/// The same for f16 tensors.
pub(crate) const UNARY_F16_PACKED: &str = "unary_f16_packed";

pub(crate) const MUL_MAT_PTRS: &str = "mul_mat_ptrs";

/// The one-column product of a transposed view's copy, read where the view lies
/// (mul_mat_vec_t.cu).
pub(crate) const MUL_MAT_VEC_T: &str = "mul_mat_vec_t_f32";
/// The same for an f16 view, two values a thread.
pub(crate) const MUL_MAT_VEC_T_F16: &str = "mul_mat_vec_t_f16";
pub(crate) const FILL_F32: &str = "fill_f32";

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::kernels::modules::MODULES;

    /// Reduced precision takes the one-pass kernels; full precision, and prompts too short for
    /// the tensor-core kernels, do not.
    #[test]
    fn reduced_flash_attn_takes_the_one_pass_kernels() {
        assert_eq!(flash_attn_mma(DType::F32, 32, 32, 128, true), Some("flash_attn_mma_tf32_f32_d32"));
        assert_eq!(flash_attn_mma(DType::BF16, 128, 128, 16, true), Some("flash_attn_mma_tf32_bf16_d128"));
        assert_eq!(flash_attn_mma(DType::F32, 32, 32, 128, false), Some("flash_attn_mma_f32_d32"));
        assert_eq!(flash_attn_mma(DType::F16, 64, 64, 15, true), None);
        let half = |k, v, d, rows, keys, one_mask_row| {
            flash_attn_half(k, v, (d, d), (rows, keys), one_mask_row, true).map(|h| h.0)
        };
        assert_eq!(half(DType::F16, DType::F16, 32, 128, 128, true), Some("flash_attn_half_d32_kv128"));
        assert_eq!(half(DType::F16, DType::F16, 32, 65, 128, true), Some("flash_attn_half_d32_kv128"));
        assert_eq!(half(DType::F16, DType::F16, 32, 64, 128, true), Some("flash_attn_half_d32_kv128_rows"));
        assert_eq!(half(DType::F16, DType::F16, 32, 16, 16, true), Some("flash_attn_half_d32_kv128_rows"));
        let few_blocks = flash_attn_half(DType::F16, DType::F16, (32, 32), (128, 128), true, false);
        assert_eq!(few_blocks.map(|h| h.0), Some("flash_attn_half_d32_kv128_rows"));
        assert_eq!(half(DType::F16, DType::F16, 32, 128, 128, false), Some("flash_attn_half_d32_kv128_rows"));
        assert_eq!(half(DType::F16, DType::F16, 32, 128, 129, true), Some("flash_attn_half_d32"));
        assert_eq!(half(DType::F16, DType::F16, 64, 128, 64, true), Some("flash_attn_half_d64"));
        assert_eq!(half(DType::F16, DType::F32, 32, 128, 128, true), None);
        assert_eq!(half(DType::F16, DType::F16, 64, 15, 64, false), None);
        assert_eq!(flash_attn_half(DType::F16, DType::F16, (64, 32), (128, 64), true, true), None);
    }

    #[test]
    fn every_kernel_chosen_here_is_in_a_module() {
        let known: BTreeSet<&str> = MODULES.iter().flat_map(|m| m.kernels.iter().copied()).collect();
        let mut chosen = BTreeSet::new();
        for a in DType::ALL {
            for f in [
                unary,
                argmax,
                norm,
                diag_mask_inf,
                rope,
                get_rows,
                get_rows_x8,
                cpy_transposed,
                set_rows,
                concat,
                pool_2d,
                dequantize_f16,
                mul_mat_vec_mma,
            ] {
                chosen.extend(f(a));
            }
            for ncols in 0..=9 {
                chosen.extend(mul_mat_vec(a, ncols));
                chosen.extend(mul_mat_vec_glu(a));
                chosen.extend(mul_mat_vec_proj(a));
            }
            for (head, rows) in [32, 64, 128].iter().flat_map(|&h| [(h, 1), (h, 2)]) {
                chosen.extend(flash_attn(a, head, rows));
                chosen.extend(flash_attn_combine(head));
                for reduced in [false, true] {
                    chosen.extend(flash_attn_mma(a, head, head, FLASH_ATTN_MMA_MIN_ROWS, reduced));
                }
                for keys in [1, FLASH_ATTN_HALF_SHORT_KEYS, FLASH_ATTN_HALF_SHORT_KEYS + 1] {
                    for one_mask_row in [false, true] {
                        for rows in [FLASH_ATTN_MMA_MIN_ROWS, FLASH_ATTN_HALF_WIDE_MIN_ROWS + 1] {
                            let name = flash_attn_half(a, a, (head, head), (rows, keys), one_mask_row, true);
                            chosen.extend(name.map(|h| h.0));
                        }
                    }
                }
            }
            for max_ne0 in (0..16).map(|p| 1i64 << p) {
                chosen.extend(soft_max_packed(a, max_ne0));
                chosen.extend(norm_packed(max_ne0));
                chosen.extend(norm_packed_for(max_ne0 * 3 / 4, max_ne0));
                chosen.extend(norm_packed_f16(max_ne0, max_ne0));
                chosen.extend(norm_packed_f16(max_ne0 * 3 / 4, max_ne0));
                chosen.extend(norm_gathered(max_ne0));
                chosen.extend(norm_gathered(max_ne0 * 3 / 4));
            }
            for b in DType::ALL {
                for f in [cpy, binary, sum_rows, soft_max, im2col] {
                    chosen.extend(f(a, b));
                }
            }
        }
        chosen.insert(MUL_MAT_PTRS);
        chosen.insert(MUL_MAT_VEC_T);
        chosen.insert(MUL_MAT_VEC_T_F16);
        chosen.insert(QUANTIZE_Q8_1);
        chosen.insert(MUL_MAT_VEC_Q8_0_ROWS);
        chosen.insert(MUL_MAT_VEC_GLU_Q8_0_ROWS);
        chosen.insert(MUL_MAT_VEC_PROJ_Q8_0_ROWS);
        chosen.insert(QUANTIZE_Q8_0_ROWS);
        chosen.insert(QUANTIZE_Q8_1_MMA);
        chosen.insert(CONVERT_B_MMA_F16);
        chosen.insert(CONVERT_B_MMA_BF16);
        chosen.insert(PACK_F32_F16);
        chosen.insert(PACK_FLAT_F32_F16);
        chosen.insert(PACK_FLAT_F32_BF16);
        chosen.insert(PACK_FLAT_GELU_ERF_F32_F16);
        chosen.insert(PACK_FLAT_GELU_ERF_F32_BF16);
        chosen.insert(PACK_FLAT_GELU_ERF_F16_F16);
        chosen.insert(PACK_FLAT_GELU_ERF_F16_BF16);
        chosen.insert(PACK_F32_BF16);
        chosen.insert(SPLIT_TF32);
        chosen.insert(PACK_GELU_ERF_F32_F16);
        chosen.insert(PACK_GELU_ERF_F32_BF16);
        chosen.insert(SPLIT_TF32_GELU_ERF);
        chosen.insert(FILL_F32);
        chosen.insert(BINARY_F32_PACKED);
        chosen.insert(UNARY_F32_PACKED);
        chosen.insert(UNARY_F16_PACKED);
        for name in &chosen {
            assert!(known.contains(name), "{name} is chosen but no module defines it");
        }
        // And every kernel of the modules is used.
        for name in &known {
            assert!(chosen.contains(name), "{name} is defined but never chosen");
        }
    }
}
