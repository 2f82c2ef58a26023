//! GGUF files: the writer's output reads back exactly, files written by Python's reference
//! `gguf` package read correctly, malformed files are errors (never panics), and tensors bound
//! from a file compute in place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use tessera::allocator::alloc_graph_tensors;
use tessera::gguf::{bind_static, bind_tensors, ggml_type_id, Gguf, Value, ValueType, DEFAULT_ALIGNMENT};
use tessera::host_buffer::HOST_BUFFER_TYPE;
use tessera::runtime::gguf_writer::{GgufWriter, MetaArray, MetaValue};
use tessera::{convert, Backend, Buffer, BufferType, BufferUsage, DType, Error, Graph};

/// The reader's view of a value as the writer's owned value (checking the array's length and
/// element types on the way), so whole files compare at once.
fn to_meta(value: Value<'_>) -> MetaValue {
    if let Value::Array(a) = value {
        let mut out = MetaArray::new(a.elem_type());
        for item in a.iter() {
            out.push(to_meta(item)).unwrap();
        }
        assert_eq!(out.items().len(), a.len());
        assert_eq!(MetaValue::Array(out.clone()), MetaValue::from(value));
        return MetaValue::Array(out);
    }
    MetaValue::from(value)
}

fn every_value_type() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "roundtrip")
        .add_u8("s.u8", u8::MAX)
        .add_i8("s.i8", i8::MIN)
        .add_u16("s.u16", 0xbeef)
        .add_i16("s.i16", -12345)
        .add_u32("s.u32", u32::MAX)
        .add_i32("s.i32", i32::MIN)
        .add_f32("s.f32", -0.1)
        .add_bool("s.true", true)
        .add_bool("s.false", false)
        .add_u64("s.u64", u64::MAX)
        .add_i64("s.i64", i64::MIN)
        .add_f64("s.f64", std::f64::consts::E)
        .add_string("s.string", "ünïcödé ✓ and \"quotes\"")
        .add_string("s.empty", "")
        .add_array("a.u8", &[0u8, 1, 255])
        .add_array("a.i8", &[-128i8, 0, 127])
        .add_array("a.u16", &[1u16, 65535])
        .add_array("a.i16", &[-32768i16, 32767])
        .add_array("a.u32", &[7u32, 8, 9, u32::MAX])
        .add_array("a.i32", &[-1i32, 0, 1])
        .add_array("a.f32", &[0.5f32, f32::MIN_POSITIVE, f32::INFINITY])
        .add_array("a.bool", &[true, false, false, true])
        .add_array("a.u64", &[u64::MAX, 0])
        .add_array("a.i64", &[i64::MIN, i64::MAX])
        .add_array("a.f64", &[1e300f64, -1e-300])
        .add_array("a.string", &["<s>", "", "wörd"])
        .add_array::<u32>("a.empty", &[])
        .add_array("a.nested", &[MetaArray::of(&[1u32, 2]), MetaArray::of::<u32>(&[]), MetaArray::of(&["x", "yz"])])
        .add_array("a.deep", &[MetaArray::of(&[MetaArray::of(&[MetaArray::of(&[true])])])]);
    w
}

