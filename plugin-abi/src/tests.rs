//! Unit tests of the plugin ABI: descriptors round trip and refuse bad input; a small
//! family exported through the tables and wrapped back behaves like the original, reports
//! errors and panics as errors, and unloads only when nothing of it is alive.

extern crate std;

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::any::Any;
use core::ops::Range;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use tessera_core::host_buffer::{HostBuffer, HOST_BUFFER_TYPE};
use tessera_core::op::*;
use tessera_core::registry::BackendReg;
use tessera_core::tensor::TensorId;
use tessera_core::{Backend, Buffer, BufferType, DType, Device, DeviceCaps, DeviceType, Error, Graph, MemoryInfo};
use tessera_core::{Event, Result, TensorData};

use crate::abi::*;
use crate::desc::*;
use crate::export::{panic_message, Exporter};
use crate::import::wrap_reg;
use crate::loopback;
use crate::tables::AbiReg;

fn all_ops() -> Vec<Op> {
    let mut ops = vec![
        Op::None,
        Op::Scale(-0.5),
        Op::SumRows,
        Op::Mean,
        Op::Argmax,
        Op::SoftMax { scale: 0.125 },
        Op::Norm { eps: 1e-5 },
        Op::RmsNorm { eps: 1e-6 },
        Op::MulMat,
        Op::GetRows,
        Op::Cpy,
        Op::SetRows,
        Op::FlashAttn { scale: 0.125, precision: Precision::Full },
        Op::FlashAttn { scale: 0.25, precision: Precision::Reduced },
        Op::Cont,
        Op::Concat { dim: 2 },
        Op::Rope(RopeParams { mode: RopeMode::Neox, n_dims: 6, freq_base: 10000.0, freq_scale: 0.5 }),
        Op::Rope(RopeParams { mode: RopeMode::Normal, n_dims: 2, freq_base: 500.0, freq_scale: 1.0 }),
        Op::DiagMaskInf { n_past: 3 },
        Op::Im2Col(Im2ColParams { s0: 1, s1: 2, p0: 3, p1: 4, d0: 5, d1: 6, is_2d: true }),
        Op::Im2Col(Im2ColParams { s0: 2, s1: 1, p0: 0, p1: 0, d0: 1, d1: 1, is_2d: false }),
        Op::Pool2d(Pool2dParams { kind: PoolKind::Avg, k0: 3, k1: 2, s0: 1, s1: 2, p0: 1, p1: 0 }),
        Op::Pool2d(Pool2dParams { kind: PoolKind::Max, k0: 2, k1: 2, s0: 2, s1: 2, p0: 0, p1: 0 }),
        Op::View,
        Op::Reshape,
        Op::Permute([2, 0, 1, 3]),
        Op::Transpose,
    ];
    ops.extend([BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div].map(Op::Binary));
    ops.extend(UnaryOp::ALL.map(Op::Unary));
    ops
}

#[test]
fn ops_and_types_round_trip() {
    for op in all_ops() {
        let (id, params) = encode_op(op);
        assert_eq!(decode_op(id, &params).unwrap(), op, "{op:?}");
    }
    for d in DType::ALL {
        assert_eq!(dtype_from_id(dtype_id(d)).unwrap(), d);
    }
    assert!(dtype_from_id(4).unwrap_err().to_string().contains("unknown type id 4"));
    assert!(decode_op(99, &[0; 8]).unwrap_err().to_string().contains("unknown op id 99"));
    assert!(decode_op(1, &[4, 0, 0, 0, 0, 0, 0, 0]).is_err(), "binary op 4 does not exist");
    assert!(decode_op(2, &[u64::MAX, 0, 0, 0, 0, 0, 0, 0]).is_err(), "not f32 bits");
    let unknown_precision = decode_op(24, &[u64::from(0.5f32.to_bits()), 2, 0, 0, 0, 0, 0, 0]).unwrap_err();
    assert!(unknown_precision.to_string().contains("unknown precision 2"), "{unknown_precision}");
}

