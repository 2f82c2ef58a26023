//! Reader tests over files built byte by byte here (the writer lives in tessera-std).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::buffer::{Buffer, BufferType, BufferUsage};
use crate::dtype::DType;
use crate::error::Error;
use crate::graph::Graph;
use crate::host_buffer::HOST_BUFFER_TYPE;

/// A GGUF file under construction.
struct Builder {
    version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    infos: Vec<u8>,
    n_tensors: u64,
    data: Vec<u8>,
    alignment: usize,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Builder {
    fn new() -> Builder {
        Builder {
            version: 3,
            kv: Vec::new(),
            n_kv: 0,
            infos: Vec::new(),
            n_tensors: 0,
            data: Vec::new(),
            alignment: 32,
        }
    }

    /// Adds an entry whose value is `value` (already encoded) of type `ty`.
    fn kv(mut self, key: &str, ty: ValueType, value: &[u8]) -> Builder {
        put_str(&mut self.kv, key);
        self.kv.extend_from_slice(&ty.tag().to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    fn alignment(mut self, alignment: u32) -> Builder {
        self.alignment = alignment as usize;
        self.kv(ALIGNMENT_KEY, ValueType::U32, &alignment.to_le_bytes())
    }

    /// Adds a tensor with the given raw info fields, its data appended at the next aligned offset.
    fn tensor_raw(mut self, name: &str, dims: &[u64], ggml_type: u32, data: &[u8]) -> Builder {
        let offset = self.data.len().next_multiple_of(self.alignment);
        self.data.resize(offset, 0);
        self.data.extend_from_slice(data);
        self.tensor_info(name, dims, ggml_type, offset as u64)
    }

    fn tensor_info(mut self, name: &str, dims: &[u64], ggml_type: u32, offset: u64) -> Builder {
        put_str(&mut self.infos, name);
        self.infos.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend_from_slice(&d.to_le_bytes());
        }
        self.infos.extend_from_slice(&ggml_type.to_le_bytes());
        self.infos.extend_from_slice(&offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    fn tensor_f32(self, name: &str, dims: &[u64], values: &[f32]) -> Builder {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor_raw(name, dims, 0, &bytes)
    }

    fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.n_tensors.to_le_bytes());
        out.extend_from_slice(&self.n_kv.to_le_bytes());
        out.extend_from_slice(&self.kv);
        out.extend_from_slice(&self.infos);
        if self.n_tensors > 0 {
            out.resize(out.len().next_multiple_of(self.alignment), 0);
            out.extend_from_slice(&self.data);
        }
        out
    }
}

fn string_value(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    put_str(&mut v, s);
    v
}

fn array_value(elem: ValueType, count: u64, elems: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&elem.tag().to_le_bytes());
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(elems);
    v
}

fn gguf_err(bytes: &[u8]) -> (String, String) {
    match Gguf::parse(bytes) {
        Err(Error::Gguf { field, message }) => (field, message),
        Err(e) => panic!("expected a gguf error, got {e:?}"),
        Ok(_) => panic!("expected a gguf error, the file parsed"),
    }
}

/// A file with metadata of every type and three tensors.
fn sample() -> Builder {
    Builder::new()
        .kv("general.architecture", ValueType::String, &string_value("test"))
        .kv("a.u8", ValueType::U8, &[7])
        .kv("a.i8", ValueType::I8, &[0xf9])
        .kv("a.u16", ValueType::U16, &500u16.to_le_bytes())
        .kv("a.i16", ValueType::I16, &(-500i16).to_le_bytes())
        .kv("a.u32", ValueType::U32, &70000u32.to_le_bytes())
        .kv("a.i32", ValueType::I32, &(-70000i32).to_le_bytes())
        .kv("a.f32", ValueType::F32, &0.25f32.to_le_bytes())
        .kv("a.bool", ValueType::Bool, &[1])
        .kv("a.u64", ValueType::U64, &(1u64 << 40).to_le_bytes())
        .kv("a.i64", ValueType::I64, &(-(1i64 << 40)).to_le_bytes())
        .kv("a.f64", ValueType::F64, &(-1.5f64).to_le_bytes())
        .kv("a.tokens", ValueType::Array, &{
            let mut elems = string_value("<s>");
            elems.extend(string_value("</s>"));
            array_value(ValueType::String, 2, &elems)
        })
        .tensor_f32("w", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .tensor_f32("b", &[3], &[0.5, -0.5, 1.5])
        .tensor_raw("q", &[32], 8, &{
            let mut block = vec![0u8; 34];
            block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
            for (i, q) in block[2..].iter_mut().enumerate() {
                *q = (i as i8 - 16) as u8;
            }
            block
        })
}

#[test]
fn parses_metadata_of_every_type() {
    let bytes = sample().build();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.version(), 3);
    assert_eq!(g.alignment(), 32);
    assert_eq!(g.metadata().len(), 13);
    assert_eq!(g.metadata()[0].key, "general.architecture");
    assert_eq!(g.get_str("general.architecture").unwrap(), "test");
    assert_eq!(g.get_u8("a.u8").unwrap(), 7);
    assert_eq!(g.get_i8("a.i8").unwrap(), -7);
    assert_eq!(g.get_u16("a.u16").unwrap(), 500);
    assert_eq!(g.get_i16("a.i16").unwrap(), -500);
    assert_eq!(g.get_u32("a.u32").unwrap(), 70000);
    assert_eq!(g.get_i32("a.i32").unwrap(), -70000);
    assert_eq!(g.get_f32("a.f32").unwrap(), 0.25);
    assert!(g.get_bool("a.bool").unwrap());
    assert_eq!(g.get_u64("a.u64").unwrap(), 1 << 40);
    assert_eq!(g.get_i64("a.i64").unwrap(), -(1 << 40));
    assert_eq!(g.get_f64("a.f64").unwrap(), -1.5);
    assert_eq!(g.get_unsigned("a.u16").unwrap(), 500);
    let tokens = g.get_array("a.tokens").unwrap();
    assert_eq!(tokens.strings().unwrap().collect::<Vec<_>>(), ["<s>", "</s>"]);
    // Strings borrow the file.
    let arch = g.get_str("general.architecture").unwrap();
    assert!(bytes.as_ptr_range().contains(&arch.as_ptr()));

    let err = g.get_u32("a.i32").unwrap_err();
    assert_eq!(err.to_string(), "gguf: metadata entry 'a.i32' has type i32, expected u32");
    let err = g.get_str("nope").unwrap_err();
    assert_eq!(err, Error::Gguf { field: "nope".into(), message: "metadata entry 'nope' is missing".into() });
    assert!(g.get("nope").is_none());
    assert_eq!(g.get("a.u8"), Some(Value::U8(7)));
}

#[test]
fn locates_tensor_data_in_place() {
    let bytes = sample().build();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.tensors().len(), 3);
    assert_eq!(g.data_offset() % 32, 0);
    let w = g.tensor("w").unwrap();
    assert_eq!((w.dtype(), w.ne(), w.n_dims(), w.offset(), w.nbytes()), (DType::F32, [3, 2, 1, 1], 2, 0, 24));
    assert_eq!(w.file_offset(), g.data_offset());
    let data = g.tensor_data(w);
    assert_eq!(data.as_ptr(), bytes[g.data_offset()..].as_ptr(), "tensor data is not copied");
    assert_eq!(&data[4..8], &2.0f32.to_le_bytes());
    let b = g.tensor("b").unwrap();
    assert_eq!((b.offset(), b.nbytes(), b.ne()), (32, 12, [3, 1, 1, 1]));
    let q = g.tensor("q").unwrap();
    assert_eq!((q.dtype(), q.offset(), q.nbytes()), (DType::Q8_0, 64, 34));
    assert_eq!(g.tensors()[2].name(), "q");
    assert!(g.tensor("missing").is_none());
    // Debug output describes the file without dumping its bytes.
    let debug = alloc::format!("{g:?}");
    assert!(debug.contains("file_bytes") && debug.contains("nbytes: 34") && debug.len() < 2000, "{debug}");
    assert!(alloc::format!("{:?}", g.get_array("a.tokens").unwrap()).starts_with("Array(string; 2,"));
}