#[test]
fn every_value_type_round_trips() {
    let w = every_value_type();
    let bytes = w.to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version(), 3);
    let read: Vec<(String, MetaValue)> = g.metadata().iter().map(|kv| (kv.key.to_owned(), to_meta(kv.value))).collect();
    assert_eq!(read, w.metadata());

    // The typed getters and lazy arrays.
    assert_eq!(g.get_u8("s.u8").unwrap(), u8::MAX);
    assert_eq!(g.get_i8("s.i8").unwrap(), i8::MIN);
    assert_eq!(g.get_u16("s.u16").unwrap(), 0xbeef);
    assert_eq!(g.get_i16("s.i16").unwrap(), -12345);
    assert_eq!(g.get_u32("s.u32").unwrap(), u32::MAX);
    assert_eq!(g.get_i32("s.i32").unwrap(), i32::MIN);
    assert_eq!(g.get_f32("s.f32").unwrap(), -0.1);
    assert!(g.get_bool("s.true").unwrap() && !g.get_bool("s.false").unwrap());
    assert_eq!(g.get_u64("s.u64").unwrap(), u64::MAX);
    assert_eq!(g.get_i64("s.i64").unwrap(), i64::MIN);
    assert_eq!(g.get_f64("s.f64").unwrap(), std::f64::consts::E);
    assert_eq!(g.get_str("s.string").unwrap(), "ünïcödé ✓ and \"quotes\"");
    assert_eq!(g.get_str("s.empty").unwrap(), "");
    let strings = g.get_array("a.string").unwrap();
    assert_eq!(strings.strings().unwrap().collect::<Vec<_>>(), ["<s>", "", "wörd"]);
    let u32s = g.get_array("a.u32").unwrap();
    assert_eq!((u32s.elem_type(), u32s.len(), u32s.get(3)), (ValueType::U32, 4, Some(Value::U32(u32::MAX))));
    assert!(g.get_array("a.empty").unwrap().is_empty());
    let nested = g.get_array("a.nested").unwrap();
    let inner: Vec<(ValueType, usize)> =
        nested.iter().map(|v| v.as_array().unwrap()).map(|a| (a.elem_type(), a.len())).collect();
    assert_eq!(inner, [(ValueType::U32, 2), (ValueType::U32, 0), (ValueType::String, 2)]);
    let mut deep = g.get("a.deep").unwrap();
    for _ in 0..3 {
        deep = deep.as_array().unwrap().get(0).unwrap();
    }
    assert_eq!(deep.as_array().unwrap().get(0), Some(Value::Bool(true)));

    let err = g.get_bool("s.u8").unwrap_err();
    assert_eq!(err.to_string(), "gguf: metadata entry 's.u8' has type u8, expected bool");
    assert!(matches!(err, Error::Gguf { ref field, .. } if field == "s.u8"));
}

/// Shape and f32 source values for a tensor of every type.
fn tensors_of_every_type() -> Vec<(String, DType, Vec<usize>, Vec<f32>)> {
    DType::ALL
        .iter()
        .enumerate()
        .map(|(k, &dtype)| {
            // Two blocks per row of 32-value types, one of the K-quants' 256.
            let ne = if dtype.is_quantized() { vec![dtype.block_len().max(64), 3] } else { vec![5, 3, 2] };
            let n: usize = ne.iter().product();
            let values = (0..n)
                .map(|i| {
                    let x = ((i * 7 + k * 3) % 23) as f32 - 11.0;
                    if dtype == DType::I32 {
                        x * 1000.0
                    } else {
                        x * 0.125
                    }
                })
                .collect();
            (format!("blk.{k}.{}", dtype.name()), dtype, ne, values)
        })
        .collect()
}

fn writer_with_tensors(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "tensors").add_array("t.ids", &[1i32, 2, 3]);
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    for (name, dtype, ne, values) in tensors_of_every_type() {
        w.add_tensor_f32(&name, dtype, &ne, &values).unwrap();
    }
    w
}

#[test]
fn tensors_of_every_type_round_trip() {
    let bytes = writer_with_tensors(None).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.alignment(), DEFAULT_ALIGNMENT);
    assert_eq!(g.tensors().len(), DType::ALL.len());
    for (info, (name, dtype, ne, values)) in g.tensors().iter().zip(tensors_of_every_type()) {
        assert_eq!(info.name(), name);
        assert_eq!(info.dtype(), dtype);
        assert_eq!(info.n_dims(), ne.len());
        assert_eq!(&info.ne()[..ne.len()], &ne[..]);
        assert_eq!(info.offset() % DEFAULT_ALIGNMENT, 0);
        assert_eq!(info.file_offset(), g.data_offset() + info.offset());
        let expected = convert::to_bytes(dtype, &values).unwrap();
        assert_eq!(info.nbytes(), expected.len());
        assert_eq!(g.tensor_data(info), &expected[..], "{name}");
    }
}