#[test]
fn error_messages_are_cut_on_char_boundaries_and_kept_on_one_line() {
    let mut e = AbiError::new();
    e.set(STATUS_ERROR, "two\nlines");
    assert_eq!(e.message(), "two lines");
    let long: String = "é".repeat(ERROR_MESSAGE_CAP);
    e.set(STATUS_ERROR, &long);
    assert_eq!(e.message().len(), ERROR_MESSAGE_CAP);
    assert!(e.message().chars().all(|c| c == 'é'));
}

/// A graph with views, a permutation, a matrix product and a copy into a view, bound to host
/// memory.
fn sample_graph() -> (Graph, Vec<TensorId>) {
    let mut g = Graph::new();
    let w = g.new_tensor(DType::Q8_0, &[64, 8]).unwrap();
    let x = g.new_tensor(DType::F32, &[64, 3]).unwrap();
    g.set_name(x, "x").unwrap();
    g.set_input(x).unwrap();
    let y = g.mul_mat(w, x).unwrap();
    let p = g.permute(y, [1, 0, 2, 3]).unwrap();
    let c = g.cont(p).unwrap();
    let big = g.new_tensor(DType::F16, &[48]).unwrap();
    let window = g.view_1d(big, 24, 16).unwrap();
    let out = g.cpy(c, window).unwrap();
    g.set_output(out).unwrap();
    g.build_forward(out).unwrap();
    tessera_core::allocator::alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    let nodes = g.nodes().to_vec();
    (g, nodes)
}

fn host_ref(b: &Arc<dyn Buffer>) -> Result<AbiBufferRef> {
    Ok(AbiBufferRef {
        size: core::mem::size_of::<AbiBufferRef>(),
        own: core::ptr::null_mut(),
        host_base: b.host_ptr_mut().unwrap(),
        bytes: b.size(),
        writable: true,
        name: AbiStr::new(b.buffer_type().name()),
    })
}

fn resolve_host(r: &AbiBufferRef) -> Result<Arc<dyn Buffer>> {
    let base = core::ptr::NonNull::new(r.host_base).unwrap();
    // SAFETY: the test's buffers outlive the decoded graph.
    Ok(Arc::new(unsafe { HostBuffer::from_raw(base, r.bytes, r.writable, Box::new(())) }))
}

#[test]
fn graphs_round_trip_through_descriptors() {
    let (g, nodes) = sample_graph();
    let enc = encode_graph(&g, &nodes, Some(&mut host_ref)).unwrap();
    let abi = enc.as_abi();
    // SAFETY: `abi` points into `enc`, alive for the call.
    let back = unsafe { decode_graph(&abi, Some(&mut resolve_host)) }.unwrap();
    assert_eq!(back.nodes().len(), nodes.len());
    for (&orig, &new) in nodes.iter().zip(back.nodes()) {
        let (a, b) = (g.tensor(orig).unwrap(), back.tensor(new).unwrap());
        assert_eq!((a.dtype(), a.ne(), a.nb(), a.op()), (b.dtype(), b.ne(), b.nb(), b.op()));
        assert_eq!(a.view_offset(), b.view_offset());
        assert_eq!(a.srcs().count(), b.srcs().count());
        assert_eq!(a.name(), b.name());
        let (da, db) = (g.data(orig).unwrap(), back.data(new).unwrap());
        assert_eq!(
            da.buffer.host_ptr().map(|p| p as usize + da.offset),
            db.buffer.host_ptr().map(|p| p as usize + db.offset)
        );
    }
    let x = back.tensors().iter().find(|t| t.name() == "x").unwrap();
    assert!(x.flags().contains(tessera_core::tensor::TensorFlags::INPUT));
    // Only what the nodes touch is sent: the arena's unrelated tensors are not.
    let mut g2 = g.clone();
    let lonely = g2.new_tensor(DType::F32, &[1000]).unwrap();
    let _ = lonely;
    assert_eq!(encode_graph(&g2, &nodes[..1], None).unwrap().tensors().len(), 3);
}

