//! The classifier: a GGUF file bound in place, a graph built once, compute memory planned once.

use alloc::sync::Arc;
use core::fmt::Write;

use tessera_core::allocator::GraphAllocator;
use tessera_core::fallible::try_arc;
use tessera_core::gguf::{Gguf, TensorInfo};
use tessera_core::host_buffer::{HostBuffer, HOST_BUFFER_TYPE};
use tessera_core::{Backend, Buffer, BufferType, DType, Graph, Shape, TensorData, TensorId};
use tessera_cpu::CpuBackend;

use crate::error::{Error, ModelError};

/// Pixels of one image (8 x 8).
pub const PIXELS: usize = 64;
/// Digits 0 to 9.
pub const CLASSES: usize = 10;
/// The most layers a model file may have.
const MAX_LAYERS: usize = 8;
/// The architecture name the training script writes.
const ARCHITECTURE: &str = "digits-mlp";

/// A loaded classifier. Building it allocates everything it keeps (graph, compute buffer,
/// kernel work memory); [`classify`](Classifier::classify) keeps nothing. (The CPU backend's
/// reference kernels still make a short-lived message string per operand on each run, freed
/// at once, so the heap's peak is reached during the first run, inside `new`.)
pub struct Classifier {
    graph: Graph,
    backend: CpuBackend,
    /// Keeps the plan and the compute buffer alive.
    _allocator: GraphAllocator<8, 1>,
    input: TensorId,
    logits: TensorId,
    label: TensorId,
    input_scale: f32,
    weight_type: DType,
    compute_bytes: usize,
}

impl Classifier {
    /// Loads a model from GGUF bytes that live as long as the program (`include_bytes!`):
    /// the weights are used in place, never copied. Then classifies a blank image once, so
    /// that the kernels' work memory is allocated now and classifying allocates no more.
    pub fn new(file: &'static [u8]) -> Result<Classifier, Error> {
        let mut classifier = Classifier::load(file)?;
        classifier.classify(&[0; PIXELS])?;
        Ok(classifier)
    }

    /// [`new`](Classifier::new) without the first run: the first `classify` then allocates
    /// the kernels' work memory.
    pub fn load(file: &'static [u8]) -> Result<Classifier, Error> {
        // The file's tables are dropped before planning: they are not needed any more.
        let Model { mut graph, input, logits, label, input_scale, weight_type, layers } = build(file)?;
        let buffer_type: &'static dyn BufferType = &HOST_BUFFER_TYPE;
        let mut allocator = GraphAllocator::try_new(&[buffer_type])?;
        allocator.alloc(&mut graph, None)?;
        let compute_bytes = allocator.buffer_size(0);
        info!(
            "edge-digits: {=usize} layers, {=str} weights in place ({=usize} B), compute buffer {=usize} B",
            layers,
            weight_type.name(),
            file.len(),
            compute_bytes
        );
        Ok(Classifier {
            graph,
            backend: CpuBackend::new(),
            _allocator: allocator,
            input,
            logits,
            label,
            input_scale,
            weight_type,
            compute_bytes,
        })
    }

    /// The type of the weight matrices (F32 or Q8_0).
    pub fn weight_type(&self) -> DType {
        self.weight_type
    }

    /// Bytes of the planned compute buffer.
    pub fn compute_bytes(&self) -> usize {
        self.compute_bytes
    }

    /// The digit in an 8x8 image of intensities 0..16.
    pub fn classify(&mut self, pixels: &[u8; PIXELS]) -> Result<u8, Error> {
        let mut values = [0u8; PIXELS * 4];
        for (bytes, &p) in values.chunks_exact_mut(4).zip(pixels) {
            bytes.copy_from_slice(&(f32::from(p) * self.input_scale).to_le_bytes());
        }
        self.graph.set_bytes(self.input, 0, &values)?;
        self.backend.compute_graph(&self.graph)?;
        let mut label = [0u8; 4];
        self.graph.get_bytes(self.label, 0, &mut label)?;
        // ARGMAX returns an index below CLASSES.
        Ok(i32::from_le_bytes(label).clamp(0, CLASSES as i32 - 1) as u8)
    }

