//! The classifier against the training script: same accuracy, image by image agreement, for
//! both weight files; and the errors a wrong file gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use edge_digits::{evaluate, Classifier, Error, TestSet, MODEL_F32, MODEL_Q8_0, TEST_SET};
use tessera_core::DType;

fn check(file: &'static [u8], dtype: DType) {
    let set = TestSet::parse(TEST_SET).unwrap();
    assert_eq!(set.len(), 360);
    let mut classifier = Classifier::new(file).unwrap();
    assert_eq!(classifier.weight_type(), dtype);
    let e = evaluate(&mut classifier, &set).unwrap();
    assert_eq!(e.total, 360);
    let diff = (e.accuracy() - e.python_accuracy()).abs();
    assert!(diff <= 0.005, "{dtype}: accuracy {} vs the script's {}", e.accuracy(), e.python_accuracy());
    // Summation order differs from numpy's; a near-tie may flip, no more than one image.
    assert!(e.agree_with_python + 1 >= e.total, "{dtype}: {} of {} agree", e.agree_with_python, e.total);
    assert!(e.accuracy() > 0.95, "{dtype}: accuracy {}", e.accuracy());
}

#[test]
fn f32_weights_match_the_training_script() {
    check(MODEL_F32, DType::F32);
}

#[test]
fn q8_0_weights_match_the_training_script() {
    check(MODEL_Q8_0, DType::Q8_0);
}

#[test]
fn logits_rank_the_predicted_label_first() {
    let set = TestSet::parse(TEST_SET).unwrap();
    let mut classifier = Classifier::new(MODEL_Q8_0).unwrap();
    for sample in set.iter().take(20) {
        let label = classifier.classify(sample.pixels).unwrap();
        let logits = classifier.logits().unwrap();
        let best = (0..10).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap();
        assert_eq!(usize::from(label), best, "{logits:?}");
    }
}

#[test]
fn other_files_are_typed_errors() {
    // A valid GGUF file of another architecture.
    static OTHER: &[u8] = include_bytes!("../../../tests/data/gguf/python_writer.gguf");
    let err = Classifier::new(OTHER).err().unwrap();
    assert!(matches!(err, Error::Model(_)), "{err}");
    assert_eq!(err.to_string(), "model: general.architecture is not 'digits-mlp'");
    // A truncated model file.
    let err = Classifier::new(&MODEL_Q8_0[..100]).err().unwrap();
    assert!(matches!(err, Error::Engine(tessera_core::Error::Gguf { .. })), "{err}");
    // Test sets.
    assert!(matches!(TestSet::parse(b"TDIG"), Err(Error::TestSet { .. })));
    assert!(matches!(TestSet::parse(&TEST_SET[..TEST_SET.len() - 1]), Err(Error::TestSet { offset: 8, .. })));
    let mut bad = TEST_SET.to_vec();
    bad[0] = b'X';
    assert!(matches!(TestSet::parse(&bad), Err(Error::TestSet { offset: 0, .. })));
}