#[test]
fn version_2_is_read_and_1_is_refused() {
    let mut b = sample();
    b.version = 2;
    assert_eq!(Gguf::parse(&b.build()).unwrap().version(), 2);
    b.version = 1;
    let (field, message) = gguf_err(&b.build());
    assert_eq!(field, "header.version");
    assert!(message.starts_with("unsupported version 1"), "{message}");
    b.version = 3u32.swap_bytes();
    assert!(gguf_err(&b.build()).1.contains("big-endian"));
    b.version = 4;
    assert_eq!(gguf_err(&b.build()).1, "unsupported version 4; tessera reads versions 2 and 3");
}

#[test]
fn bad_magic_is_not_a_gguf_file() {
    let mut bytes = sample().build();
    bytes[..4].copy_from_slice(b"GGML");
    let err = Gguf::parse(&bytes).unwrap_err();
    assert_eq!(err.to_string(), "gguf: not a GGUF file: it starts with b\"GGML\", expected b\"GGUF\"");
    assert!(Gguf::parse(b"").is_err());
}

#[test]
fn an_empty_file_with_no_tensors_parses() {
    let bytes = Builder::new().build();
    assert_eq!(bytes.len(), 24);
    let g = Gguf::parse(&bytes).unwrap();
    assert!(g.metadata().is_empty() && g.tensors().is_empty());
}