#[test]
fn a_custom_alignment_places_every_tensor() {
    for alignment in [1u32, 8, 64, 256] {
        let bytes = writer_with_tensors(Some(alignment)).to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let a = alignment as usize;
        assert_eq!(g.alignment(), a);
        assert_eq!(g.get_u32("general.alignment").unwrap(), alignment);
        assert_eq!(g.data_offset() % a, 0);
        for info in g.tensors() {
            assert_eq!(info.file_offset() % a, 0, "{} at alignment {a}", info.name());
        }
        assert_eq!(bytes.len() % a, 0);
    }
}

#[test]
fn files_written_to_disk_read_back() {
    let w = writer_with_tensors(Some(64));
    let path = std::env::temp_dir().join(format!("tessera-gguf-test-{}.gguf", std::process::id()));
    w.write_to(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(bytes, w.to_bytes());
    assert_eq!(Gguf::parse(&bytes).unwrap().tensors().len(), DType::ALL.len());
}

#[test]
fn bound_tensors_read_back_through_the_graph() {
    let bytes: &'static [u8] = Box::leak(writer_with_tensors(None).to_bytes().into_boxed_slice());
    let mut graph = Graph::new();
    let (g, ids) = bind_static(&mut graph, bytes).unwrap();
    for (name, dtype, ne, values) in tensors_of_every_type() {
        let id = ids[&name];
        let t = graph.tensor(id).unwrap();
        assert_eq!((t.name(), t.dtype(), &t.ne()[..ne.len()]), (name.as_str(), dtype, &ne[..]));
        let data = graph.data(id).unwrap();
        assert_eq!(data.buffer.host_ptr(), Some(bytes.as_ptr()), "no copy");
        assert_eq!(data.buffer.usage(), BufferUsage::Weights);
        assert_eq!(data.offset, g.tensor(&name).unwrap().file_offset());
        let expected = convert::to_f32_vec(dtype, &convert::to_bytes(dtype, &values).unwrap());
        assert_eq!(graph.get_f32(id).unwrap(), expected, "{name}");
        if matches!(dtype, DType::F32 | DType::I32) {
            assert_eq!(expected, values, "{name} is exact");
        }
    }

    // The same through a buffer that holds a copy of the file.
    let file = Gguf::parse(bytes).unwrap();
    let buffer = HOST_BUFFER_TYPE.alloc_buffer(bytes.len()).unwrap();
    buffer.set_bytes(0, bytes).unwrap();
    let mut copy = Graph::new();
    let ids = bind_tensors(&mut copy, &file, &buffer).unwrap();
    assert_eq!(copy.get_i32(ids["blk.3.i32"]).unwrap()[..3], [-2000, 5000, -11000]);
}

#[test]
fn weights_bound_from_a_file_compute_in_place() {
    let mut w = GgufWriter::new();
    let weights: Vec<f32> = (0..64 * 2).map(|i| ((i % 13) as f32 - 6.0) * 0.25).collect();
    w.add_tensor_f32("w", DType::Q8_0, &[64, 2], &weights).unwrap();
    let bytes: &'static [u8] = Box::leak(w.to_bytes().into_boxed_slice());

    let mut g = Graph::new();
    let (_, ids) = bind_static(&mut g, bytes).unwrap();
    let x = g.new_tensor(DType::F32, &[64, 1]).unwrap();
    let y = g.mul_mat(ids["w"], x).unwrap();
    g.build_forward(y).unwrap();
    alloc_graph_tensors(&mut g, &HOST_BUFFER_TYPE).unwrap();
    let xs: Vec<f32> = (0..64).map(|i| (i as f32) / 64.0).collect();
    g.set_f32(x, &xs).unwrap();
    tessera::cpu::CpuBackend::new().compute_graph(&g).unwrap();

    let dequantized = g.get_f32(ids["w"]).unwrap();
    let got = g.get_f32(y).unwrap();
    for (row, out) in got.iter().enumerate() {
        let reference: f32 = dequantized[row * 64..][..64].iter().zip(&xs).map(|(a, b)| a * b).sum();
        // The fast CPU kernels quantize the activations to 8-bit blocks, as ggml does: about
        // 3e-3 relative error here (MUL_MAT's conformance threshold is an NMSE of 5e-4).
        assert!((out - reference).abs() <= 1e-2 * reference.abs().max(1.0), "row {row}: {out} vs {reference}");
    }
}

/// The fixture written by scripts/make_gguf_fixtures.py with Python's `gguf` package.
static PYTHON_FIXTURE: &[u8] = include_bytes!("data/gguf/python_writer.gguf");
static PYTHON_EXPECTED: &str = include_str!("data/gguf/python_writer.expected.txt");

fn floats(s: &str) -> Vec<f32> {
    s.split(' ').map(|v| v.parse::<f64>().unwrap() as f32).collect()
}

#[test]
fn files_from_pythons_gguf_package_read_correctly() {
    let g = Gguf::parse(PYTHON_FIXTURE).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 64);
    // The metadata METADATA in the script lists (after what GGUFWriter adds itself).
    assert_eq!(g.get_str("general.architecture").unwrap(), "tessera-fixture");
    assert_eq!(g.get_u32("general.alignment").unwrap(), 64);
    assert_eq!(g.get_str("general.name").unwrap(), "tessera gguf fixture");
    assert_eq!(g.get_u8("fixture.u8").unwrap(), 200);
    assert_eq!(g.get_i8("fixture.i8").unwrap(), -100);
    assert_eq!(g.get_u16("fixture.u16").unwrap(), 60000);
    assert_eq!(g.get_i16("fixture.i16").unwrap(), -30000);
    assert_eq!(g.get_u32("fixture.u32").unwrap(), 4_000_000_000);
    assert_eq!(g.get_i32("fixture.i32").unwrap(), -2_000_000_000);
    assert_eq!(g.get_f32("fixture.f32").unwrap(), 3.25);
    assert!(g.get_bool("fixture.bool").unwrap());
    assert_eq!(g.get_u64("fixture.u64").unwrap(), (1 << 63) + 5);
    assert_eq!(g.get_i64("fixture.i64").unwrap(), -(1 << 62) - 7);
    assert_eq!(g.get_f64("fixture.f64").unwrap(), -0.1);
    assert_eq!(g.get_str("fixture.string").unwrap(), "héllo, wörld ✓");
    let tokens = g.get_array("fixture.tokens").unwrap();
    assert_eq!(tokens.strings().unwrap().collect::<Vec<_>>(), ["<s>", "</s>", "héllo", ""]);
    let ints = g.get_array("fixture.i32s").unwrap();
    assert_eq!(ints.iter().map(|v| v.as_i32().unwrap()).collect::<Vec<_>>(), [1, -2, 3]);
    let f32s = g.get_array("fixture.f32s").unwrap();
    assert_eq!(f32s.iter().map(|v| v.as_f32().unwrap()).collect::<Vec<_>>(), [0.5, -1.25]);
    let bools = g.get_array("fixture.bools").unwrap();
    assert_eq!(bools.iter().map(|v| v.as_bool().unwrap()).collect::<Vec<_>>(), [true, false, true]);
    let u16s = g.get_array("fixture.u16s").unwrap();
    assert_eq!(u16s.iter().map(|v| v.as_u16().unwrap()).collect::<Vec<_>>(), [1, 2, 65535]);
    let nested = to_meta(g.get("fixture.nested").unwrap());
    let expected = MetaValue::Array(MetaArray::of(&[
        MetaArray::of(&[1i32, 2]),
        MetaArray::of(&[3i32]),
        MetaArray::of(&["x", "y"]),
    ]));
    assert_eq!(nested, expected);
    assert_eq!(g.metadata().len(), 21);

    // Tensors: shapes in ggml order, values as the script computed them.
    let mut graph = Graph::new();
    let (_, ids) = bind_static(&mut graph, PYTHON_FIXTURE).unwrap();
    let mut sources = BTreeMap::new();
    let mut seen = Vec::new();
    for line in PYTHON_EXPECTED.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields[..] {
            ["tensor", name, ty, ne, values] => {
                let info = g.tensor(name).unwrap();
                assert_eq!(info.dtype().name(), ty, "{name}");
                let ne: Vec<usize> = ne.split(',').map(|d| d.parse().unwrap()).collect();
                assert_eq!(&info.ne()[..ne.len()], &ne[..], "{name}");
                assert_eq!(info.n_dims(), ne.len(), "{name}");
                assert_eq!(info.file_offset() % 64, 0, "{name}");
                assert_eq!(graph.get_f32(ids[name]).unwrap(), floats(values), "{name}");
                seen.push(name);
            }
            ["source", name, values] => {
                sources.insert(name, floats(values));
            }
            _ => panic!("unexpected line in the sidecar: {line:?}"),
        }
    }
    assert_eq!(seen, g.tensors().iter().map(|t| t.name()).collect::<Vec<_>>());
    assert_eq!(seen.len(), 5);
    assert_eq!(graph.get_i32(ids["token_ids"]).unwrap(), [-2, -1, 0, 1, i32::MAX]);

    // gguf-py quantizes Q8_0 bit-exactly like ggml; tessera's quantizer must agree.
    let q = g.tensor("output.weight").unwrap();
    assert_eq!(q.dtype(), DType::Q8_0);
    let ours = convert::to_bytes(DType::Q8_0, &sources["output.weight"]).unwrap();
    assert_eq!(g.tensor_data(q), &ours[..]);
}