/// Encodes the sample graph, lets `tamper` change the descriptors, and decodes them.
fn decode_tampered(tamper: impl FnOnce(&mut Vec<AbiTensor>, &mut Vec<u32>)) -> Error {
    let (g, nodes) = sample_graph();
    let enc = encode_graph(&g, &nodes, Some(&mut host_ref)).unwrap();
    let abi = enc.as_abi();
    // SAFETY: the arrays are valid for their lengths.
    let mut tensors = unsafe { core::slice::from_raw_parts(abi.tensors, abi.n_tensors) }.to_vec();
    // SAFETY: as above.
    let mut node_list = unsafe { core::slice::from_raw_parts(abi.nodes, abi.n_nodes) }.to_vec();
    tamper(&mut tensors, &mut node_list);
    let bad = AbiGraph {
        tensors: tensors.as_ptr(),
        n_tensors: tensors.len(),
        nodes: node_list.as_ptr(),
        n_nodes: node_list.len(),
        ..abi
    };
    // SAFETY: every array lives for the call.
    unsafe { decode_graph(&bad, Some(&mut resolve_host)) }.err().expect("tampered descriptors must be refused")
}

fn position(t: &[AbiTensor], op: Op) -> usize {
    let (id, _) = encode_op(op);
    t.iter().position(|d| d.op == id).unwrap()
}

#[test]
fn malformed_descriptors_are_refused_with_reasons() {
    let e = decode_tampered(|t, _| t[0].dtype = 5);
    assert!(e.to_string().contains("unknown type id 5"), "{e}");
    let e = decode_tampered(|t, _| t[0].op = 77);
    assert!(e.to_string().contains("unknown op id 77"), "{e}");
    let e = decode_tampered(|t, _| {
        let n = t.len() as u32;
        t[0].src[0] = n + 3;
    });
    assert!(e.to_string().contains("is not another of the"), "{e}");
    let e = decode_tampered(|t, _| t[0].src[0] = 0);
    assert!(e.to_string().contains("is not another of the"), "{e}");
    let e = decode_tampered(|t, n| n.push(t.len() as u32));
    assert!(e.to_string().contains("node index"), "{e}");
    // A view reaching past its source.
    let e = decode_tampered(|t, _| {
        let v = position(t, Op::View);
        t[v].view_offset = 1 << 20;
    });
    assert!(matches!(e, Error::ViewOutOfBounds { .. }), "{e}");
    // Memory past the end of its buffer.
    let e = decode_tampered(|t, _| {
        let i = t.iter().position(|d| d.buffer != NO_INDEX).unwrap();
        t[i].data_offset = 1 << 30;
    });
    assert!(matches!(e, Error::BufferRange { .. }), "{e}");
    // A node whose shape its sources do not make.
    let e = decode_tampered(|t, _| {
        let m = position(t, Op::MulMat);
        t[m].ne = [8, 4, 1, 1];
        t[m].nb = [4, 32, 128, 128];
    });
    assert!(e.to_string().contains("but its sources make it f32 [8, 3, 1, 1]"), "{e}");
    // A quantized tensor with strided blocks.
    let e = decode_tampered(|t, _| {
        let q = t.iter().position(|d| d.dtype == dtype_id(DType::Q8_0)).unwrap();
        t[q].nb[0] = 17;
    });
    assert!(e.to_string().contains("nb[0] = 34"), "{e}");
    // Strides that overflow.
    let e = decode_tampered(|t, _| t[0].nb[1] = usize::MAX / 2);
    assert!(matches!(e, Error::Overflow { .. } | Error::ViewOutOfBounds { .. } | Error::BufferRange { .. }), "{e}");
    // A struct older (smaller) than this build knows.
    let (g, nodes) = sample_graph();
    let enc = encode_graph(&g, &nodes, None).unwrap();
    let old = AbiGraph { size: 8, ..enc.as_abi() };
    // SAFETY: valid arrays.
    let e = unsafe { decode_graph(&old, None) }.err().unwrap();
    assert!(e.to_string().contains("graph descriptor: entries of 8 bytes, this build reads"), "{e}");
    // Tensor descriptors shorter than this build's are refused; longer ones (a newer host)
    // are read up to the fields this build knows.
    let mut short = enc.tensors().to_vec();
    short[0].size = 16;
    let old = AbiGraph { tensors: short.as_ptr(), ..enc.as_abi() };
    // SAFETY: valid arrays.
    let e = unsafe { decode_graph(&old, None) }.err().unwrap();
    assert!(e.to_string().contains("tensors: entries of 16 bytes"), "{e}");
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct NewerTensor {
        known: AbiTensor,
        extra: [u64; 3],
    }
    let newer: Vec<NewerTensor> = enc
        .tensors()
        .iter()
        .map(|t| NewerTensor { known: AbiTensor { size: core::mem::size_of::<NewerTensor>(), ..*t }, extra: [7; 3] })
        .collect();
    let g2 = AbiGraph { tensors: newer.as_ptr().cast(), ..enc.as_abi() };
    // SAFETY: every entry is as long as it says.
    let back = unsafe { decode_graph(&g2, None) }.unwrap();
    assert_eq!(back.nodes().len(), nodes.len());
    let null = AbiGraph { tensors: core::ptr::null(), ..enc.as_abi() };
    // SAFETY: a null array is refused before it is read.
    let e = unsafe { decode_graph(&null, None) }.err().unwrap();
    assert!(e.to_string().contains("null or misaligned"), "{e}");
}

