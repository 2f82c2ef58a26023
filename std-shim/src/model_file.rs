//! Model files (GGUF or safetensors), memory-mapped, and their weights placed on devices.
//!
//! On a device that reads host memory the weights are used where they lie in the mapping
//! (zero-copy); on others they are uploaded into the device's own buffers, once.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::Mmap;
use tessera_core::gguf::Gguf;
use tessera_core::{Buffer, BufferUsage, DType, Device, Error, Result, Shape, TensorData};

/// The file formats tessera reads weights from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Gguf,
    Safetensors,
}

/// One tensor stored in a model file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTensor {
    pub name: String,
    pub dtype: DType,
    /// Shape in tessera's order (`ne[0]` is the row length).
    pub ne: [usize; 4],
    /// Byte offset of its data in the file.
    pub offset: usize,
    pub nbytes: usize,
}

/// A memory-mapped model file and its tensor table.
pub struct ModelFile {
    path: PathBuf,
    format: Format,
    map: Arc<Mmap>,
    tensors: Vec<FileTensor>,
    /// Tensors the file has in types tessera does not use ("position_ids: i64").
    skipped: Vec<String>,
}

fn file_error(path: &Path, message: impl Into<String>) -> Error {
    Error::File { path: path.display().to_string(), message: message.into() }
}

impl ModelFile {
    /// Maps `path` and reads its tensor table (the format is recognised by its first bytes).
    pub fn open(path: impl AsRef<Path>) -> Result<ModelFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| file_error(path, format!("cannot open: {e}")))?;
        // SAFETY: the mapping is read-only; like every reader of a model file we rely on the
        // file not being truncated or rewritten while it is mapped.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| file_error(path, format!("cannot map: {e}")))?;
        let (format, tensors, skipped) = if map.starts_with(b"GGUF") {
            let tensors = gguf_tensors(&map).map_err(|e| match e {
                Error::Gguf { field, message } => file_error(path, format!("malformed GGUF ({field}): {message}")),
                e => file_error(path, e.to_string()),
            })?;
            (Format::Gguf, tensors, Vec::new())
        } else {
            let (t, s) = safetensors_tensors(path, &map)?;
            (Format::Safetensors, t, s)
        };
        Ok(ModelFile { path: path.to_path_buf(), format, map: Arc::new(map), tensors, skipped })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn format(&self) -> Format {
        self.format
    }
    pub fn tensors(&self) -> &[FileTensor] {
        &self.tensors
    }
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }
    pub fn tensor(&self, name: &str) -> Option<&FileTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }
    /// A tensor's bytes. `t` must be one of this file's [`tensors`](Self::tensors): a tensor
    /// of another file is an error, not bytes from wherever its offset points here.
    pub fn data(&self, t: &FileTensor) -> Result<&[u8]> {
        let bytes = (self.tensor(&t.name) == Some(t))
            .then(|| t.offset.checked_add(t.nbytes).and_then(|end| self.map.get(t.offset..end)))
            .flatten();
        bytes.ok_or_else(|| {
            file_error(
                &self.path,
                format!(
                    "tensor '{}' ({} {}, bytes {}..+{}) is not one of this file's tensors",
                    t.name,
                    t.dtype,
                    Shape(t.ne),
                    t.offset,
                    t.nbytes
                ),
            )
        })
    }
    /// For GGUF files, the parsed header (metadata and tensor infos).
    pub fn gguf(&self) -> Option<Gguf<'_>> {
        (self.format == Format::Gguf).then(|| Gguf::parse(&self.map).ok()).flatten()
    }

    /// The whole mapping as a buffer `device` computes on in place (no copy), tagged as
    /// weights, if the device can use host memory where it is.
    pub fn device_buffer(&self, device: &'static dyn Device) -> Option<Arc<dyn Buffer>> {
        if !device.caps().buffer_from_host_ptr || self.map.is_empty() {
            return None;
        }
        let owner: Box<dyn std::any::Any + Send + Sync> = Box::new(self.map.clone());
        let ptr = NonNull::new(self.map.as_ptr().cast_mut())?;
        // SAFETY: the mapping is valid for `len` bytes for as long as `owner` (a clone of the Arc
        // holding it) lives, which the buffer keeps; it is mapped read-only and never written.
        let buffer = unsafe { device.buffer_from_host_ptr(ptr, self.map.len(), owner) }.ok()?;
        buffer.set_usage(BufferUsage::Weights);
        Some(buffer)
    }
}

