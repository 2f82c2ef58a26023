//! The sentences to embed: the command line's, then the lines of each `--file`, read one
//! batch at a time so that a file of any size takes the memory of one batch.

use std::fs::File;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};

/// A sentence and where it came from ("argument 2", "line 17 of sentences.txt").
pub struct Sentence {
    pub text: String,
    pub origin: String,
}

/// The arguments and files, with the number of sentences they hold.
pub struct Input<'a> {
    args: &'a [String],
    files: &'a [PathBuf],
    total: usize,
}

fn lines(path: &Path) -> Result<Lines<BufReader<File>>, String> {
    let file = File::open(path).map_err(|e| format!("--file {}: {e}", path.display()))?;
    Ok(BufReader::new(file).lines())
}

fn read_error(path: &Path, line: usize, e: std::io::Error) -> String {
    format!("--file {}: line {line}: {e}", path.display())
}

impl<'a> Input<'a> {
    /// Counts the sentences (non-blank lines) of the files, reading them once without keeping
    /// them: the total makes the progress bar's scale.
    pub fn open(args: &'a [String], files: &'a [PathBuf]) -> Result<Input<'a>, String> {
        let mut total = args.len();
        for path in files {
            for (i, line) in lines(path)?.enumerate() {
                let line = line.map_err(|e| read_error(path, i + 1, e))?;
                total += usize::from(!line.trim().is_empty());
            }
        }
        Ok(Input { args, files, total })
    }

    pub fn len(&self) -> usize {
        self.total
    }

    /// The sentences in batches of at most `size`.
    pub fn batches(&self, size: usize) -> Batches<'a> {
        Batches { args: self.args, files: self.files, next_arg: 0, next_file: 0, reading: None, size: size.max(1) }
    }
}

/// Batches of sentences, read as they are asked for.
pub struct Batches<'a> {
    args: &'a [String],
    files: &'a [PathBuf],
    next_arg: usize,
    next_file: usize,
    /// The file being read: its path, its lines, the number of the last line read.
    reading: Option<(&'a Path, Lines<BufReader<File>>, usize)>,
    size: usize,
}

impl Batches<'_> {
    /// The next batch, `None` after the last.
    pub fn next_batch(&mut self) -> Result<Option<Vec<Sentence>>, String> {
        let mut batch = Vec::new();
        while batch.len() < self.size {
            match self.next_sentence()? {
                Some(s) => batch.push(s),
                None => break,
            }
        }
        Ok((!batch.is_empty()).then_some(batch))
    }

    fn next_sentence(&mut self) -> Result<Option<Sentence>, String> {
        if let Some(text) = self.args.get(self.next_arg) {
            self.next_arg += 1;
            return Ok(Some(Sentence { text: text.clone(), origin: format!("argument {}", self.next_arg) }));
        }
        loop {
            if let Some((path, lines, number)) = self.reading.as_mut() {
                for line in lines.by_ref() {
                    *number += 1;
                    let line = line.map_err(|e| read_error(path, *number, e))?;
                    let text = line.trim();
                    if !text.is_empty() {
                        let origin = format!("line {number} of {}", path.display());
                        return Ok(Some(Sentence { text: text.to_string(), origin }));
                    }
                }
                self.reading = None;
            }
            let Some(path) = self.files.get(self.next_file) else { return Ok(None) };
            self.next_file += 1;
            self.reading = Some((path.as_path(), lines(path)?, 0));
        }
    }
}
