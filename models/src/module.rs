//! The modules of a BERT model, for per-module device placement (`--backend embed=cpu,...`).

use tessera_std::placement::ModuleDecl;

/// A part of the model that can run, and keep its weights, on a device of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Module {
    Embed,
    Encoder,
    Pool,
}

impl Module {
    pub const ALL: [Module; 3] = [Module::Embed, Module::Encoder, Module::Pool];

    pub const fn name(self) -> &'static str {
        match self {
            Module::Embed => "embed",
            Module::Encoder => "encoder",
            Module::Pool => "pool",
        }
    }

    /// Other names users may give the module.
    pub const fn aliases(self) -> &'static [&'static str] {
        match self {
            Module::Embed => &["embeddings", "embedding"],
            Module::Encoder => &["layers", "transformer"],
            Module::Pool => &["pooling", "pooler"],
        }
    }

    /// Its index in [`Module::ALL`], [`MODULES`] and a resolved placement's lists.
    pub const fn index(self) -> usize {
        self as usize
    }

    const fn decl(self) -> ModuleDecl {
        ModuleDecl { name: self.name(), aliases: self.aliases(), layered: matches!(self, Module::Encoder) }
    }
}

/// The modules as placement declares them, in [`Module::ALL`]'s order: what
/// `Placement::resolve` takes to read `--backend` / `--params-backend`.
pub const MODULES: [ModuleDecl; 3] = [Module::Embed.decl(), Module::Encoder.decl(), Module::Pool.decl()];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_follow_the_module_order() {
        for m in Module::ALL {
            assert_eq!(MODULES[m.index()].name, m.name());
            assert_eq!(MODULES[m.index()].aliases, m.aliases());
        }
    }
}