fn gguf_tensors(map: &[u8]) -> Result<Vec<FileTensor>> {
    let g = Gguf::parse(map)?;
    Ok(g.tensors()
        .iter()
        .map(|t| FileTensor {
            name: t.name().into(),
            dtype: t.dtype(),
            ne: t.ne(),
            offset: t.file_offset(),
            nbytes: t.nbytes(),
        })
        .collect())
}

fn safetensors_tensors(path: &Path, map: &[u8]) -> Result<(Vec<FileTensor>, Vec<String>)> {
    use safetensors::Dtype;
    let st = safetensors::SafeTensors::deserialize(map).map_err(|e| file_error(path, safetensors_problem(map, e)))?;
    let base = map.as_ptr() as usize;
    let (mut tensors, mut skipped) = (Vec::new(), Vec::new());
    for (name, view) in st.tensors() {
        let dtype = match view.dtype() {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            Dtype::I32 => DType::I32,
            other => {
                skipped.push(format!("{name}: {other:?}"));
                continue;
            }
        };
        let shape = view.shape();
        if shape.len() > 4 {
            return Err(file_error(
                path,
                format!("tensor '{name}' has {} dimensions; at most 4 are supported", shape.len()),
            ));
        }
        let mut ne = [1usize; 4];
        for (i, d) in shape.iter().rev().enumerate() {
            ne[i] = *d;
        }
        let data = view.data();
        tensors.push(FileTensor { name, dtype, ne, offset: data.as_ptr() as usize - base, nbytes: data.len() });
    }
    tensors.sort_by_key(|t| t.offset);
    Ok((tensors, skipped))
}

/// What is wrong with a file that safetensors cannot read: truncated (its header describes
/// more bytes than the file has), followed by stray bytes, or not a model file at all.
fn safetensors_problem(map: &[u8], e: safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    let len = map.len();
    let header_len = map.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let header_start = map.get(8..).and_then(|rest| rest.iter().find(|b| !b.is_ascii_whitespace())) == Some(&b'{');
    match (e, header_len) {
        // A plausible header length (safetensors allows up to 100 MB) that runs past the end.
        (E::InvalidHeaderLength, Some(n)) if header_start && n <= 100_000_000 => format!(
            "truncated safetensors file: its header is {n} bytes but the file holds only {} after the length",
            len - 8
        ),
        (E::MetadataIncompleteBuffer, Some(n)) => {
            let header = map.get(8..).and_then(|rest| rest.get(..usize::try_from(n).ok()?));
            let data_end = header.and_then(|h| std::str::from_utf8(h).ok()).and_then(declared_data_end);
            match data_end.and_then(|d| d.checked_add(8 + n as usize)) {
                Some(end) if end > len => {
                    format!("truncated safetensors file: its header describes {end} bytes, the file holds {len}")
                }
                Some(end) => {
                    format!("safetensors file with {} stray bytes after its last tensor (byte {end})", len - end)
                }
                None => "damaged safetensors file: its tensors do not cover the file as its header says".into(),
            }
        }
        (e, _) => format!("not a GGUF or safetensors file: {e}"),
    }
}

/// The largest `data_offsets` end a safetensors header declares (a plain scan of the JSON,
/// which safetensors has already parsed once).
fn declared_data_end(header: &str) -> Option<usize> {
    header
        .split("\"data_offsets\"")
        .skip(1)
        .filter_map(|rest| {
            let list = rest.split_once('[')?.1.split_once(']')?.0;
            list.split(',').filter_map(|n| n.trim().parse::<usize>().ok()).max()
        })
        .max()
}

/// Weights placed on a device: where each named tensor's data lives.
pub struct WeightStore {
    data: BTreeMap<String, TensorData>,
    /// Buffers uploaded to the device (none when used in place).
    pub uploaded: Vec<Arc<dyn Buffer>>,
    pub bytes: usize,
}

impl WeightStore {
    pub fn get(&self, name: &str) -> Option<&TensorData> {
        self.data.get(name)
    }
}

/// What a model expects of one weight.
pub struct WeightSpec<'a> {
    /// The weight's name: the file's tensor of that name, unless `parts` are given.
    pub name: &'a str,
    /// The file's tensors that make the weight, joined along their outermost dimension in this
    /// order (a layer's query, key and value projections as one matrix); none: `name`'s.
    pub parts: &'a [String],
    pub dtype: DType,
    pub ne: [usize; 4],
}

/// Whether a weight stored as `stored` may be placed as `wanted`: as it is, f16 and bf16
/// widened to f32 (a model's vectors, which its graph adds in f32), or f32 and bf16 rounded to
/// f16 (the vectors a graph adds to f16 sums).
pub fn placeable(stored: DType, wanted: DType) -> bool {
    let floats = [DType::F32, DType::F16, DType::BF16];
    stored == wanted || (floats.contains(&stored) && matches!(wanted, DType::F32 | DType::F16))
}

