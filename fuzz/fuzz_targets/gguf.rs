//! The GGUF reader on arbitrary bytes (and mutations of the valid seed files): only `Ok` or a
//! typed error, and everything an `Ok` file offers can be read without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera::gguf::{Gguf, Value};

fn touch(v: &Value<'_>, depth: usize) -> usize {
    match v {
        Value::Array(a) if depth < 16 => a.iter().map(|item| touch(&item, depth + 1)).sum(),
        Value::String(s) => s.len(),
        _ => 1,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::parse(data) else { return };
    let mut seen = 0usize;
    for kv in g.metadata() {
        seen += kv.key.len() + touch(&kv.value, 0);
    }
    for t in g.tensors() {
        let bytes = g.tensor_data(t);
        assert_eq!(bytes.len(), t.nbytes());
        seen += bytes.first().copied().unwrap_or(0) as usize;
    }
    let _ = g.get_u32("general.alignment");
    let _ = g.get_str("general.architecture");
    // Binding every tensor into a graph over a copy of the bytes must work for a valid file.
    let buffer: std::sync::Arc<dyn tessera::Buffer> = std::sync::Arc::new(
        tessera::host_buffer::HostBuffer::alloc(&tessera::host_buffer::HOST_BUFFER_TYPE, data.len()).expect("alloc"),
    );
    buffer.set_bytes(0, data).expect("copy");
    let mut graph = tessera::Graph::new();
    tessera::gguf::bind_tensors(&mut graph, &g, &buffer).expect("a parsed file binds");
    std::hint::black_box(seen);
});
