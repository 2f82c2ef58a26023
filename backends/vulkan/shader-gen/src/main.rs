//! Compiles tessera-vulkan's GLSL compute shaders (`backends/vulkan/shaders/*.comp`) into the
//! SPIR-V the backend embeds (`backends/vulkan/shaders/bin/*.spv`), with the vendored glslang
//! of the `glslang` crate: a pinned compiler whose output is the same on every machine, so the
//! committed binaries can be checked against their sources.
//!
//! `tessera-vulkan-shaders [--check] SHADER_DIR`: without `--check`, writes every binary
//! (and removes binaries no source makes); with it, compiles in memory and fails listing
//! every binary that is missing, stale or left over.
//!
//! Each `NAME.comp` gives `NAME.spv`. A source may ask for more variants with lines
//! `// variant: SUFFIX DEFINE=VALUE ...`, each giving `NAME_SUFFIX.spv` compiled with those
//! macros. A source whose extensions need SPIR-V 1.6 says so with a line
//! `// target: vulkan1.3` (the device must then offer Vulkan 1.3). `#include "FILE"` lines
//! are replaced by that file of the shader directory (once each), so sources share their
//! helpers without an include callback.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use glslang::{Compiler, CompilerOptions, ShaderInput, ShaderMessage, ShaderSource, ShaderStage, SourceLanguage};
use glslang::{SpirvVersion, Target, VulkanVersion};

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("usage: tessera-vulkan-shaders [--check] SHADER_DIR");
                return ExitCode::SUCCESS;
            }
            _ => dir = Some(PathBuf::from(arg)),
        }
    }
    let Some(dir) = dir else {
        eprintln!("usage: tessera-vulkan-shaders [--check] SHADER_DIR");
        return ExitCode::FAILURE;
    };
    match run(&dir, check) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tessera-vulkan-shaders: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(dir: &Path, check: bool) -> Result<(), String> {
    let compiled = compile_all(dir)?;
    let bin = dir.join("bin");
    let existing: BTreeSet<String> = match fs::read_dir(&bin) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| n.ends_with(".spv"))
            .collect(),
        Err(_) => BTreeSet::new(),
    };
    let mut problems = Vec::new();
    if !check {
        fs::create_dir_all(&bin).map_err(|e| format!("creating {}: {e}", bin.display()))?;
    }
    for (name, words) in &compiled {
        let file = format!("{name}.spv");
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let path = bin.join(&file);
        if check {
            match fs::read(&path) {
                Ok(old) if old == bytes => {}
                Ok(_) => problems.push(format!("{file} differs from its source")),
                Err(_) => problems.push(format!("{file} is missing")),
            }
        } else if fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            fs::write(&path, &bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
            println!("wrote {file}");
        }
    }
    for file in existing {
        let name = file.trim_end_matches(".spv");
        if !compiled.contains_key(name) {
            if check {
                problems.push(format!("{file} has no source"));
            } else {
                fs::remove_file(bin.join(&file)).map_err(|e| format!("removing {file}: {e}"))?;
                println!("removed {file}");
            }
        }
    }
    if problems.is_empty() {
        println!("{} shader binaries {}", compiled.len(), if check { "match their sources" } else { "up to date" });
        Ok(())
    } else {
        Err(format!(
            "the committed SPIR-V does not match the sources (run scripts/build-vulkan-shaders.sh):\n  {}",
            problems.join("\n  ")
        ))
    }
}

/// Every binary by name, compiled from the `.comp` files of `dir`.
fn compile_all(dir: &Path) -> Result<BTreeMap<String, Vec<u32>>, String> {
    let compiler = Compiler::acquire().ok_or("glslang failed to initialise")?;
    let mut sources: Vec<PathBuf> = fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "comp"))
        .collect();
    sources.sort();
    let mut out = BTreeMap::new();
    for path in sources {
        let stem = path.file_stem().and_then(|s| s.to_str()).ok_or("a shader file name is not UTF-8")?;
        let text = fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let expanded = expand_includes(dir, &text, &mut BTreeSet::new())?;
        let vulkan13 = text.lines().any(|l| l.trim() == "// target: vulkan1.3");
        let mut variants = variants(&text);
        if variants.is_empty() {
            variants.push((String::new(), Vec::new()));
        }
        for (suffix, defines) in variants {
            let name = if suffix.is_empty() { stem.to_string() } else { format!("{stem}_{suffix}") };
            let words = compile(compiler, &expanded, &defines, vulkan13).map_err(|e| format!("{name}: {e}"))?;
            out.insert(name, words);
        }
    }
    Ok(out)
}

/// The `// variant: SUFFIX A=1 B=2` lines of a source.
fn variants(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("// variant:"))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let suffix = words.next()?.to_string();
            let defines = words
                .map(|w| match w.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (w.to_string(), "1".to_string()),
                })
                .collect();
            Some((suffix, defines))
        })
        .collect()
}

/// `text` with each `#include "FILE"` replaced by that file of `dir` (a file included twice
/// is inserted once).
fn expand_includes(dir: &Path, text: &str, seen: &mut BTreeSet<String>) -> Result<String, String> {
    let mut out = String::new();
    for line in text.lines() {
        let include = line.trim().strip_prefix("#include").map(|r| r.trim().trim_matches('"').to_string());
        match include {
            Some(file) => {
                if seen.insert(file.clone()) {
                    let path = dir.join(&file);
                    let body = fs::read_to_string(&path).map_err(|e| format!("including {}: {e}", path.display()))?;
                    out.push_str(&expand_includes(dir, &body, seen)?);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    Ok(out)
}

fn compile(compiler: &Compiler, text: &str, defines: &[(String, String)], vulkan13: bool) -> Result<Vec<u32>, String> {
    let source = ShaderSource::from(text.to_string());
    let target = if vulkan13 {
        Target::Vulkan { version: VulkanVersion::Vulkan1_3, spirv_version: SpirvVersion::SPIRV1_6 }
    } else {
        Target::Vulkan { version: VulkanVersion::Vulkan1_2, spirv_version: SpirvVersion::SPIRV1_5 }
    };
    let options = CompilerOptions {
        source_language: SourceLanguage::GLSL,
        target,
        version_profile: None,
        messages: ShaderMessage::DEFAULT,
    };
    let defines: Vec<(&str, Option<&str>)> = defines.iter().map(|(k, v)| (k.as_str(), Some(v.as_str()))).collect();
    let input = ShaderInput::new(&source, ShaderStage::Compute, &options, Some(&defines[..]), None)
        .map_err(|e| e.to_string())?;
    let shader = compiler.create_shader(input).map_err(|e| e.to_string())?;
    shader.compile().map_err(|e| e.to_string())
}