/// A file from the `gguf` package with a tensor of each of ggml's block types tessera reads
/// beyond q8_0 and q4_0 (scripts/make_kquant_fixture.py): every one loads, and its values are
/// the package's dequantization of its blocks, bit for bit.
#[test]
fn files_with_every_block_type_load_and_dequantize_as_the_gguf_package_does() {
    static FILE: &[u8] = include_bytes!("data/kquant/types.gguf");
    let values = |name: &str| -> Vec<f32> {
        let bytes = std::fs::read(format!("tests/data/kquant/{name}.f32")).unwrap();
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
    };
    let mut graph = Graph::new();
    let (g, ids) = bind_static(&mut graph, FILE).unwrap();
    let types =
        [DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K];
    assert_eq!(g.tensors().len(), types.len());
    for t in types {
        let info = g.tensor(t.name()).unwrap();
        assert_eq!(info.dtype(), t);
        assert_eq!(info.ne(), [4 * t.block_len(), 2, 1, 1], "{t}");
        let got: Vec<u32> = graph.get_f32(ids[t.name()]).unwrap().iter().map(|v| v.to_bits()).collect();
        let want: Vec<u32> = values(t.name()).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "{t}");
    }
}

/// A file with metadata, arrays and tensors for the malformed-input tests.
fn sample_file() -> Vec<u8> {
    let mut w = every_value_type();
    w.set_alignment(64).unwrap();
    for (name, dtype, ne, values) in tensors_of_every_type() {
        w.add_tensor_f32(&name, dtype, &ne, &values).unwrap();
    }
    w.to_bytes()
}