/// `bytes` of floats of type `stored` (F32, F16 or BF16) as `wanted` bytes (F32 or F16).
fn converted(stored: DType, wanted: DType, bytes: &[u8]) -> Result<Vec<u8>> {
    let mut values = vec![0f32; bytes.len() / stored.block_bytes()];
    tessera_core::convert::row_to_f32(stored, bytes, &mut values);
    tessera_core::convert::to_bytes(wanted, &values)
}

/// One weight's file tensors, each converted to `dtype` where it is stored in another type.
struct Source<'f, 'w> {
    name: &'w str,
    tensors: Vec<&'f FileTensor>,
    dtype: DType,
}

impl Source<'_, '_> {
    /// Bytes as placed: converted tensors take the bytes of the weight's type.
    fn bytes(&self) -> usize {
        let placed = |t: &&FileTensor| {
            if t.dtype == self.dtype {
                t.nbytes
            } else {
                t.nbytes / t.dtype.block_bytes() * self.dtype.block_bytes()
            }
        };
        self.tensors.iter().map(placed).sum()
    }

    /// The weight's one file tensor where it is stored as it is placed, usable where the file
    /// lies.
    fn in_place(&self) -> Option<&FileTensor> {
        match self.tensors[..] {
            [t] if t.dtype == self.dtype => Some(t),
            _ => None,
        }
    }
}

/// The tensors of `file` that make weight `w`, checked against it: each present, of a type
/// placeable as `w`'s, of its shape (parts: its shape but for the outermost dimension, which
/// they sum to).
fn source<'f, 'w>(file: &'f ModelFile, w: &WeightSpec<'w>) -> Result<Source<'f, 'w>> {
    let names: Vec<&str> = if w.parts.is_empty() { vec![w.name] } else { w.parts.iter().map(String::as_str).collect() };
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let t = file
            .tensor(name)
            .ok_or_else(|| file_error(file.path(), format!("has no tensor '{name}' ({} {})", w.dtype, Shape(w.ne))))?;
        tensors.push(t);
    }
    // The outermost dimension of more than one value, along which parts are joined.
    let outer = w.ne.iter().rposition(|&n| n > 1).unwrap_or(0);
    let joined = tensors.iter().map(|t| t.ne[outer]).sum::<usize>();
    let fits = |t: &FileTensor| {
        let same_inner = t.ne[..outer] == w.ne[..outer] && t.ne[outer + 1..].iter().all(|&n| n == 1);
        placeable(t.dtype, w.dtype) && same_inner && joined == w.ne[outer]
    };
    if let Some(t) = tensors.iter().find(|t| !fits(t)) {
        let joined = if w.parts.is_empty() { String::new() } else { format!(" (a part of '{}')", w.name) };
        return Err(file_error(
            file.path(),
            format!(
                "tensor '{}'{joined} is {} {} but the model expects {} {}",
                t.name,
                t.dtype,
                Shape(t.ne),
                w.dtype,
                Shape(w.ne)
            ),
        ));
    }
    Ok(Source { name: w.name, tensors, dtype: w.dtype })
}

