//! What the example programs share: standard output that never panics, a line for each
//! plugin a program loaded saying where it came from, and seeded batches of token ids. Each program includes this module
//! (`#[macro_use] #[path = "common/mod.rs"] mod common;`) and uses what it needs.
#![allow(dead_code, unused_macros)]

/// `println!` for standard output that may be closed (`program | head -1`): see [`out::line`].
macro_rules! outln {
    () => {
        $crate::common::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::common::out::line(format_args!($($arg)*))
    };
}

/// `print!` likewise.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::common::out::text(format_args!($($arg)*))
    };
}

pub mod out {
    use std::fmt;
    use std::io::Write;

    /// Writes a line to standard output. When the reader has gone (a closed pipe) the program
    /// stops quietly with the status a shell gives a program ended by SIGPIPE (141); any
    /// other write error stops it with a message. `println!` would panic in both cases.
    pub fn line(args: fmt::Arguments<'_>) {
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.write_all(b"\n")) {
            stop(e);
        }
    }

    /// Writes text (no newline) to standard output, as [`line`] does.
    pub fn text(args: fmt::Arguments<'_>) {
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
            stop(e);
        }
    }

    /// Writes raw bytes (a token's piece of UTF-8 text) to standard output, as [`line`] does.
    pub fn bytes(bytes: &[u8]) {
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
            stop(e);
        }
    }

    /// Flushes standard output, as [`line`] writes.
    pub fn flush() {
        if let Err(e) = std::io::stdout().flush() {
            stop(e);
        }
    }

    fn stop(e: std::io::Error) -> ! {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        let program = std::env::args().next().unwrap_or_default();
        let name = std::path::Path::new(&program).file_name().map_or_else(String::new, |n| n.to_string_lossy().into());
        eprintln!("{name}: writing to standard output: {e}");
        std::process::exit(1);
    }
}

/// Says on standard error where each plugin the registry loaded came from, and which plugin
/// directories it was told about but could not search.
pub fn report_plugins(registry: &tessera::runtime::RuntimeRegistry) {
    use tessera::runtime::Origin;
    for entry in registry.regs() {
        if let Origin::Plugin { path, score } = entry.origin() {
            eprintln!("loaded plugin {} from {} (score {score})", entry.name(), path.display());
        }
    }
    for s in registry.skipped().iter().filter(|s| s.family.is_none()) {
        eprintln!("plugin directory {s}");
    }
}

/// `batch` sequences of `tokens` ids for a BERT vocabulary of `vocab` (seeded, so every run
/// gets the same): [CLS], random ids of ordinary words, [SEP].
pub fn random_tokens(batch: usize, tokens: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (cls, sep, first_word) = (101, 102, 1000.min(vocab.saturating_sub(1)));
    (0..batch)
        .map(|_| {
            (0..tokens)
                .map(|i| match i {
                    0 => cls,
                    _ if i + 1 == tokens => sep,
                    _ => (first_word + next() as usize % (vocab - first_word).max(1)) as u32,
                })
                .collect()
        })
        .collect()
}

/// `--compute-type f32|f16`: the precision of the layers whose attention is one FLASH_ATTN node
/// (f16: products with 10-bit mantissas and f32 sums, as half-precision attention, keys, values,
/// attention's result and the feed-forward's hidden values in f16, GELU's tanh form).
pub fn compute_type(value: &str) -> Result<tessera::Precision, String> {
    match value {
        "f32" => Ok(tessera::Precision::Full),
        "f16" => Ok(tessera::Precision::Reduced),
        other => Err(format!("--compute-type: '{other}' is not f32 or f16")),
    }
}