#[test]
fn every_truncation_is_an_error() {
    for bytes in [sample_file(), PYTHON_FIXTURE.to_vec()] {
        let whole = Gguf::parse(&bytes).unwrap();
        // Writers pad the last tensor's data to the alignment; like llama.cpp's loader, the
        // reader needs only the data itself, so cutting that padding changes nothing.
        let data_end = whole.tensors().iter().map(|t| t.file_offset() + t.nbytes()).max().unwrap();
        assert!(bytes.len() - data_end < whole.alignment());
        for n in 0..bytes.len() {
            match Gguf::parse(&bytes[..n]) {
                Err(e @ Error::Gguf { .. }) if n < data_end => assert!(e.to_string().starts_with("gguf: "), "{e}"),
                Err(e) => panic!("prefix of {n} of {} bytes: {e:?}", bytes.len()),
                Ok(_) if n < data_end => panic!("prefix of {n} of {} bytes parsed", bytes.len()),
                Ok(g) => assert_eq!(g.tensors(), whole.tensors(), "prefix of {n} bytes cuts only padding"),
            }
        }
    }
}

/// Checks what a parse that succeeded promises: every tensor's data lies inside the file.
fn check_invariants(bytes: &[u8], g: &Gguf<'_>) {
    assert!(g.alignment().is_power_of_two());
    for t in g.tensors() {
        assert!(t.file_offset() + t.nbytes() <= bytes.len());
        assert_eq!(g.tensor_data(t).len(), t.nbytes());
        assert_eq!(t.file_offset() % g.alignment(), 0);
    }
    for kv in g.metadata() {
        if let Value::Array(a) = kv.value {
            assert_eq!(a.iter().count(), a.len());
        }
    }
}

