//! The module table: every fatbin this crate embeds and the kernels it holds.
//!
//! Each `kernels/<name>.cu` is compiled by `scripts/build-cuda-kernels.sh` into
//! `kernels/bin/<name>.fatbin` (committed, so building needs no CUDA toolkit). The kernel lists
//! are checked against the sources by the tests below: every kernel a `.cu` file defines is
//! listed, and nothing else.

/// One compiled kernel file.
pub(crate) struct Module {
    /// The source's name: `kernels/<name>.cu`.
    pub name: &'static str,
    /// Its fatbin (SASS for sm_80, sm_89 and sm_90a, compute_90 PTX).
    pub fatbin: &'static [u8],
    /// The `extern "C"` kernels it defines.
    pub kernels: &'static [&'static str],
}

macro_rules! fatbin {
    ($name:literal) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/bin/", $name, ".fatbin"))
    };
}

pub(crate) const MODULES: &[Module] = &[
    Module { name: "concat", fatbin: fatbin!("concat"), kernels: &["concat_b32", "concat_b16"] },
    Module {
        name: "copy",
        fatbin: fatbin!("copy"),
        kernels: &[
            "cpy_transposed_b32",
            "cpy_transposed_b16",
            "cpy_f32_f16",
            "cpy_f32_bf16",
            "cpy_f16_f32",
            "cpy_f16_bf16",
            "cpy_bf16_f32",
            "cpy_bf16_f16",
            "cpy_q8_0_f32",
            "cpy_q8_0_f16",
            "cpy_q8_0_bf16",
            "cpy_q4_0_f32",
            "cpy_q4_0_f16",
            "cpy_q4_0_bf16",
            "cpy_q4_K_f32",
            "cpy_q4_K_f16",
            "cpy_q4_K_bf16",
            "cpy_q5_K_f32",
            "cpy_q5_K_f16",
            "cpy_q5_K_bf16",
            "cpy_q6_K_f32",
            "cpy_q6_K_f16",
            "cpy_q6_K_bf16",
            "cpy_q4_1_f32",
            "cpy_q4_1_f16",
            "cpy_q4_1_bf16",
            "cpy_q5_0_f32",
            "cpy_q5_0_f16",
            "cpy_q5_0_bf16",
            "cpy_q5_1_f32",
            "cpy_q5_1_f16",
            "cpy_q5_1_bf16",
            "cpy_q2_K_f32",
            "cpy_q2_K_f16",
            "cpy_q2_K_bf16",
            "cpy_q3_K_f32",
            "cpy_q3_K_f16",
            "cpy_q3_K_bf16",
            "cpy_f32_q8_0",
            "cpy_f16_q8_0",
            "cpy_bf16_q8_0",
            "cpy_q8_0_q8_0",
            "cpy_q4_0_q8_0",
            "cpy_f32_q4_0",
            "cpy_f16_q4_0",
            "cpy_bf16_q4_0",
            "cpy_q8_0_q4_0",
            "cpy_q4_0_q4_0",
            "cpy_f32_q4_1",
            "cpy_f16_q4_1",
            "cpy_bf16_q4_1",
            "cpy_f32_q5_0",
            "cpy_f16_q5_0",
            "cpy_bf16_q5_0",
            "cpy_f32_q5_1",
            "cpy_f16_q5_1",
            "cpy_bf16_q5_1",
            "cpy_b32",
            "cpy_b16",
            "fill_f32",
        ],
    },
    Module {
        name: "elementwise",
        fatbin: fatbin!("elementwise"),
        kernels: &[
            "binary_f32_f32",
            "binary_f32_f16",
            "binary_f32_bf16",
            "binary_f16_f32",
            "binary_f16_f16",
            "binary_f16_bf16",
            "binary_bf16_f32",
            "binary_bf16_f16",
            "binary_bf16_bf16",
            "binary_f32_packed",
            "unary_f32_packed",
            "unary_f16_packed",
            "unary_f32",
            "unary_f16",
            "unary_bf16",
        ],
    },
    Module {
        name: "flash_attn",
        fatbin: fatbin!("flash_attn"),
        kernels: &[
            "flash_attn_f32_r1_d32",
            "flash_attn_f32_r1_d64",
            "flash_attn_f32_r1_d128",
            "flash_attn_f32_r16_d32",
            "flash_attn_f32_r16_d64",
            "flash_attn_f32_r16_d128",
            "flash_attn_f16_r1_d32",
            "flash_attn_f16_r1_d64",
            "flash_attn_f16_r1_d128",
            "flash_attn_f16_r16_d32",
            "flash_attn_f16_r16_d64",
            "flash_attn_f16_r16_d128",
            "flash_attn_bf16_r1_d32",
            "flash_attn_bf16_r1_d64",
            "flash_attn_bf16_r1_d128",
            "flash_attn_bf16_r16_d32",
            "flash_attn_bf16_r16_d64",
            "flash_attn_bf16_r16_d128",
            "flash_attn_combine_d32",
            "flash_attn_combine_d64",
            "flash_attn_combine_d128",
        ],
    },
    Module {
        name: "flash_attn_half",
        fatbin: fatbin!("flash_attn_half"),
        kernels: &[
            "flash_attn_half_d32",
            "flash_attn_half_d64",
            "flash_attn_half_d128",
            "flash_attn_half_d32_kv128",
            "flash_attn_half_d32_kv128_rows",
        ],
    },
    Module {
        name: "flash_attn_mma",
        fatbin: fatbin!("flash_attn_mma"),
        kernels: &[
            "flash_attn_mma_f32_d32",
            "flash_attn_mma_f32_d64",
            "flash_attn_mma_f32_d128",
            "flash_attn_mma_f16_d32",
            "flash_attn_mma_f16_d64",
            "flash_attn_mma_f16_d128",
            "flash_attn_mma_bf16_d32",
            "flash_attn_mma_bf16_d64",
            "flash_attn_mma_bf16_d128",
            "flash_attn_mma_tf32_f32_d32",
            "flash_attn_mma_tf32_f32_d64",
            "flash_attn_mma_tf32_f32_d128",
            "flash_attn_mma_tf32_f16_d32",
            "flash_attn_mma_tf32_f16_d64",
            "flash_attn_mma_tf32_f16_d128",
            "flash_attn_mma_tf32_bf16_d32",
            "flash_attn_mma_tf32_bf16_d64",
            "flash_attn_mma_tf32_bf16_d128",
        ],
    },
    Module {
        name: "get_rows",
        fatbin: fatbin!("get_rows"),
        kernels: &[
            "get_rows_f32",
            "get_rows_f16",
            "get_rows_bf16",
            "get_rows_q8_0",
            "get_rows_q4_0",
            "get_rows_q4_1",
            "get_rows_q5_0",
            "get_rows_q5_1",
            "get_rows_q2_K",
            "get_rows_q3_K",
            "get_rows_q4_K",
            "get_rows_q5_K",
            "get_rows_q6_K",
            "get_rows_i32",
            "get_rows_x8_f32",
            "get_rows_x8_f16",
            "get_rows_x8_bf16",
            "set_rows_f32",
            "set_rows_f16",
            "set_rows_bf16",
        ],
    },
    Module {
        name: "im2col",
        fatbin: fatbin!("im2col"),
        kernels: &[
            "im2col_f32_f32",
            "im2col_f32_f16",
            "im2col_f16_f32",
            "im2col_f16_f16",
            "im2col_bf16_f32",
            "im2col_bf16_f16",
        ],
    },
    Module {
        name: "mul_mat",
        fatbin: fatbin!("mul_mat"),
        kernels: &[
            "mul_mat_ptrs",
            "dequantize_f16_q2_K",
            "dequantize_f16_q3_K",
            "dequantize_f16_q4_K",
            "dequantize_f16_q5_K",
            "dequantize_f16_q6_K",
            "pack_flat_f32_f16",
            "pack_flat_f32_bf16",
            "pack_flat_gelu_erf_f32_f16",
            "pack_flat_gelu_erf_f32_bf16",
            "pack_flat_gelu_erf_f16_f16",
            "pack_flat_gelu_erf_f16_bf16",
            "pack_f32_f16",
            "pack_f32_bf16",
            "pack_gelu_erf_f32_f16",
            "pack_gelu_erf_f32_bf16",
            "split_tf32",
            "split_tf32_gelu_erf",
            "dequantize_f16_q8_0",
            "dequantize_f16_q4_0",
            "dequantize_f16_q4_1",
            "dequantize_f16_q5_0",
            "dequantize_f16_q5_1",
        ],
    },
    Module {
        name: "mul_mat_vec",
        fatbin: fatbin!("mul_mat_vec"),
        kernels: &[
            "quantize_q8_1",
            "quantize_q8_0_rows",
            "mul_mat_vec_q8_0_rows_1",
            "mul_mat_vec_glu_q8_0_rows",
            "mul_mat_vec_proj_q8_0_rows",
            "mul_mat_vec_f32_1",
            "mul_mat_vec_f32_2",
            "mul_mat_vec_f32_3",
            "mul_mat_vec_f32_4",
            "mul_mat_vec_f32_5",
            "mul_mat_vec_f32_6",
            "mul_mat_vec_f32_7",
            "mul_mat_vec_f32_8",
            "mul_mat_vec_f16_1",
            "mul_mat_vec_f16_2",
            "mul_mat_vec_f16_3",
            "mul_mat_vec_f16_4",
            "mul_mat_vec_f16_5",
            "mul_mat_vec_f16_6",
            "mul_mat_vec_f16_7",
            "mul_mat_vec_f16_8",
            "mul_mat_vec_bf16_1",
            "mul_mat_vec_bf16_2",
            "mul_mat_vec_bf16_3",
            "mul_mat_vec_bf16_4",
            "mul_mat_vec_bf16_5",
            "mul_mat_vec_bf16_6",
            "mul_mat_vec_bf16_7",
            "mul_mat_vec_bf16_8",
            "mul_mat_vec_q8_0_1",
            "mul_mat_vec_q8_0_2",
            "mul_mat_vec_q8_0_3",
            "mul_mat_vec_q8_0_4",
            "mul_mat_vec_q8_0_5",
            "mul_mat_vec_q8_0_6",
            "mul_mat_vec_q8_0_7",
            "mul_mat_vec_q8_0_8",
            "mul_mat_vec_q4_0_1",
            "mul_mat_vec_q4_0_2",
            "mul_mat_vec_q4_0_3",
            "mul_mat_vec_q4_0_4",
            "mul_mat_vec_q4_0_5",
            "mul_mat_vec_q4_0_6",
            "mul_mat_vec_q4_0_7",
            "mul_mat_vec_q4_0_8",
            "mul_mat_vec_q4_1_1",
            "mul_mat_vec_q4_1_2",
            "mul_mat_vec_q4_1_3",
            "mul_mat_vec_q4_1_4",
            "mul_mat_vec_q4_1_5",
            "mul_mat_vec_q4_1_6",
            "mul_mat_vec_q4_1_7",
            "mul_mat_vec_q4_1_8",
            "mul_mat_vec_q5_0_1",
            "mul_mat_vec_q5_0_2",
            "mul_mat_vec_q5_0_3",
            "mul_mat_vec_q5_0_4",
            "mul_mat_vec_q5_0_5",
            "mul_mat_vec_q5_0_6",
            "mul_mat_vec_q5_0_7",
            "mul_mat_vec_q5_0_8",
            "mul_mat_vec_q5_1_1",
            "mul_mat_vec_q5_1_2",
            "mul_mat_vec_q5_1_3",
            "mul_mat_vec_q5_1_4",
            "mul_mat_vec_q5_1_5",
            "mul_mat_vec_q5_1_6",
            "mul_mat_vec_q5_1_7",
            "mul_mat_vec_q5_1_8",
            "mul_mat_vec_glu_f32",
            "mul_mat_vec_glu_f16",
            "mul_mat_vec_glu_bf16",
            "mul_mat_vec_glu_q8_0",
            "mul_mat_vec_glu_q4_0",
            "mul_mat_vec_glu_q4_1",
            "mul_mat_vec_glu_q5_0",
            "mul_mat_vec_glu_q5_1",
            "mul_mat_vec_proj_f32",
            "mul_mat_vec_proj_f16",
            "mul_mat_vec_proj_bf16",
            "mul_mat_vec_proj_q8_0",
            "mul_mat_vec_proj_q4_0",
            "mul_mat_vec_proj_q4_1",
            "mul_mat_vec_proj_q5_0",
            "mul_mat_vec_proj_q5_1",
        ],
    },
    Module {
        name: "mul_mat_vec_kquant",
        fatbin: fatbin!("mul_mat_vec_kquant"),
        kernels: &[
            "mul_mat_vec_q4_K_1",
            "mul_mat_vec_q4_K_2",
            "mul_mat_vec_q4_K_3",
            "mul_mat_vec_q4_K_4",
            "mul_mat_vec_q4_K_5",
            "mul_mat_vec_q4_K_6",
            "mul_mat_vec_q4_K_7",
            "mul_mat_vec_q4_K_8",
            "mul_mat_vec_q5_K_1",
            "mul_mat_vec_q5_K_2",
            "mul_mat_vec_q5_K_3",
            "mul_mat_vec_q5_K_4",
            "mul_mat_vec_q5_K_5",
            "mul_mat_vec_q5_K_6",
            "mul_mat_vec_q5_K_7",
            "mul_mat_vec_q5_K_8",
            "mul_mat_vec_q6_K_1",
            "mul_mat_vec_q6_K_2",
            "mul_mat_vec_q6_K_3",
            "mul_mat_vec_q6_K_4",
            "mul_mat_vec_q6_K_5",
            "mul_mat_vec_q6_K_6",
            "mul_mat_vec_q6_K_7",
            "mul_mat_vec_q6_K_8",
            "mul_mat_vec_q2_K_1",
            "mul_mat_vec_q2_K_2",
            "mul_mat_vec_q2_K_3",
            "mul_mat_vec_q2_K_4",
            "mul_mat_vec_q2_K_5",
            "mul_mat_vec_q2_K_6",
            "mul_mat_vec_q2_K_7",
            "mul_mat_vec_q2_K_8",
            "mul_mat_vec_q3_K_1",
            "mul_mat_vec_q3_K_2",
            "mul_mat_vec_q3_K_3",
            "mul_mat_vec_q3_K_4",
            "mul_mat_vec_q3_K_5",
            "mul_mat_vec_q3_K_6",
            "mul_mat_vec_q3_K_7",
            "mul_mat_vec_q3_K_8",
            "mul_mat_vec_glu_q4_K",
            "mul_mat_vec_glu_q5_K",
            "mul_mat_vec_glu_q6_K",
            "mul_mat_vec_glu_q2_K",
            "mul_mat_vec_glu_q3_K",
            "mul_mat_vec_proj_q4_K",
            "mul_mat_vec_proj_q5_K",
            "mul_mat_vec_proj_q6_K",
            "mul_mat_vec_proj_q2_K",
            "mul_mat_vec_proj_q3_K",
        ],
    },
    Module {
        name: "mul_mat_vec_mma",
        fatbin: fatbin!("mul_mat_vec_mma"),
        kernels: &[
            "quantize_q8_1_mma",
            "mul_mat_vec_mma_q8_0",
            "mul_mat_vec_mma_q4_0",
            "convert_b_mma_f16",
            "convert_b_mma_bf16",
            "mul_mat_vec_mma_f16",
            "mul_mat_vec_mma_bf16",
        ],
    },
    Module {
        name: "mul_mat_vec_t",
        fatbin: fatbin!("mul_mat_vec_t"),
        kernels: &["mul_mat_vec_t_f32", "mul_mat_vec_t_f16"],
    },
    Module { name: "pool", fatbin: fatbin!("pool"), kernels: &["pool_2d_f32", "pool_2d_f16", "pool_2d_bf16"] },
    Module { name: "rope", fatbin: fatbin!("rope"), kernels: &["rope_f32", "rope_f16", "rope_bf16"] },
    Module {
        name: "rows",
        fatbin: fatbin!("rows"),
        kernels: &[
            "sum_rows_f32_f32",
            "sum_rows_f16_f16",
            "sum_rows_bf16_bf16",
            "sum_rows_f16_f32",
            "sum_rows_bf16_f32",
            "argmax_f32",
            "argmax_f16",
            "argmax_bf16",
            "soft_max_f32_f32",
            "soft_max_f32_f16",
            "soft_max_f16_f32",
            "soft_max_f16_f16",
            "soft_max_bf16_f32",
            "soft_max_bf16_f16",
            "norm_f32",
            "norm_f16",
            "norm_bf16",
            "diag_mask_inf_f32",
            "diag_mask_inf_f16",
            "diag_mask_inf_bf16",
        ],
    },
    Module {
        name: "rows_packed",
        fatbin: fatbin!("rows_packed"),
        kernels: &[
            "soft_max_f32_f32_row128",
            "soft_max_f32_f32_row256",
            "soft_max_f32_f32_row512",
            "soft_max_f32_f32_row1024",
            "soft_max_f32_f32_row2048",
            "soft_max_f32_f32_row4096",
            "soft_max_f32_f32_row8192",
            "soft_max_f32_f16_row128",
            "soft_max_f32_f16_row256",
            "soft_max_f32_f16_row512",
            "soft_max_f32_f16_row1024",
            "soft_max_f32_f16_row2048",
            "soft_max_f32_f16_row4096",
            "soft_max_f32_f16_row8192",
            "norm_f32_row128",
            "norm_f32_row256",
            "norm_f32_row384",
            "norm_f32_row512",
            "norm_f32_row1024",
            "norm_f32_row2048",
            "norm_f32_row4096",
            "norm_f32_row8192",
            "norm_f16_row128",
            "norm_f16_row256",
            "norm_f16_row384",
            "norm_f16_row512",
            "norm_f16_row1024",
            "norm_gathered_f32_row128",
            "norm_gathered_f32_row256",
            "norm_gathered_f32_row384",
            "norm_gathered_f32_row512",
        ],
    },
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The kernels a `.cu` source defines: lines `FAMILY_KERNEL(name, ...)` and
    /// `extern "C" __global__ void name(` (the convention of common.cuh, with launch bounds
    /// `__launch_bounds__(...)` before the name or not), outside macro definitions (whose
    /// lines end in a backslash).
    fn kernels_in_source(source: &str) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for line in source.lines() {
            if line.trim_end().ends_with('\\') {
                continue;
            }
            let line = line.trim_start();
            if let Some(rest) = line.strip_prefix("extern \"C\" __global__ void ") {
                let rest = match rest.strip_prefix("__launch_bounds__(") {
                    Some(bounds) => bounds.split_once(')').map_or(bounds, |(_, after)| after.trim_start()),
                    None => rest,
                };
                if let Some((name, _)) = rest.split_once('(') {
                    names.insert(name.trim().to_string());
                }
                continue;
            }
            let Some((head, rest)) = line.split_once('(') else { continue };
            if head.ends_with("_KERNEL")
                && head.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && !line.starts_with("#define")
            {
                if let Some((name, _)) = rest.split_once(',') {
                    names.insert(name.trim().to_string());
                }
            }
        }
        names
    }

    #[test]
    fn every_source_has_a_fatbin_and_lists_exactly_its_kernels() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
        let mut sources: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".cu").map(String::from))
            .collect();
        sources.sort();
        let listed: Vec<&str> = MODULES.iter().map(|m| m.name).collect();
        assert_eq!(sources, listed, "modules listed in modules.rs");
        for m in MODULES {
            assert!(m.fatbin.len() > 1000, "{}.fatbin is too small to hold kernels", m.name);
            let source = std::fs::read_to_string(format!("{dir}/{}.cu", m.name)).unwrap();
            let defined = kernels_in_source(&source);
            let listed: BTreeSet<String> = m.kernels.iter().map(|k| k.to_string()).collect();
            assert_eq!(defined, listed, "kernels of {}.cu", m.name);
        }
    }

    #[test]
    fn kernel_names_are_unique() {
        let mut seen = BTreeSet::new();
        for m in MODULES {
            for k in m.kernels {
                assert!(seen.insert(*k), "{k} is listed twice");
            }
        }
    }
}
