//! Binding a file's tensors into a graph without copying their data.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;

use super::reader::Gguf;
use crate::buffer::{Buffer, BufferUsage, TensorData};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::host_buffer::HostBuffer;
use crate::tensor::TensorId;

/// Creates a leaf in `graph` for every tensor of `gguf` (named as in the file, with its shape
/// and type) and binds it to `buffer` at the tensor's offset in the file, so `buffer` must hold
/// the whole file (the bytes `gguf` was parsed from, borrowed or copied to a device). The
/// buffer is tagged as weights. Returns the tensors by name.
pub fn bind_tensors(
    graph: &mut Graph,
    gguf: &Gguf<'_>,
    buffer: &Arc<dyn Buffer>,
) -> Result<BTreeMap<String, TensorId>> {
    let file_len = gguf.bytes().len();
    if buffer.size() < file_len {
        return Err(Error::Gguf {
            field: String::from("buffer"),
            message: format!(
                "buffer '{}' holds {} bytes, but the file it should hold has {file_len}",
                buffer.buffer_type().name(),
                buffer.size()
            ),
        });
    }
    buffer.set_usage(BufferUsage::Weights);
    let mut ids = BTreeMap::new();
    for info in gguf.tensors() {
        let id = graph.new_tensor(info.dtype(), &info.ne())?;
        graph.set_name(id, info.name())?;
        graph.bind(id, TensorData { buffer: buffer.clone(), offset: info.file_offset() })?;
        ids.insert(String::from(info.name()), id);
    }
    Ok(ids)
}

/// Parses a file that lives as long as the program (`include_bytes!`, weights in flash) and
/// binds its tensors into `graph` with no copy: the graph reads the bytes in place.
pub fn bind_static(graph: &mut Graph, bytes: &'static [u8]) -> Result<(Gguf<'static>, BTreeMap<String, TensorId>)> {
    let gguf = Gguf::parse(bytes)?;
    let buffer: Arc<dyn Buffer> = Arc::new(HostBuffer::from_static(bytes));
    let ids = bind_tensors(graph, &gguf, &buffer)?;
    Ok((gguf, ids))
}