// ---- a small family exported through the tables -------------------------------------------

/// A device whose backend computes CONT of contiguous f32 tensors and panics on NEG.
struct TestDevice;
struct TestReg;
static TEST_DEVICE: TestDevice = TestDevice;
static TEST_REG: TestReg = TestReg;

impl BackendReg for TestReg {
    fn name(&self) -> &str {
        "TEST"
    }
    fn device_count(&self) -> usize {
        1
    }
    fn device(&self, index: usize) -> Option<&'static dyn Device> {
        (index == 0).then_some(&TEST_DEVICE as &'static dyn Device)
    }
}

impl Device for TestDevice {
    fn name(&self) -> &str {
        "TEST0"
    }
    fn description(&self) -> &str {
        "a test device"
    }
    fn memory(&self) -> MemoryInfo {
        MemoryInfo { free: 1, total: 2 }
    }
    fn device_type(&self) -> DeviceType {
        DeviceType::Accel
    }
    fn caps(&self) -> DeviceCaps {
        DeviceCaps { buffer_from_host_ptr: true, ..DeviceCaps::default() }
    }
    fn pci_bus_id(&self) -> Option<&str> {
        Some("0000:01:00.0")
    }
    fn reg(&self) -> &'static dyn BackendReg {
        &TEST_REG
    }
    fn supports_op(&self, graph: &Graph, node: TensorId) -> bool {
        graph.tensor(node).is_ok_and(|t| matches!(t.op(), Op::Cont | Op::Unary(UnaryOp::Neg)))
    }
    fn supports_buffer_type(&self, buffer_type: &dyn BufferType) -> bool {
        buffer_type.is_host()
    }
    fn buffer_type(&self) -> &'static dyn BufferType {
        &HOST_BUFFER_TYPE
    }
    unsafe fn buffer_from_host_ptr(
        &'static self,
        ptr: core::ptr::NonNull<u8>,
        size: usize,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Result<Arc<dyn Buffer>> {
        // SAFETY: the caller keeps the memory valid and unwritten while `owner` lives.
        Ok(Arc::new(unsafe { HostBuffer::from_raw(ptr, size, false, owner) }))
    }
    fn init_backend(&'static self) -> Result<Box<dyn Backend>> {
        Ok(Box::new(TestBackend))
    }
    fn new_timing_event(&self) -> Result<Option<Box<dyn Event>>> {
        static CLOCK_US: AtomicU64 = AtomicU64::new(0);
        Ok(Some(Box::new(StampEvent { us: CLOCK_US.fetch_add(1500, Ordering::Relaxed) })))
    }
}

/// A timing event of the test device: a stamp of a clock that moves 1.5 ms per event.
struct StampEvent {
    us: u64,
}