#[test]
fn alignment_comes_from_the_file() {
    let bytes = Builder::new().alignment(64).tensor_f32("a", &[1], &[1.0]).tensor_f32("b", &[1], &[2.0]).build();
    let g = Gguf::parse(&bytes).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    assert_eq!(g.tensor("b").unwrap().offset(), 64);

    // Any unsigned type will do.
    let bytes = Builder::new().kv(ALIGNMENT_KEY, ValueType::U8, &[16]).build();
    assert_eq!(Gguf::parse(&bytes).unwrap().alignment(), 16);

    for bad in [0u32, 48] {
        let bytes = Builder::new().alignment(bad).build();
        let (field, message) = gguf_err(&bytes);
        assert_eq!(field, "metadata[0].value");
        assert!(message.starts_with("metadata entry 'general.alignment' is"), "{message}");
        assert!(message.contains("must be a power of two"), "{message}");
    }
    let bytes = Builder::new().kv(ALIGNMENT_KEY, ValueType::I32, &32i32.to_le_bytes()).build();
    assert!(gguf_err(&bytes).1.contains("has type i32, expected an unsigned integer"));
}

#[test]
fn misaligned_offsets_and_data_past_the_end_are_errors() {
    let b = Builder::new().tensor_info("w", &[4], 0, 8);
    let mut bytes = b.build();
    bytes.resize(bytes.len().next_multiple_of(32) + 64, 0);
    let (field, message) = gguf_err(&bytes);
    assert_eq!(field, "tensors[0].offset");
    assert_eq!(message, "tensor 'w' has data offset 8, which is not a multiple of the alignment 32");

    let bytes = Builder::new().tensor_info("blk.0.w", &[1024], 0, 64).build();
    let (field, message) = gguf_err(&bytes);
    assert_eq!(field, "tensors[0].data");
    assert_eq!(
        message,
        alloc::format!(
            "tensor 'blk.0.w' data (offset 64, 4096 bytes) runs past the end of the file ({} bytes; the data section starts at {})",
            bytes.len(),
            bytes.len().next_multiple_of(32)
        )
    );
}

#[test]
fn unsupported_types_and_shapes_name_the_tensor() {
    let bytes = Builder::new().tensor_raw("tok_ids", &[2], 27, &[0; 16]).build();
    let (field, message) = gguf_err(&bytes);
    assert_eq!(field, "tensors[0].type");
    assert!(message.starts_with("tensor 'tok_ids' has type i64 (ggml type 27), which tessera does not support"));
    let bytes = Builder::new().tensor_raw("x", &[2], 1000, &[0; 16]).build();
    assert_eq!(gguf_err(&bytes).1, "tensor 'x' has ggml type 1000, which is no known ggml type");

    let bytes = Builder::new().tensor_raw("q", &[33], 2, &[0; 64]).build();
    assert!(gguf_err(&bytes).1.contains("rows of 33 values, which is not a whole number of blocks of 32"));

    for dims in [&[][..], &[1, 1, 1, 1, 1][..]] {
        let bytes = Builder::new().tensor_raw("d", dims, 0, &[0; 4]).build();
        let (field, message) = gguf_err(&bytes);
        assert_eq!(field, "tensors[0].n_dims");
        assert!(message.contains("dimensions; tessera supports 1 to 4"), "{message}");
    }

    let bytes = Builder::new().tensor_raw("big", &[u64::MAX / 2, 4], 0, &[0; 4]).build();
    assert!(gguf_err(&bytes).1.contains("overflows") || cfg!(target_pointer_width = "32"));
}

