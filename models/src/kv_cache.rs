//! The KV cache: each block's keys and values in buffers of their own on the device the block
//! runs on, allocated once for the whole context and written in place by the graphs.

use std::sync::Arc;

use tessera_core::{Buffer, BufferUsage, Device, TensorData};

use crate::error::{Error, Result};
use crate::llama::CacheShape;
use crate::llama_config::LlamaConfig;

pub struct KvCache {
    shape: CacheShape,
    /// Each block's keys and values.
    layers: Vec<(TensorData, TensorData)>,
    /// Bytes held on each device, by device name, in the order first used.
    per_device: Vec<(String, usize)>,
    /// The buffers, kept alive as long as the cache.
    _buffers: Vec<Arc<dyn Buffer>>,
}

impl KvCache {
    /// A zeroed cache of `shape` for a model of `config`, block `l`'s on `devices[l]`: one
    /// buffer per device where its largest allocation allows, else one per block.
    pub fn new(config: &LlamaConfig, shape: CacheShape, devices: &[&'static dyn Device]) -> Result<KvCache> {
        let half = shape.layer_bytes(config)?;
        let mut layers: Vec<Option<(TensorData, TensorData)>> = vec![None; devices.len()];
        let mut per_device: Vec<(String, usize)> = Vec::new();
        let mut buffers = Vec::new();
        for first in 0..devices.len() {
            if layers[first].is_some() {
                continue;
            }
            let device = devices[first];
            let mine: Vec<usize> = (first..devices.len()).filter(|&l| std::ptr::addr_eq(devices[l], device)).collect();
            let bt = device.buffer_type();
            let align = bt.alignment().max(1);
            let padded = half.div_ceil(align) * align;
            let per_buffer = (bt.max_size() / (2 * padded)).clamp(1, mine.len());
            for group in mine.chunks(per_buffer) {
                let size = 2 * padded * group.len();
                let buffer = bt.alloc_buffer(size)?;
                buffer.set_usage(BufferUsage::Compute);
                buffer.fill(0, size, 0)?;
                for (k, &l) in group.iter().enumerate() {
                    let at = 2 * padded * k;
                    layers[l] = Some((
                        TensorData { buffer: buffer.clone(), offset: at },
                        TensorData { buffer: buffer.clone(), offset: at + padded },
                    ));
                }
                match per_device.iter_mut().find(|(name, _)| name == device.name()) {
                    Some((_, bytes)) => *bytes += size,
                    None => per_device.push((device.name().to_string(), size)),
                }
                buffers.push(buffer);
            }
        }
        let layers =
            layers.into_iter().collect::<Option<Vec<_>>>().ok_or(Error::Engine(tessera_core::Error::Cancelled))?;
        Ok(KvCache { shape, layers, per_device, _buffers: buffers })
    }

    pub fn shape(&self) -> CacheShape {
        self.shape
    }

    /// Block `layer`'s keys and values.
    pub fn layer(&self, layer: usize) -> Option<&(TensorData, TensorData)> {
        self.layers.get(layer)
    }

    /// Bytes held per device name.
    pub fn bytes_per_device(&self) -> &[(String, usize)] {
        &self.per_device
    }
}