impl Event for StampEvent {
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn elapsed_since(&self, start: &dyn Event) -> Result<Option<Duration>> {
        let Some(start) = start.as_any().downcast_ref::<StampEvent>() else { return Ok(None) };
        Ok(self.us.checked_sub(start.us).map(Duration::from_micros))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct TestBackend;

impl Backend for TestBackend {
    fn name(&self) -> &str {
        "TEST0"
    }
    fn device(&self) -> &'static dyn Device {
        &TEST_DEVICE
    }
    fn compute(&mut self, graph: &Graph, nodes: Range<usize>) -> Result<()> {
        for &id in &graph.nodes()[nodes] {
            let t = graph.tensor(id)?;
            match t.op() {
                Op::Cont => {
                    let values = graph.get_f32(t.src(0).unwrap())?;
                    graph.set_f32(id, &values)?;
                }
                Op::Unary(UnaryOp::Neg) => panic!("NEG is not implemented"),
                op => {
                    return Err(Error::Unsupported { backend: "TEST0".into(), op: op.name(), tensor: graph.label(id) })
                }
            }
        }
        Ok(())
    }
    /// Every node alone, the whole split, and a run past its end (the host drops that one).
    fn fused_runs(&self, split: &tessera_core::SplitRef<'_>, run: &mut dyn FnMut(Range<usize>)) {
        for i in split.nodes.clone() {
            run(i..i + 1);
        }
        run(split.nodes.clone());
        run(split.nodes.start..split.nodes.end + 1);
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

struct TestExport;

impl Exporter for TestExport {
    fn reg() -> &'static dyn BackendReg {
        &TEST_REG
    }
    fn catch<R>(f: impl FnOnce() -> R) -> core::result::Result<R, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_message(&*p))
    }
}

#[test]
fn timing_events_measure_across_the_tables() {
    let reg = loopback::<TestExport>("test").unwrap();
    let dev = reg.device(0).unwrap();
    assert!(dev.new_event().unwrap().is_none(), "no plain events on this device");
    let (start, end) = (dev.new_timing_event().unwrap().unwrap(), dev.new_timing_event().unwrap().unwrap());
    assert_eq!(end.elapsed_since(&*start).unwrap(), Some(Duration::from_micros(1500)));
    assert_eq!(start.elapsed_since(&*end).unwrap(), None, "the device cannot time backwards");
    let foreign = StampEvent { us: 0 };
    assert_eq!(end.elapsed_since(&foreign).unwrap(), None, "an event of another family");
}

