//! The modules of a Llama model, for per-module device placement
//! (`--backend embed=cpu,blk.0-7=cpu,blk.8-15=cuda0,head=cuda0`).

use tessera_std::placement::ModuleDecl;

/// A part of a Llama model that can run, and keep its weights, on a device of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LlamaModule {
    /// The token embedding table.
    Embed,
    /// The transformer blocks, placeable one by one (`blk.3=cuda0`).
    Blocks,
    /// The output norm and the projection to the vocabulary.
    Head,
}

impl LlamaModule {
    pub const ALL: [LlamaModule; 3] = [LlamaModule::Embed, LlamaModule::Blocks, LlamaModule::Head];

    pub const fn name(self) -> &'static str {
        match self {
            LlamaModule::Embed => "embed",
            LlamaModule::Blocks => "blk",
            LlamaModule::Head => "head",
        }
    }

    /// Other names users may give the module.
    pub const fn aliases(self) -> &'static [&'static str] {
        match self {
            LlamaModule::Embed => &["token_embd", "embeddings"],
            LlamaModule::Blocks => &["blocks", "layers"],
            LlamaModule::Head => &["output"],
        }
    }

    /// Its index in [`LlamaModule::ALL`], [`LLAMA_MODULES`] and a resolved placement's lists.
    pub const fn index(self) -> usize {
        self as usize
    }

    const fn decl(self) -> ModuleDecl {
        ModuleDecl { name: self.name(), aliases: self.aliases(), layered: matches!(self, LlamaModule::Blocks) }
    }
}

/// The modules as placement declares them, in [`LlamaModule::ALL`]'s order.
pub const LLAMA_MODULES: [ModuleDecl; 3] =
    [LlamaModule::Embed.decl(), LlamaModule::Blocks.decl(), LlamaModule::Head.decl()];

/// The placement `--n-gpu-layers n` asks for on a model of `layers` blocks: the last `n`
/// blocks and the head on `gpu`, everything else on the CPU (weights where they run).
pub fn gpu_layers_spec(n: usize, layers: usize, gpu: &str) -> String {
    let n = n.min(layers);
    if n == 0 {
        return "cpu".into();
    }
    let first = layers - n;
    if first == 0 {
        return gpu.into();
    }
    format!("cpu,blk.{first}-{}={gpu},head={gpu}", layers - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_follow_the_module_order() {
        for m in LlamaModule::ALL {
            assert_eq!(LLAMA_MODULES[m.index()].name, m.name());
        }
    }

    #[test]
    fn gpu_layers_put_the_last_blocks_and_the_head_on_the_gpu() {
        assert_eq!(gpu_layers_spec(0, 16, "cuda0"), "cpu");
        assert_eq!(gpu_layers_spec(8, 16, "cuda0"), "cpu,blk.8-15=cuda0,head=cuda0");
        assert_eq!(gpu_layers_spec(16, 16, "cuda0"), "cuda0");
        assert_eq!(gpu_layers_spec(99, 16, "gpu"), "gpu");
    }
}