#[test]
fn duplicates_and_overlaps_are_errors() {
    let bytes = Builder::new().kv("k", ValueType::U8, &[1]).kv("k", ValueType::U8, &[2]).build();
    assert_eq!(gguf_err(&bytes), ("metadata[1].key".into(), "metadata key 'k' appears twice (entries 0 and 1)".into()));

    let bytes = Builder::new().tensor_f32("t", &[1], &[1.0]).tensor_f32("t", &[1], &[2.0]).build();
    assert_eq!(gguf_err(&bytes).1, "tensor name 't' appears twice (tensors 0 and 1)");

    let mut b = Builder::new().tensor_f32("a", &[16], &[0.0; 16]);
    b = b.tensor_info("b", &[4], 0, 32);
    let (field, message) = gguf_err(&b.build());
    assert_eq!(field, "tensors[1].offset");
    assert_eq!(message, "tensor 'b' data (offsets 32..48) overlaps tensor 'a' (offsets 0..64)");
}

#[test]
fn lookups_find_every_name_whatever_the_file_order() {
    // Names out of order (the lookup tables are sorted copies), each found by name.
    let names = ["z", "m.2", "a", "m.10", "b", "m.1", "y.weight", "y.bias"];
    let mut b = Builder::new();
    for (i, name) in names.iter().enumerate() {
        b = b.kv(&format!("key.{name}"), ValueType::U8, &[i as u8]).tensor_f32(name, &[1], &[i as f32]);
    }
    let bytes = b.build();
    let g = Gguf::parse(&bytes).unwrap();
    for (i, name) in names.iter().enumerate() {
        assert_eq!(g.get(&format!("key.{name}")), Some(Value::U8(i as u8)), "{name}");
        let t = g.tensor(name).unwrap();
        assert_eq!(t.name(), *name);
        assert_eq!(t.data(), (i as f32).to_le_bytes());
    }
    assert!(g.tensor("m").is_none() && g.tensor("m.3").is_none() && g.get("key.").is_none());
    // In file order, the first repetition is reported: 'q' (entries 1 and 3) repeats before
    // 'p' (entries 0 and 4), even though 'p' sorts first.
    let bytes = Builder::new()
        .kv("p", ValueType::U8, &[0])
        .kv("q", ValueType::U8, &[1])
        .kv("r", ValueType::U8, &[2])
        .kv("q", ValueType::U8, &[3])
        .kv("p", ValueType::U8, &[4])
        .kv("q", ValueType::U8, &[5])
        .build();
    assert_eq!(gguf_err(&bytes), ("metadata[3].key".into(), "metadata key 'q' appears twice (entries 1 and 3)".into()));
}

#[test]
fn absurd_counts_are_rejected_before_allocating() {
    let mut bytes = Builder::new().build();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    let (field, message) = gguf_err(&bytes);
    assert_eq!(field, "header.kv_count");
    assert!(message.starts_with("the file declares 18446744073709551615 metadata entries, but the 0 bytes left"));

    let mut bytes = Builder::new().build();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert_eq!(gguf_err(&bytes).0, "header.tensor_count");

    let huge = Builder::new().kv("s", ValueType::String, &u64::MAX.to_le_bytes()).build();
    let (field, message) = gguf_err(&huge);
    assert_eq!(field, "metadata[0].value");
    assert!(message.starts_with("truncated while reading the value of metadata entry 0 's'"), "{message}");
}

#[test]
fn truncation_names_the_field() {
    let three = Builder::new().kv("one", ValueType::U8, &[1]).kv("two", ValueType::String, &string_value("zwei")).kv(
        "three",
        ValueType::Bool,
        &[0],
    );
    let at = 24 + three.kv.len();
    let bytes = three.kv("four.key", ValueType::U8, &[4]).build();
    assert!(Gguf::parse(&bytes).is_ok());
    let err = Gguf::parse(&bytes[..at + 8 + 3]).unwrap_err();
    assert_eq!(
        err.to_string(),
        alloc::format!(
            "gguf: truncated while reading the key of metadata entry 3 (needs 8 bytes at offset {}, 3 left)",
            at + 8
        )
    );
    assert!(matches!(err, Error::Gguf { ref field, .. } if field == "metadata[3].key"));
    let err = Gguf::parse(&bytes[..at + 8 + 8 + 2]).unwrap_err();
    assert!(err.to_string().starts_with("gguf: truncated while reading the value type of metadata entry 3 'four.key'"));
    assert_eq!(
        Gguf::parse(&bytes[..6]).unwrap_err().to_string(),
        "gguf: truncated while reading the version (needs 4 bytes at offset 4, 2 left)"
    );
}

