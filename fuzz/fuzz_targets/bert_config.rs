//! The BERT model builder on arbitrary GGUF metadata: `bert.*` keys of any type and value
//! (missing, zero, huge, NaN, a string where a count belongs), tensors of arbitrary small
//! shapes, arbitrary token layouts. Reading the config and building the graph give `Ok` or a
//! typed error, never a panic, an overflow or an allocation abort.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tessera::gguf::Gguf;
use tessera::runtime::gguf_writer::{GgufWriter, MetaValue};
use tessera::{DType, Graph};
use tessera_models::bert::{self, Layout};
use tessera_models::BertConfig;

const KEYS: [&str; 6] = [
    "bert.attention.head_count",
    "bert.embedding_length",
    "bert.block_count",
    "bert.feed_forward_length",
    "bert.attention.layer_norm_epsilon",
    "bert.context_length",
];

#[derive(Arbitrary, Debug)]
enum Meta {
    U32(u32),
    U64(u64),
    I32(i32),
    F32(f32),
    Bool(bool),
    Text(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// (index into KEYS, value) pairs; absent keys stay absent.
    metadata: Vec<(u8, Meta)>,
    /// Layers whose tensors are written, and a small shape for each of the tensors.
    layers: u8,
    dims: Vec<(u8, u8)>,
    /// A config given directly to the builder (any values at all).
    raw: [u64; 7],
    raw_eps: f32,
    lens: Vec<u8>,
    padded: bool,
}

fn meta_value(m: &Meta) -> MetaValue {
    match m {
        Meta::U32(v) => MetaValue::U32(*v),
        Meta::U64(v) => MetaValue::U64(*v),
        Meta::I32(v) => MetaValue::I32(*v),
        Meta::F32(v) => MetaValue::F32(*v),
        Meta::Bool(v) => MetaValue::Bool(*v),
        Meta::Text(v) => MetaValue::String(v.clone()),
    }
}

/// The names of the weights of a model with `layers` layers, as the builder declares them.
fn weight_names(layers: usize) -> Vec<String> {
    let mut g = Graph::new();
    let c = BertConfig { layers, ..BertConfig::MINILM_L6 };
    bert::build(&mut g, &c, &bert::uniform_weight_type(DType::F32), Layout::packed(&[1]))
        .map(|m| m.weights.into_iter().map(|(name, _, _)| name).collect())
        .unwrap_or_default()
}

fn layout(lens: &[u8], padded: bool) -> Layout {
    let lens: Vec<usize> = lens.iter().take(8).map(|&l| usize::from(l) + 1).collect();
    match (padded, lens.iter().max()) {
        (true, Some(&tokens)) => Layout::padded(tokens, lens.len()),
        _ => Layout::packed(&lens),
    }
}

fuzz_target!(|input: Input| {
    // A GGUF file with the metadata and tensors asked for.
    let mut w = GgufWriter::new();
    w.add_string("general.architecture", "bert");
    for (key, value) in input.metadata.iter().take(12) {
        w.add_value(KEYS[usize::from(*key) % KEYS.len()], meta_value(value));
    }
    let names = weight_names(usize::from(input.layers % 3) + 1);
    for (i, name) in names.iter().enumerate() {
        let (a, b) = input.dims.get(i).copied().unwrap_or((8, 8));
        let ne = [usize::from(a % 17), usize::from(b % 17)];
        let zeros = vec![0.0f32; ne[0] * ne[1]];
        if w.add_tensor_f32(name, DType::F32, &ne, &zeros).is_err() {
            return;
        }
    }
    let bytes = w.to_bytes();
    let gguf = Gguf::parse(&bytes).expect("the writer's output parses");
    let layout = layout(&input.lens, input.padded);
    if let Ok(config) = BertConfig::from_gguf(&gguf, "fuzz.gguf") {
        let dtype_of = |name: &str| gguf.tensors().iter().find(|t| t.name() == name).map_or(DType::F32, |t| t.dtype());
        let _ = bert::build(&mut Graph::new(), &config, &dtype_of, layout);
    }

    // The builder on a config of any values: validated, never divided or multiplied unchecked.
    let r = input.raw.map(|v| usize::try_from(v).unwrap_or(usize::MAX));
    let raw = BertConfig {
        vocab: r[0],
        max_positions: r[1],
        type_vocab: r[2],
        hidden: r[3],
        heads: r[4],
        layers: r[5] % 4,
        intermediate: r[6],
        eps: input.raw_eps,
    };
    if raw.validate().is_ok() {
        let _ = bert::build(&mut Graph::new(), &raw, &bert::uniform_weight_type(DType::F32), layout);
    } else {
        assert!(bert::build(&mut Graph::new(), &raw, &bert::uniform_weight_type(DType::F32), layout).is_err());
    }
});