#[test]
fn single_byte_corruption_is_an_error_or_a_consistent_file() {
    let mut checked = 0;
    for original in [sample_file(), PYTHON_FIXTURE.to_vec()] {
        let data_offset = Gguf::parse(&original).unwrap().data_offset();
        // Every byte before the data: magic, version, counts, keys and their lengths, value
        // types, values, array element types and counts, names, dimensions, types, offsets.
        for at in 0..data_offset {
            for value in [0x00, 0xff, 0x7f, 0x80, original[at] ^ 0x01, original[at].wrapping_add(1)] {
                let mut bytes = original.clone();
                bytes[at] = value;
                if let Ok(g) = Gguf::parse(&bytes) {
                    check_invariants(&bytes, &g);
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

#[test]
fn corrupted_counts_types_and_lengths_are_errors() {
    let bytes = sample_file();
    let corrupt = |at: usize, value: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        Gguf::parse(&b).map(|_| ()).unwrap_err()
    };
    let field = |e: Error| match e {
        Error::Gguf { field, .. } => field,
        e => panic!("{e:?}"),
    };
    assert_eq!(field(corrupt(0, b"GGUE")), "header.magic");
    assert_eq!(field(corrupt(4, &1u32.to_le_bytes())), "header.version");
    assert_eq!(field(corrupt(8, &u64::MAX.to_le_bytes())), "header.tensor_count");
    assert_eq!(field(corrupt(16, &(1u64 << 40).to_le_bytes())), "header.kv_count");
    // The first key's length, then its value type ("general.architecture" is 20 bytes).
    assert_eq!(field(corrupt(24, &u64::MAX.to_le_bytes())), "metadata[0].key");
    assert_eq!(field(corrupt(24 + 8 + 20, &13u32.to_le_bytes())), "metadata[0].type");
    let err = corrupt(24 + 8 + 20, &13u32.to_le_bytes());
    assert_eq!(
        err.to_string(),
        "gguf: the value type of metadata entry 0 'general.architecture' is 13, which is no GGUF value type (0 to 12)"
    );
    // The string's length.
    let err = corrupt(24 + 8 + 20 + 4, &(1u64 << 50).to_le_bytes());
    assert!(err.to_string().starts_with("gguf: truncated while reading the value of metadata entry 0"), "{err}");
    // A tensor type: the first tensor info follows the metadata.
    let g = Gguf::parse(&bytes).unwrap();
    let first = g.tensors()[0].name();
    let info_at = bytes.windows(first.len()).position(|w| w == first.as_bytes()).unwrap();
    let type_at = info_at + first.len() + 4 + 8 * g.tensors()[0].n_dims();
    assert_eq!(bytes[type_at..type_at + 4], ggml_type_id(g.tensors()[0].dtype()).to_le_bytes());
    let err = corrupt(type_at, &27u32.to_le_bytes());
    assert!(err.to_string().contains(&format!("tensor '{first}' has type i64 (ggml type 27)")), "{err}");
    let err = corrupt(type_at + 4, &u64::MAX.to_le_bytes());
    assert!(matches!(err, Error::Gguf { ref field, .. } if field == "tensors[0].offset"), "{err:?}");
}

#[test]
fn a_buffer_smaller_than_the_file_is_refused() {
    let bytes = writer_with_tensors(None).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let small: Arc<dyn Buffer> = HOST_BUFFER_TYPE.alloc_buffer(bytes.len() / 2).unwrap();
    let err = bind_tensors(&mut Graph::new(), &g, &small).unwrap_err();
    assert!(matches!(err, Error::Gguf { ref field, .. } if field == "buffer"), "{err:?}");
}
