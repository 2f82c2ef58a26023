//! Bad input never panics: each case is a typed error whose message names the tensor and says
//! what was expected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tessera::allocator::alloc_graph_tensors;
use tessera::host_buffer::{HostBuffer, HOST_BUFFER_TYPE};
use tessera::{Backend, BufferType, DType, Error, Graph, RopeMode, RopeParams, TensorData};

fn named(g: &mut Graph, dtype: DType, ne: &[usize], name: &str) -> tessera::TensorId {
    let id = g.new_tensor(dtype, ne).unwrap();
    g.set_name(id, name).unwrap();
    id
}

#[test]
fn mismatched_shapes_name_the_tensor_and_the_expected_shape() {
    let mut g = Graph::new();
    let a = named(&mut g, DType::F32, &[4, 3], "a");
    let b = named(&mut g, DType::F32, &[3, 3], "b");
    let err = g.add(a, b).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "ADD", .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("'b'") && msg.contains("[3, 3, 1, 1]") && msg.contains("[4, 3, 1, 1]"), "{msg}");

    let w = named(&mut g, DType::F32, &[5, 2], "w");
    let err = g.mul_mat(w, a).unwrap_err();
    assert!(err.to_string().contains("MUL_MAT: tensor 'a' has shape [4, 3, 1, 1], expected [5, n, e2, e3]"), "{err}");

    let c = named(&mut g, DType::F32, &[4, 2], "c");
    let err = g.concat(a, c, 0).unwrap_err();
    assert!(err.to_string().contains("'c'"), "{err}");
}

#[test]
fn wrong_types_name_the_tensor_and_the_expected_type() {
    let mut g = Graph::new();
    let w = named(&mut g, DType::F32, &[8, 2], "w");
    let x16 = named(&mut g, DType::F16, &[8, 3], "x16");
    let err = g.mul_mat(w, x16).unwrap_err();
    assert_eq!(err.to_string(), "MUL_MAT: tensor 'x16' has type f16, expected f32");

    let q = named(&mut g, DType::Q8_0, &[32, 2], "q");
    let err = g.relu(q).unwrap_err();
    assert!(matches!(err, Error::TypeMismatch { op: "RELU", dtype: DType::Q8_0, .. }), "{err:?}");

    let x = named(&mut g, DType::F32, &[8, 2, 3], "x");
    let pos = named(&mut g, DType::F32, &[3], "pos");
    let params = RopeParams { mode: RopeMode::Normal, n_dims: 8, freq_base: 10000.0, freq_scale: 1.0 };
    let err = g.rope(x, pos, params).unwrap_err();
    assert!(err.to_string().contains("'pos' has type f32, expected i32"), "{err}");

    let err = g.new_tensor(DType::Q4_0, &[33]).unwrap_err();
    assert!(matches!(err, Error::BlockAlignment { dtype: DType::Q4_0, len: 33 }), "{err:?}");
}

#[test]
fn views_out_of_bounds_are_errors() {
    let mut g = Graph::new();
    let a = named(&mut g, DType::F32, &[4, 4], "a");
    let err = g.view_2d(a, 4, 4, 16, 4).unwrap_err();
    assert!(matches!(err, Error::ViewOutOfBounds { end: 68, source_bytes: 64, .. }), "{err:?}");
    assert!(err.to_string().contains("of 'a'"), "{err}");
    // Overflowing offsets are caught, not wrapped.
    assert!(matches!(g.view_1d(a, 1, usize::MAX), Err(Error::ViewOutOfBounds { .. })));
    assert!(matches!(
        g.view(a, [usize::MAX, 2, 1, 1], [8, 16, 16], 0),
        Err(Error::ViewOutOfBounds { .. } | Error::Overflow { .. })
    ));
}

#[test]
fn setting_bytes_outside_a_tensor_is_an_error() {
    let mut g = Graph::new();
    let a = named(&mut g, DType::F32, &[4], "a");
    let err = g.set_bytes(a, 0, &[0; 4]).unwrap_err();
    assert_eq!(err, Error::NotAllocated { tensor: "a".into() });
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    let err = g.set_bytes(a, 12, &[0; 8]).unwrap_err();
    assert_eq!(err.to_string(), "bytes 12..20 are outside tensor 'a' of 16 bytes");
    let err = g.set_bytes(a, usize::MAX, &[0; 2]).unwrap_err();
    assert!(matches!(err, Error::TensorRange { .. }), "{err:?}");
    let err = g.set_f32(a, &[1.0; 5]).unwrap_err();
    assert!(err.to_string().contains("'a'"), "{err}");
    let mut out = [0u8; 8];
    assert!(matches!(g.get_bytes(a, 10, &mut out), Err(Error::TensorRange { .. })));
}

