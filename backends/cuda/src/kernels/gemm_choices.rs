//! The cuBLASLt algorithms chosen by timing, kept in a file across processes, so that a
//! program's first products at a shape take the algorithm an earlier run chose (no timing,
//! no wide search's kernel loads, the same choice and so the same rounding every run).
//!
//! The file (`TESSERA_CUDA_GEMM_CACHE`, else `$XDG_CACHE_HOME/tessera/cuda-gemm-choices`, else
//! `$HOME/.cache/tessera/cuda-gemm-choices`; `TESSERA_CUDA_GEMM_CACHE=0` keeps none) holds one
//! line per choice, appended as it is made: the GPU, driver and cuBLASLt version it was timed
//! with, the product's shape, and the algorithm's 64 bytes (cuBLASLt documents the algorithm
//! structure as plain data that one version of the library restores). Lines of another GPU,
//! driver or library version, and lines that do not parse, are skipped; a later line for a
//! shape replaces an earlier one. The file is a cache: a choice read back is checked with the
//! library (`cublasLtMatmulAlgoCheck`) before use, and a file that cannot be read or written
//! only means timing again.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The words of a `cublasLtMatmulAlgo_t`.
pub(crate) type AlgoWords = [u64; 8];

/// The choices saved for one GPU and library version.
pub(crate) struct SavedChoices {
    file: Option<PathBuf>,
    /// The GPU and library the choices hold for: the first field of their lines.
    device: String,
    saved: HashMap<String, AlgoWords>,
}

/// The file named by the environment, if any.
fn file_from_env() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(path) = var("TESSERA_CUDA_GEMM_CACHE") {
        return (path != "0").then(|| PathBuf::from(path));
    }
    let dir = var("XDG_CACHE_HOME").map(PathBuf::from).or_else(|| var("HOME").map(|h| Path::new(&h).join(".cache")))?;
    Some(dir.join("tessera").join("cuda-gemm-choices"))
}

impl SavedChoices {
    /// The choices the environment's file holds for `device` (the GPU and library version, in
    /// words: tabs and line breaks become spaces).
    pub(crate) fn open(device: &str) -> SavedChoices {
        SavedChoices::at(file_from_env(), device)
    }

    /// The choices `file` holds for `device`; none where it is `None` or unreadable.
    pub(crate) fn at(file: Option<PathBuf>, device: &str) -> SavedChoices {
        let device = one_field(device);
        let text = file.as_deref().and_then(|f| std::fs::read_to_string(f).ok()).unwrap_or_default();
        let saved = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                let (d, shape, words) = (fields.next()?, fields.next()?, fields.next()?);
                (d == device && fields.next().is_none()).then_some(())?;
                Some((shape.to_string(), parse_words(words)?))
            })
            .collect();
        SavedChoices { file, device, saved }
    }

    /// The choice saved for `shape`.
    pub(crate) fn get(&self, shape: &str) -> Option<AlgoWords> {
        self.saved.get(shape).copied()
    }

    /// Keeps `algo` for `shape`, appending it to the file (one write of one line, so that
    /// processes saving at once do not interleave within a line). A file that cannot be
    /// written keeps the choice for this process only.
    pub(crate) fn save(&mut self, shape: &str, algo: AlgoWords) {
        if self.saved.get(shape) == Some(&algo) {
            return;
        }
        self.saved.insert(shape.to_string(), algo);
        let Some(file) = &self.file else { return };
        let mut line = format!("{}\t{}\t", self.device, one_field(shape));
        for w in algo {
            // Writing to a String cannot fail.
            let _ = write!(line, "{w:016x}");
        }
        line.push('\n');
        if let Some(dir) = file.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let appended = std::fs::OpenOptions::new().create(true).append(true).open(file);
        // A cache: failing to write it is not an error of the product.
        let _ = appended.and_then(|mut f| f.write_all(line.as_bytes()));
    }
}

/// `text` as one field of a line: no tabs or line breaks.
fn one_field(text: &str) -> String {
    text.replace(['\t', '\n', '\r'], " ")
}

/// Eight words of 16 hexadecimal digits each.
fn parse_words(hex: &str) -> Option<AlgoWords> {
    if hex.len() != 8 * 16 || !hex.is_ascii() {
        return None;
    }
    let mut words = [0u64; 8];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u64::from_str_radix(&hex[16 * i..16 * (i + 1)], 16).ok()?;
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tessera-gemm-choices-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("nested").join("choices")
    }

    #[test]
    fn a_saved_choice_is_read_back_by_the_next_process_of_that_gpu_only() {
        let file = temp_file("round-trip");
        let algo = [1, 2, 3, u64::MAX, 0, 7, 8, 0x0123_4567_89ab_cdef];
        let mut first = SavedChoices::at(Some(file.clone()), "GPU A sm90 132 lt 130000");
        assert_eq!(first.get("384x1024x384"), None);
        first.save("384x1024x384", algo);
        first.save("384x1024x384", algo); // the same choice again adds no line
        assert_eq!(first.get("384x1024x384"), Some(algo));
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");

        let again = SavedChoices::at(Some(file.clone()), "GPU A sm90 132 lt 130000");
        assert_eq!(again.get("384x1024x384"), Some(algo));
        let other_gpu = SavedChoices::at(Some(file.clone()), "GPU B sm89 128 lt 130000");
        assert_eq!(other_gpu.get("384x1024x384"), None);
        let other_library = SavedChoices::at(Some(file.clone()), "GPU A sm90 132 lt 130100");
        assert_eq!(other_library.get("384x1024x384"), None);
        let _ = std::fs::remove_dir_all(file.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn malformed_lines_are_skipped_and_a_later_choice_replaces_an_earlier_one() {
        let file = temp_file("malformed");
        let (old, new) = ([5; 8], [6; 8]);
        let mut choices = SavedChoices::at(Some(file.clone()), "GPU\tA\n");
        choices.save("shape\t1", old);
        choices.save("shape\t1", new);
        let good = std::fs::read_to_string(&file).unwrap();
        let line = good.lines().next().unwrap().to_string();
        let damaged = [
            "",
            "GPU A ",
            "GPU A \tshape 1",
            &line[..line.len() - 1],
            &format!("{line}0"),
            &format!("{line}\textra"),
            &line.replace("0000000000000005", "000000000000000g"),
            &line.replace("0000000000000005", "00000000000000é"),
        ];
        std::fs::write(&file, format!("{}\n{good}", damaged.join("\n"))).unwrap();
        let read = SavedChoices::at(Some(file.clone()), "GPU\tA\n");
        assert_eq!(read.get("shape 1"), Some(new));
        assert_eq!(read.saved.len(), 1);
        let _ = std::fs::remove_dir_all(file.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn no_file_or_an_unwritable_one_keeps_the_choices_in_the_process() {
        let mut none = SavedChoices::at(None, "GPU");
        none.save("s", [1; 8]);
        assert_eq!(none.get("s"), Some([1; 8]));
        let dir = temp_file("unwritable");
        std::fs::create_dir_all(&dir).unwrap();
        // A directory where the file should be: reading and appending fail.
        let mut blocked = SavedChoices::at(Some(dir.clone()), "GPU");
        blocked.save("s", [2; 8]);
        assert_eq!(blocked.get("s"), Some([2; 8]));
        let _ = std::fs::remove_dir_all(dir.parent().unwrap().parent().unwrap());
    }
}