    /// The scores of the last image classified.
    pub fn logits(&self) -> Result<[f32; CLASSES], Error> {
        let mut bytes = [0u8; CLASSES * 4];
        self.graph.get_bytes(self.logits, 0, &mut bytes)?;
        let mut out = [0f32; CLASSES];
        for (v, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(out)
    }
}

/// The graph of a model file, its weights bound to the file's bytes.
struct Model {
    graph: Graph,
    input: TensorId,
    logits: TensorId,
    label: TensorId,
    input_scale: f32,
    weight_type: DType,
    layers: usize,
}

/// Parses `file`, checks that it is a digits classifier and builds its graph:
/// `x -> [mul_mat(W, x) + b -> relu] ... -> mul_mat(W, x) + b = logits -> argmax = label`.
fn build(file: &'static [u8]) -> Result<Model, Error> {
    let gguf = Gguf::parse(file)?;
    if gguf.get_str("general.architecture")? != ARCHITECTURE {
        return Err(ModelError::Architecture.into());
    }
    let count = gguf.get_u32("digits.layer_count")?;
    let layers = usize::try_from(count).ok().filter(|n| (1..=MAX_LAYERS).contains(n));
    let layers = layers.ok_or(ModelError::LayerCount { count, max: MAX_LAYERS })?;
    let input_scale = gguf.get_f32("digits.input_scale")?;

    // The file, as a read-only buffer the weight tensors point into.
    let weights: Arc<dyn Buffer> = try_arc(HostBuffer::from_static(file))?;
    let mut graph = Graph::new();
    // The input, per layer a weight, bias, product and sum, a RELU between layers, ARGMAX.
    graph.reserve(5 * layers + 1)?;
    let input = graph.new_tensor(DType::F32, &[PIXELS, 1])?;
    graph.set_name(input, "pixels")?;
    graph.set_input(input)?;

    let mut x = input;
    let mut width = PIXELS;
    let mut weight_type = DType::F32;
    for layer in 0..layers {
        let last = layer + 1 == layers;
        let w_info = tensor_info(&gguf, layer, "weight")?;
        let out = if last { CLASSES } else { w_info.ne()[1] };
        check_shape(w_info, layer, "weight", [width, out, 1, 1])?;
        let b_info = tensor_info(&gguf, layer, "bias")?;
        check_shape(b_info, layer, "bias", [out, 1, 1, 1])?;
        weight_type = w_info.dtype();
        let w = bind(&mut graph, &weights, w_info)?;
        let b = bind(&mut graph, &weights, b_info)?;
        x = graph.mul_mat(w, x)?;
        x = graph.add(x, b)?;
        if !last {
            x = graph.relu(x)?;
        }
        width = out;
    }
    let logits = x;
    graph.set_name(logits, "logits")?;
    graph.set_output(logits)?;
    let label = graph.argmax(logits)?;
    graph.set_name(label, "label")?;
    graph.set_output(label)?;
    graph.build_forward(label)?;
    Ok(Model { graph, input, logits, label, input_scale, weight_type, layers })
}

/// `fc{layer}.{part}` of the file.
fn tensor_info<'a, 'g>(gguf: &'g Gguf<'a>, layer: usize, part: &'static str) -> Result<&'g TensorInfo<'a>, Error> {
    let mut name = NameBuf::default();
    write!(name, "fc{layer}.{part}").map_err(|_| ModelError::MissingTensor { layer, part })?;
    gguf.tensor(name.as_str()).ok_or(Error::Model(ModelError::MissingTensor { layer, part }))
}

fn check_shape(info: &TensorInfo<'_>, layer: usize, part: &'static str, expected: [usize; 4]) -> Result<(), Error> {
    if info.ne() == expected {
        Ok(())
    } else {
        Err(ModelError::Shape { layer, part, found: info.shape(), expected: Shape(expected) }.into())
    }
}

/// A leaf for the file's tensor `info`, bound to its bytes in `weights` (no copy).
fn bind(graph: &mut Graph, weights: &Arc<dyn Buffer>, info: &TensorInfo<'_>) -> Result<TensorId, Error> {
    let id = graph.new_tensor(info.dtype(), &info.ne())?;
    graph.set_name(id, info.name())?;
    graph.bind(id, TensorData { buffer: weights.clone(), offset: info.file_offset() })?;
    Ok(id)
}

/// A tensor name built on the stack.
#[derive(Default)]
struct NameBuf {
    bytes: [u8; 24],
    len: usize,
}

impl NameBuf {
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl Write for NameBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len.checked_add(s.len()).filter(|&e| e <= self.bytes.len()).ok_or(core::fmt::Error)?;
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
