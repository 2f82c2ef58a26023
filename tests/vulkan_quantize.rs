//! Quantization on a Vulkan device gives the CPU's bytes: CPY into each quantized type of
//! rows chosen to sit on rounding boundaries (values of another quantized type, whose
//! quotients tie), zeros, constants and random values. Skips where no Vulkan device exists.
#![cfg(feature = "vulkan")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tessera::allocator::alloc_graph_tensors;
use tessera::{convert, BackendReg, DType, Device, Graph};

fn device() -> Option<&'static dyn Device> {
    let d = tessera::vulkan::VULKAN_REG.device(0);
    if d.is_none() {
        eprintln!("skipped: no Vulkan device on this machine");
    }
    d
}

/// Rows of `len` values (a multiple of 256): random, tie-heavy and degenerate.
fn rows(len: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    };
    let mut v: Vec<f32> = (0..len).map(|_| uniform()).collect();
    // Values of other quantized types: their quotients by the new scale often tie.
    for t in [DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K] {
        let x: Vec<f32> = (0..len).map(|_| uniform() * 3.0).collect();
        v.extend(convert::to_f32_vec(t, &convert::to_bytes(t, &x).unwrap()));
    }
    v.extend(std::iter::repeat_n(0.0, len));
    v.extend(std::iter::repeat_n(0.75, len));
    v.extend((0..len).map(|i| if i % 3 == 0 { -1.0 } else { (i % 7) as f32 / 8.0 }));
    v
}

#[test]
fn quantized_copies_are_bit_identical_to_the_cpu() {
    let Some(gpu) = device() else { return };
    let mut backend = gpu.init_backend().unwrap();
    let len = 512;
    let x = rows(len);
    for t in [DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K] {
        let mut g = Graph::new();
        let a = g.new_tensor(DType::F32, &[len, x.len() / len]).unwrap();
        let q = g.cast(a, t).unwrap();
        g.build_forward(q).unwrap();
        let _buffers = alloc_graph_tensors(&mut g, gpu.buffer_type()).unwrap();
        g.set_f32(a, &x).unwrap();
        backend.compute(&g, 0..g.nodes().len()).unwrap();
        backend.synchronize().unwrap();
        let want = convert::to_bytes(t, &x).unwrap();
        let mut got = vec![0u8; want.len()];
        g.get_bytes(q, 0, &mut got).unwrap();
        let block = t.block_bytes();
        let bad: Vec<usize> =
            (0..want.len() / block).filter(|&b| got[b * block..][..block] != want[b * block..][..block]).collect();
        if let Some(&b) = bad.first() {
            let n = t.block_len();
            eprintln!("x = {:?}", &x[b * n..(b + 1) * n]);
            eprintln!("want {:?}\ngot  {:?}", &want[b * block..][..block], &got[b * block..][..block]);
        }
        assert!(
            bad.is_empty(),
            "{t}: {} of {} blocks differ, first {:?}",
            bad.len(),
            want.len() / block,
            &bad[..bad.len().min(8)]
        );
    }
    assert_eq!(tessera::vulkan::validation_messages(), 0, "the validation layer reported problems");
}
