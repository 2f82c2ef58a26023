//! The files `scripts/train_digits.py` writes, compiled into the program.

/// Bytes aligned for tensor data: GGUF aligns each tensor to 32 bytes within the file, so a
/// file that starts on a 64-byte boundary keeps its tensors aligned in memory too.
#[repr(C, align(64))]
struct Aligned<T: ?Sized>(T);

static F32_FILE: &Aligned<[u8]> = &Aligned(*include_bytes!("../model/digits-f32.gguf"));
static Q8_0_FILE: &Aligned<[u8]> = &Aligned(*include_bytes!("../model/digits-q8_0.gguf"));
static TEST_FILE: &Aligned<[u8]> = &Aligned(*include_bytes!("../model/digits-test.bin"));

/// The classifier with F32 weights (GGUF).
pub static MODEL_F32: &[u8] = &F32_FILE.0;
/// The classifier with Q8_0 weight matrices and F32 biases (GGUF).
pub static MODEL_Q8_0: &[u8] = &Q8_0_FILE.0;
/// The held-out images with their labels and the training script's predictions
/// (see [`TestSet`](crate::TestSet)).
pub static TEST_SET: &[u8] = &TEST_FILE.0;