#[test]
fn a_family_round_trips_through_the_tables() {
    let reg = loopback::<TestExport>("test").unwrap();
    assert_eq!((reg.name(), reg.device_count()), ("TEST", 1));
    let dev = reg.device(0).unwrap();
    assert_eq!((dev.name(), dev.description()), ("TEST0", "a test device"));
    assert_eq!(dev.memory(), MemoryInfo { free: 1, total: 2 });
    assert_eq!(dev.device_type(), DeviceType::Accel);
    assert_eq!(dev.pci_bus_id(), Some("0000:01:00.0"));
    assert!(dev.caps().buffer_from_host_ptr && !dev.caps().events);
    assert_eq!(dev.reg().name(), "TEST");
    assert!(dev.supports_buffer_type(&HOST_BUFFER_TYPE));
    assert!(dev.supports_buffer_type(dev.buffer_type()));
    assert!(dev.buffer_type().is_host());
    assert_eq!(dev.buffer_type().name(), "CPU");

    // A graph in a buffer the plugin allocated (its own handle crosses) and one in host
    // memory of the host (its address crosses).
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4, 2]).unwrap();
    let t = g.transpose(a).unwrap();
    let c = g.cont(t).unwrap();
    let n = g.neg(c).unwrap();
    let s = g.sqr(c).unwrap();
    g.build_forward(n).unwrap();
    g.build_forward(s).unwrap();
    assert!(dev.supports_op(&g, c) && dev.supports_op(&g, n) && !dev.supports_op(&g, s));
    for bt in [dev.buffer_type(), &HOST_BUFFER_TYPE as &'static dyn BufferType] {
        let mut g = g.clone();
        tessera_core::allocator::alloc_graph_tensors(&mut g, bt).unwrap();
        g.set_f32(a, &[1., 2., 3., 4., 5., 6., 7., 8.]).unwrap();
        let mut backend = dev.init_backend().unwrap();
        let ci = g.nodes().iter().position(|x| *x == c).unwrap();
        backend.compute(&g, ci..ci + 1).unwrap();
        assert_eq!(g.get_f32(c).unwrap(), [1., 5., 2., 6., 3., 7., 4., 8.]);
        // An error comes back as an error, a panic as a plugin error; neither unwinds here.
        let si = g.nodes().iter().position(|x| *x == s).unwrap();
        let e = backend.compute(&g, si..si + 1).unwrap_err();
        assert!(matches!(&e, Error::Backend { message, .. } if message.contains("does not support SQR")), "{e}");
        let ni = g.nodes().iter().position(|x| *x == n).unwrap();
        let e = backend.compute(&g, ni..ni + 1).unwrap_err();
        assert!(
            matches!(&e, Error::Plugin { message, .. } if message.contains("panicked in compute: NEG is not implemented")),
            "{e}"
        );
        assert!(backend.compute(&g, 0..99).is_err());
    }

    // Buffers: bytes through the tables, host pointer, ranges checked on the host side.
    let buf = dev.buffer_type().alloc_buffer(32).unwrap();
    buf.set_bytes(4, &[1, 2, 3]).unwrap();
    let mut out = [0u8; 5];
    buf.get_bytes(3, &mut out).unwrap();
    assert_eq!(out, [0, 1, 2, 3, 0]);
    // SAFETY: the buffer is host memory of 32 bytes.
    assert_eq!(unsafe { *buf.host_ptr().unwrap().add(5) }, 2);
    buf.fill(0, 2, 9).unwrap();
    assert!(matches!(buf.set_bytes(31, &[1, 2]), Err(Error::BufferRange { .. })));
    let other = HOST_BUFFER_TYPE.alloc_buffer(8).unwrap();
    other.set_bytes(0, &[7; 8]).unwrap();
    assert!(buf.copy_from(10, &*other, 0, 8).unwrap());
    buf.get_bytes(8, &mut out).unwrap();
    assert_eq!(out, [0, 0, 7, 7, 7]);

    // Unloading waits for every object to go.
    let mut backend = dev.init_backend().unwrap();
    assert_eq!(reg.live_objects(), 2);
    let e = reg.shutdown().unwrap_err();
    assert!(e.to_string().contains("still has 2 live"), "{e}");
    let data = TensorData { buffer: buf.clone(), offset: 0 };
    let bytes = [5u8; 4];
    // SAFETY: `bytes` outlives the synchronize below.
    unsafe { backend.set_tensor_async(&data, 0, bytes.as_ptr(), 4) }.unwrap();
    backend.synchronize().unwrap();
    assert_eq!(buf.get_bytes(0, &mut out[..4]).map(|()| out[..4].to_vec()).unwrap(), [5; 4]);
    drop((backend, buf, data));
    reg.shutdown().unwrap();
    assert!(!reg.is_loaded());
    assert_eq!(dev.memory(), MemoryInfo::default());
    assert!(!dev.supports_op(&g, c));
    let e = dev.init_backend().err().unwrap();
    assert!(e.to_string().contains("has been unloaded"), "{e}");
    assert!(dev.buffer_type().alloc_buffer(8).is_err());
    assert_eq!(dev.name(), "TEST0", "copied data still answers");
}

/// A reg table as a plugin built for another (or an older) ABI would hand out.
fn table(size: usize, abi_version: u32) -> AbiReg {
    // SAFETY: a table exported by this crate.
    let mut t = unsafe { *crate::export::export_reg::<TestExport>().0 };
    t.size = size;
    t.abi_version = abi_version;
    t
}