#[test]
fn binding_outside_a_buffer_is_an_error() {
    let mut g = Graph::new();
    let a = named(&mut g, DType::F32, &[16], "a");
    let buffer = HOST_BUFFER_TYPE.alloc_buffer(32).unwrap();
    let err = g.bind(a, TensorData { buffer, offset: 0 }).unwrap_err();
    assert!(matches!(err, Error::BufferRange { len: 64, size: 32, .. }), "{err:?}");
}

#[test]
fn writing_into_static_weights_is_an_error() {
    static WEIGHTS: [u8; 16] = [0; 16];
    let mut g = Graph::new();
    let w = named(&mut g, DType::F32, &[4], "w");
    g.bind(w, TensorData { buffer: std::sync::Arc::new(HostBuffer::from_static(&WEIGHTS)), offset: 0 }).unwrap();
    let err = g.set_f32(w, &[1.0; 4]).unwrap_err();
    assert_eq!(err.to_string(), "tensor 'w' lives in read-only buffer 'CPU_Mapped' and cannot be written");
    // A node whose result would land in the read-only weights fails to compute.
    let x = named(&mut g, DType::F32, &[4], "x");
    let into_w = g.cpy(x, w).unwrap();
    g.build_forward(into_w).unwrap();
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    let mut cpu = tessera::cpu::CpuBackend::new();
    let err = cpu.compute_graph(&g).unwrap_err();
    assert!(matches!(err, Error::ReadOnly { .. }), "{err:?}");
}

#[test]
fn row_indices_out_of_range_fail_the_compute() {
    let mut g = Graph::new();
    let table = named(&mut g, DType::F32, &[3, 4], "table");
    let idx = named(&mut g, DType::I32, &[2], "idx");
    let rows = g.get_rows(table, idx).unwrap();
    g.build_forward(rows).unwrap();
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    g.set_i32(idx, &[1, 4]).unwrap();
    let mut cpu = tessera::cpu::CpuBackend::new();
    let err = cpu.compute_graph(&g).unwrap_err();
    assert!(matches!(err, Error::InvalidParam { op: "GET_ROWS", .. }), "{err:?}");
    g.set_i32(idx, &[-1, 0]).unwrap();
    assert!(cpu.compute_graph(&g).is_err());
}

#[test]
fn computing_unallocated_tensors_is_an_error() {
    let mut g = Graph::new();
    let a = named(&mut g, DType::F32, &[4], "a");
    let b = g.relu(a).unwrap();
    g.build_forward(b).unwrap();
    let mut cpu = tessera::cpu::CpuBackend::new();
    let err = cpu.compute_graph(&g).unwrap_err();
    assert!(matches!(err, Error::NotAllocated { .. }), "{err:?}");
    assert!(matches!(cpu.compute(&g, 0..5), Err(Error::InvalidParam { .. })));
}

#[test]
fn unknown_devices_list_the_devices_that_exist() {
    let err = tessera::registry().device_by_name("cuda9").err().unwrap();
    assert_eq!(err.to_string(), "unknown device 'cuda9'; devices: CPU");
    assert_eq!(tessera::registry().device_by_name("cpu").unwrap().name(), "CPU");
}

/// Sizes computed from parameters (padding, strides, view extents) never wrap: a padding so
/// large that `2 * pad` overflows is an error, not a small wrong shape.
#[test]
fn shape_arithmetic_that_overflows_is_an_error_not_a_wrapped_shape() {
    use tessera::{Im2ColParams, Pool2dParams, PoolKind};
    let mut g = Graph::new();
    let input = named(&mut g, DType::F32, &[8, 8, 2, 1], "input");
    let kernel = named(&mut g, DType::F32, &[3, 3, 2, 4], "kernel");
    let huge = usize::MAX / 2 + 1;
    let p = Im2ColParams { s0: 1, s1: 1, p0: huge, p1: 0, d0: 1, d1: 1, is_2d: true };
    let err = g.im2col(kernel, input, p, DType::F32).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "IM2COL", .. }), "{err:?}");
    let pool = Pool2dParams { kind: PoolKind::Max, k0: usize::MAX, k1: 2, s0: 1, s1: 1, p0: huge, p1: 0 };
    let err = g.pool_2d(input, pool).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "POOL_2D", .. }), "{err:?}");
    let err = g.view_2d(input, 1, usize::MAX / 2, 4, 0).unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
    let err = g.new_tensor(DType::F32, &[usize::MAX / 2, 3]).unwrap_err();
    assert!(matches!(err, Error::Overflow { .. }), "{err:?}");
}