#[test]
fn every_prefix_of_a_file_is_an_error() {
    let bytes = sample().build();
    assert!(Gguf::parse(&bytes).is_ok());
    for n in 0..bytes.len() {
        match Gguf::parse(&bytes[..n]) {
            Err(Error::Gguf { message, .. }) => assert!(!message.is_empty()),
            other => panic!("prefix of {n} bytes: {other:?}"),
        }
    }
}

#[test]
fn arrays_in_files_iterate_without_copying() {
    let mut nested = Vec::new();
    for inner in [&[1i32, 2][..], &[3]] {
        let elems: Vec<u8> = inner.iter().flat_map(|v| v.to_le_bytes()).collect();
        nested.extend(array_value(ValueType::I32, inner.len() as u64, &elems));
    }
    let bytes = Builder::new()
        .kv("n", ValueType::Array, &array_value(ValueType::Array, 2, &nested))
        .kv("f", ValueType::Array, &array_value(ValueType::F32, 2, &[0, 0, 128, 63, 0, 0, 0, 64]))
        .build();
    let g = Gguf::parse(&bytes).unwrap();
    let n = g.get_array("n").unwrap();
    let rows: Vec<Vec<i32>> =
        n.iter().map(|r| r.as_array().unwrap().iter().map(|v| v.as_i32().unwrap()).collect()).collect();
    assert_eq!(rows, [vec![1, 2], vec![3]]);
    let f = g.get_array("f").unwrap();
    assert_eq!(f.iter().map(|v| v.as_f32().unwrap()).collect::<Vec<_>>(), [1.0, 2.0]);
    assert!(bytes.as_ptr_range().contains(&f.raw_bytes().as_ptr()));
}

#[test]
fn bound_tensors_read_back_through_the_graph() {
    let bytes = sample().build();
    let g = Gguf::parse(&bytes).unwrap();
    let buffer = HOST_BUFFER_TYPE.alloc_buffer(bytes.len()).unwrap();
    buffer.set_bytes(0, &bytes).unwrap();
    let mut graph = Graph::new();
    let ids = bind_tensors(&mut graph, &g, &buffer).unwrap();
    assert_eq!(buffer.usage(), BufferUsage::Weights);
    assert_eq!(ids.len(), 3);
    assert_eq!(graph.get_f32(ids["w"]).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(graph.get_f32(ids["b"]).unwrap(), [0.5, -0.5, 1.5]);
    let q = graph.get_f32(ids["q"]).unwrap();
    assert_eq!(q[0], -8.0);
    assert_eq!(q[31], 7.5);
    let t = graph.tensor(ids["w"]).unwrap();
    assert_eq!((t.name(), t.ne(), t.dtype()), ("w", [3, 2, 1, 1], DType::F32));

    let small = HOST_BUFFER_TYPE.alloc_buffer(bytes.len() - 1).unwrap();
    let err = bind_tensors(&mut Graph::new(), &g, &small).unwrap_err();
    assert!(err.to_string().starts_with("gguf: buffer 'CPU' holds"), "{err}");
}

#[test]
fn static_files_bind_with_no_copy() {
    let bytes: &'static [u8] = alloc::boxed::Box::leak(sample().build().into_boxed_slice());
    let mut graph = Graph::new();
    let (g, ids) = bind_static(&mut graph, bytes).unwrap();
    assert_eq!(g.tensors().len(), 3);
    let data = graph.data(ids["b"]).unwrap();
    assert_eq!(data.buffer.host_ptr(), Some(bytes.as_ptr()));
    assert_eq!(data.offset, g.tensor("b").unwrap().file_offset());
    assert_eq!(graph.get_f32(ids["b"]).unwrap(), [0.5, -0.5, 1.5]);
    assert!(graph.set_f32(ids["b"], &[0.0; 3]).is_err(), "static weights are read-only");
    let _: Arc<dyn Buffer> = data.buffer;
    assert_eq!(ids.keys().map(|k| k.to_string()).collect::<Vec<_>>(), ["b", "q", "w"]);
}