#[test]
fn foreign_versions_and_short_tables_are_refused() {
    let full = core::mem::size_of::<AbiReg>();
    let t = table(full, ABI_VERSION + 1);
    // SAFETY: `t` is a valid table for its size.
    let e = unsafe { wrap_reg(&t, "libtessera-x.so") }.err().unwrap();
    assert_eq!(
        e.to_string(),
        alloc::format!(
            "plugin libtessera-x.so: its reg table speaks plugin ABI {}, this host speaks {ABI_VERSION}; rebuild the plugin against this tessera",
            ABI_VERSION + 1
        )
    );
    let t = table(core::mem::offset_of!(AbiReg, device), ABI_VERSION);
    // SAFETY: as above.
    let e = unsafe { wrap_reg(&t, "old.so") }.err().unwrap();
    assert!(e.to_string().contains("lacks the required function `device`"), "{e}");
    // Optional trailing functions may be missing: the table loads without features.
    let t = table(core::mem::offset_of!(AbiReg, feature), ABI_VERSION);
    // SAFETY: as above.
    let reg = unsafe { wrap_reg(&t, "older.so") }.unwrap();
    assert!(reg.features().is_empty());
    // SAFETY: a null table is refused before it is read.
    let e = unsafe { wrap_reg(core::ptr::null(), "null.so") }.err().unwrap();
    assert!(e.to_string().contains("returned no reg table"), "{e}");
}

#[test]
fn an_init_for_another_host_abi_is_refused_by_the_plugin() {
    let host = AbiHostInfo { size: core::mem::size_of::<AbiHostInfo>(), abi_version: 9 };
    let mut err = AbiError::new();
    // SAFETY: valid pointers.
    let reg = unsafe { crate::export::init::<TestExport>(&host, &mut err, crate::export::export_reg::<TestExport>) };
    assert!(reg.is_null());
    assert_eq!(err.code, STATUS_UNSUPPORTED);
    assert_eq!(err.message(), alloc::format!("the host speaks plugin ABI 9, this plugin {ABI_VERSION}"));
    let mut err = AbiError::new();
    // SAFETY: valid pointers.
    let reg = unsafe { crate::export::init::<TestExport>(&host, &mut err, || panic!("boom")) };
    assert!(reg.is_null());
    let host = AbiHostInfo { abi_version: ABI_VERSION, ..host };
    // SAFETY: valid pointers.
    let reg = unsafe { crate::export::init::<TestExport>(&host, &mut err, || panic!("boom")) };
    assert!(reg.is_null());
    assert_eq!((err.code, err.message()), (STATUS_PANIC, "panicked in tessera_backend_init: boom".to_string()));
}

/// A graph `c = cont(transpose(a))` of 4x2 f32 in `bt` memory, with `a` set.
fn cont_graph(bt: &'static dyn BufferType, values: &[f32]) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4, 2]).unwrap();
    let t = g.transpose(a).unwrap();
    let c = g.cont(t).unwrap();
    g.set_output(c).unwrap();
    g.build_forward(c).unwrap();
    tessera_core::allocator::alloc_graph_tensors(&mut g, bt).unwrap();
    g.set_f32(a, values).unwrap();
    (g, a, c)
}