/// Places `weights` of `file` on `device`: in place when the device can use the mapped file
/// (`Device::buffer_from_host_ptr`), else uploaded into its buffers (split at its largest
/// allocation). A weight wanted in another float type than it is stored in ([`placeable`]) is
/// converted, and one joined from parts is assembled, and uploaded (also beside a mapped
/// file). `progress(done, total)` is called as bytes are placed.
pub fn place_weights(
    file: &ModelFile,
    weights: &[WeightSpec<'_>],
    device: &'static dyn Device,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<WeightStore> {
    let mut found = weights.iter().map(|w| source(file, w)).collect::<Result<Vec<_>>>()?;
    let total: usize = found.iter().map(Source::bytes).sum();
    let mut data = BTreeMap::new();
    let mut done = 0;
    if let Some(buffer) = file.device_buffer(device) {
        for (name, t) in found.iter().filter_map(|s| Some((s.name, s.in_place()?))) {
            data.insert(name.to_string(), TensorData { buffer: buffer.clone(), offset: t.offset });
            done += t.nbytes;
        }
        progress(done, total);
        found.retain(|s| s.in_place().is_none());
    }
    // Upload, packing tensors into buffers no larger than the device allows.
    let bt = device.buffer_type();
    let align = bt.alignment().max(1);
    let pad = |n: usize| n.div_ceil(align) * align;
    let mut uploaded = Vec::new();
    let mut i = 0;
    while i < found.len() {
        let mut size = 0;
        let mut j = i;
        while j < found.len() && (j == i || size + pad(found[j].bytes()) <= bt.max_size()) {
            size += pad(found[j].bytes());
            j += 1;
        }
        let buffer = bt.alloc_buffer(size)?;
        buffer.set_usage(BufferUsage::Weights);
        let mut offset = 0;
        for s in &found[i..j] {
            let mut at = offset;
            for &t in &s.tensors {
                let bytes = file.data(t)?;
                let bytes = if t.dtype == s.dtype {
                    std::borrow::Cow::Borrowed(bytes)
                } else {
                    std::borrow::Cow::Owned(converted(t.dtype, s.dtype, bytes)?)
                };
                buffer.set_bytes(at, &bytes)?;
                at += bytes.len();
            }
            data.insert(s.name.to_string(), TensorData { buffer: buffer.clone(), offset });
            offset += pad(s.bytes());
            done += s.bytes();
            progress(done, total);
        }
        uploaded.push(buffer);
        i = j;
    }
    Ok(WeightStore { data, uploaded, bytes: total })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A safetensors file of one F32 tensor `a` of 2 values.
    fn safetensors_bytes() -> Vec<u8> {
        let header = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
        bytes
    }

    fn write(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-model-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// F32 `a` = [1, 2] mapped in place, F16 `h` and BF16 `b` = [1.5, -2] widened to f32
    /// beside it (also on a device that reads the mapping), `a` and `b` rounded to f16, and a
    /// conversion to another type refused with both types named.
    #[test]
    fn vectors_are_placed_widened_to_f32_or_rounded_to_f16() {
        let header = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"h":{"dtype":"F16","shape":[2],"data_offsets":[8,12]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
        for bits in [0x3e00u16, 0xc000, 0x3fc0, 0xc000] {
            bytes.extend_from_slice(&bits.to_le_bytes());
        }
        let file = ModelFile::open(write("widen.safetensors", &bytes)).unwrap();
        let device: &'static dyn Device = &tessera_cpu::CPU_DEVICE;
        let spec = |name, dtype| WeightSpec { name, parts: &[], dtype, ne: [2, 1, 1, 1] };
        let specs = [spec("a", DType::F32), spec("h", DType::F32), spec("b", DType::F32)];
        let store = place_weights(&file, &specs, device, &mut |_, _| {}).unwrap();
        assert_eq!(store.bytes, 24);
        // `a` stays in the mapping; one buffer holds the two widened tensors.
        assert_eq!(store.uploaded.len(), 1);
        assert!(!std::sync::Arc::ptr_eq(&store.get("a").unwrap().buffer, &store.uploaded[0]));
        for (name, want) in [("a", [1.0f32, 2.0]), ("h", [1.5, -2.0]), ("b", [1.5, -2.0])] {
            let at = store.get(name).unwrap();
            let mut got = [0u8; 8];
            at.buffer.get_bytes(at.offset, &mut got).unwrap();
            let got =
                [f32::from_le_bytes(got[..4].try_into().unwrap()), f32::from_le_bytes(got[4..].try_into().unwrap())];
            assert_eq!(got, want, "{name}");
        }
        let specs = [spec("a", DType::F16), spec("h", DType::F16), spec("b", DType::F16)];
        let store = place_weights(&file, &specs, device, &mut |_, _| {}).unwrap();
        assert_eq!(store.bytes, 12);
        for (name, want) in [("a", [0x3c00u16, 0x4000]), ("h", [0x3e00, 0xc000]), ("b", [0x3e00, 0xc000])] {
            let at = store.get(name).unwrap();
            let mut got = [0u8; 4];
            at.buffer.get_bytes(at.offset, &mut got).unwrap();
            let got = [u16::from_le_bytes([got[0], got[1]]), u16::from_le_bytes([got[2], got[3]])];
            assert_eq!(got, want, "{name}");
        }
        let err = place_weights(&file, &[spec("a", DType::BF16)], device, &mut |_, _| {}).err().unwrap();
        assert!(
            err.to_string().contains("tensor 'a' is f32 [2, 1, 1, 1] but the model expects bf16 [2, 1, 1, 1]"),
            "{err}"
        );
    }

    /// Weights joined from parts: rows of two matrices as one (f32 as stored, and rounded to
    /// f16), two vectors as one; parts whose rows differ from the weight's are refused, naming
    /// the part and the weight.
    #[test]
    fn weights_joined_from_parts_hold_their_rows_in_order() {
        let header = br#"{"p0":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"p1":{"dtype":"F32","shape":[1,2],"data_offsets":[16,24]},"v0":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},"v1":{"dtype":"F16","shape":[2],"data_offsets":[32,36]}}"#;
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        for v in [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        for bits in [0x4880u16, 0x4900] {
            bytes.extend_from_slice(&bits.to_le_bytes()); // 9 and 10 in f16
        }
        let file = ModelFile::open(write("joined.safetensors", &bytes)).unwrap();
        let device: &'static dyn Device = &tessera_cpu::CPU_DEVICE;
        let rows = ["p0".to_string(), "p1".to_string()];
        let vectors = ["v0".to_string(), "v0".to_string()];
        // Parts stored in different float types, each converted.
        let mixed = ["v0".to_string(), "v1".to_string()];
        let specs = [
            WeightSpec { name: "m", parts: &rows, dtype: DType::F32, ne: [2, 3, 1, 1] },
            WeightSpec { name: "h", parts: &rows, dtype: DType::F16, ne: [2, 3, 1, 1] },
            WeightSpec { name: "v", parts: &vectors, dtype: DType::F32, ne: [4, 1, 1, 1] },
            WeightSpec { name: "x32", parts: &mixed, dtype: DType::F32, ne: [4, 1, 1, 1] },
            WeightSpec { name: "x16", parts: &mixed, dtype: DType::F16, ne: [4, 1, 1, 1] },
        ];
        let store = place_weights(&file, &specs, device, &mut |_, _| {}).unwrap();
        assert_eq!(store.bytes, 24 + 12 + 16 + 16 + 8);
        let values = |name: &str, n: usize, dtype: DType| {
            let at = store.get(name).unwrap();
            let mut raw = vec![0u8; n * dtype.block_bytes()];
            at.buffer.get_bytes(at.offset, &mut raw).unwrap();
            let mut out = vec![0f32; n];
            tessera_core::convert::row_to_f32(dtype, &raw, &mut out);
            out
        };
        assert_eq!(values("m", 6, DType::F32), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(values("h", 6, DType::F16), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(values("v", 4, DType::F32), [7.0, 8.0, 7.0, 8.0]);
        assert_eq!(values("x32", 4, DType::F32), [7.0, 8.0, 9.0, 10.0]);
        assert_eq!(values("x16", 4, DType::F16), [7.0, 8.0, 9.0, 10.0]);
        let wrong = [WeightSpec { name: "w", parts: &rows, dtype: DType::F32, ne: [2, 4, 1, 1] }];
        let err = place_weights(&file, &wrong, device, &mut |_, _| {}).err().unwrap();
        assert!(
            err.to_string().contains("tensor 'p0' (a part of 'w') is f32 [2, 2, 1, 1] but the model expects"),
            "{err}"
        );
    }

    #[test]
    fn a_tensor_of_another_file_is_an_error_not_a_panic() {
        let path = write("one.safetensors", &safetensors_bytes());
        let file = ModelFile::open(&path).unwrap();
        assert_eq!(file.data(&file.tensors()[0]).unwrap(), &[0, 0, 128, 63, 0, 0, 0, 64]);
        let foreign = FileTensor { offset: 1 << 40, ..file.tensors()[0].clone() };
        let err = file.data(&foreign).unwrap_err();
        assert!(matches!(err, Error::File { .. }), "{err:?}");
        assert!(err.to_string().contains("tensor 'a' (f32 [2, 1, 1, 1], bytes 1099511627776..+8) is not one"), "{err}");
        let other = FileTensor { name: "b".into(), ..file.tensors()[0].clone() };
        assert!(file.data(&other).is_err());
    }

    #[test]
    fn a_truncated_safetensors_file_is_reported_as_truncated() {
        let whole = safetensors_bytes();
        let err = ModelFile::open(write("data-cut.safetensors", &whole[..whole.len() - 3])).err().unwrap();
        let message = err.to_string();
        assert!(
            message.contains("data-cut.safetensors: truncated safetensors file: its header describes"),
            "{message}"
        );
        let err = ModelFile::open(write("header-cut.safetensors", &whole[..20])).err().unwrap();
        assert!(err.to_string().contains("truncated safetensors file: its header is"), "{err}");
        let err = ModelFile::open(write("text.safetensors", b"hello, this is not a model")).err().unwrap();
        assert!(err.to_string().contains("not a GGUF or safetensors file"), "{err}");
    }

    #[test]
    fn gguf_errors_name_the_file() {
        let err = ModelFile::open(write("bad.gguf", b"GGUF\x03\0\0\0")).err().unwrap();
        let message = err.to_string();
        assert!(matches!(err, Error::File { .. }), "{err:?}");
        assert!(message.contains("bad.gguf: malformed GGUF ("), "{message}");
    }
}