#[test]
fn programs_are_prepared_once_and_replayed_through_the_tables() {
    use crate::PluginProgram;
    use tessera_core::SplitRef;

    let reg = loopback::<TestExport>("test").unwrap();
    let dev = reg.device(0).unwrap();
    let mut backend = dev.init_backend().unwrap();
    for (bt, own) in [(dev.buffer_type(), true), (&HOST_BUFFER_TYPE as &'static dyn BufferType, false)] {
        let (g, a, c) = cont_graph(bt, &[1., 2., 3., 4., 5., 6., 7., 8.]);
        let consumers = vec![1u32; g.tensors().len()];
        let ci = g.nodes().iter().position(|n| *n == c).unwrap();
        let split = SplitRef { graph: &g, nodes: ci..ci + 1, consumers: &consumers, layout: 1 };
        let mut program = backend.prepare(&split).unwrap();
        assert!(program.as_any_mut().downcast_mut::<PluginProgram>().is_some(), "the plugin's own program");
        assert_eq!(reg.live_objects(), 2 + usize::from(own), "backend, program (and its buffer)");
        backend.run(&mut *program, &g).unwrap();
        assert_eq!(g.get_f32(c).unwrap(), [1., 5., 2., 6., 3., 7., 4., 8.]);
        // The replay reads the values of now: the kept graph is the same memory.
        g.set_f32(a, &[8., 7., 6., 5., 4., 3., 2., 1.]).unwrap();
        backend.run(&mut *program, &g).unwrap();
        assert_eq!(g.get_f32(c).unwrap(), [8., 4., 7., 3., 6., 2., 5., 1.]);

        // The tensors move (a new layout): the program is updated to the new memory.
        let (g2, a2, c2) = cont_graph(bt, &[0.5; 8]);
        g2.set_f32(a2, &[1., 1., 2., 2., 3., 3., 4., 4.]).unwrap();
        let split2 = SplitRef { graph: &g2, layout: 2, ..split };
        backend.update(&mut program, &split2).unwrap();
        backend.run(&mut *program, &g2).unwrap();
        assert_eq!(g2.get_f32(c2).unwrap(), [1., 3., 1., 3., 2., 4., 2., 4.]);
        assert_eq!(g.get_f32(c).unwrap(), [8., 4., 7., 3., 6., 2., 5., 1.], "the old memory is left alone");

        // Programs run only on the backend that prepared them, over a graph with their nodes.
        let mut other = dev.init_backend().unwrap();
        let e = other.run(&mut *program, &g2).unwrap_err();
        assert!(e.to_string().contains("prepared by another backend"), "{e}");
        let e = backend.run(&mut *program, &Graph::new()).unwrap_err();
        assert!(e.to_string().contains("prepare it for this graph"), "{e}");
        // A program outlives its backend, and keeps the plugin loaded.
        drop(other);
        let e = reg.shutdown().unwrap_err();
        assert!(e.to_string().contains("program(s)"), "{e}");
        drop(program);
    }
    drop(backend);
    assert_eq!(reg.live_objects(), 0);
    reg.shutdown().unwrap();
}

#[test]
fn buffer_bases_cross_exactly_and_host_memory_is_used_in_place() {
    use tessera_core::BufferBase;

    let reg = loopback::<TestExport>("test").unwrap();
    let dev = reg.device(0).unwrap();
    let buf = dev.buffer_type().alloc_buffer(16).unwrap();
    assert!(matches!(buf.base(), BufferBase::Host(p) if !p.is_null()), "{:?}", buf.base());

    // Caller memory, wrapped in place and read-only; the owner lives as long as the buffer.
    let memory: Box<[u8]> = (0..32u8).collect();
    let ptr = core::ptr::NonNull::new(memory.as_ptr().cast_mut()).unwrap();
    // SAFETY: `memory` is moved into the owner and not written while the buffer lives.
    let imported = unsafe { dev.buffer_from_host_ptr(ptr, 32, Box::new(memory)) }.unwrap();
    assert_eq!(imported.base(), BufferBase::HostReadOnly(ptr.as_ptr()));
    assert_eq!(imported.size(), 32);
    let mut out = [0u8; 4];
    imported.get_bytes(10, &mut out).unwrap();
    assert_eq!(out, [10, 11, 12, 13]);
    assert!(imported.set_bytes(0, &[1]).is_err(), "read-only host memory");
    assert_eq!(reg.live_objects(), 2);
    drop((buf, imported));
    reg.shutdown().unwrap();
}

#[test]
fn fused_runs_cross_the_tables_in_the_hosts_node_indices() {
    use tessera_core::SplitRef;

    let reg = loopback::<TestExport>("test").unwrap();
    let backend = reg.device(0).unwrap().init_backend().unwrap();
    // No memory yet: the allocator asks for runs before it places anything.
    let mut g = Graph::new();
    let a = g.new_tensor(DType::F32, &[4, 2]).unwrap();
    let t = g.transpose(a).unwrap();
    let c = g.cont(t).unwrap();
    let n = g.neg(c).unwrap();
    let d = g.cont(n).unwrap();
    g.build_forward(d).unwrap();
    let count = g.nodes().len();
    assert!(count >= 3);
    let consumers = vec![1u32; g.tensors().len()];
    let split = SplitRef { graph: &g, nodes: 1..count, consumers: &consumers, layout: 0 };
    let mut runs = Vec::new();
    backend.fused_runs(&split, &mut |r| runs.push(r));
    // More runs than nodes: the host asked again with room for them; the one past the split
    // was dropped.
    let mut want: Vec<Range<usize>> = (1..count).map(|i| i..i + 1).collect();
    want.push(1..count);
    assert_eq!(runs, want);
    drop(backend);
    reg.shutdown().unwrap();
}
