//! Accuracy on the held-out images, and agreement with the training script.

use tessera_core::DType;

use crate::classifier::Classifier;
use crate::error::Error;
use crate::test_set::TestSet;

/// The result of classifying a test set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Evaluation {
    /// Images classified.
    pub total: usize,
    /// Images whose label was predicted.
    pub correct: usize,
    /// Images where the prediction equals the training script's for the same weights.
    pub agree_with_python: usize,
    /// Images the training script classified correctly with the same weights.
    pub python_correct: usize,
}

impl Evaluation {
    /// Fraction of images classified correctly.
    pub fn accuracy(&self) -> f32 {
        ratio(self.correct, self.total)
    }

    /// The training script's accuracy for the same weights.
    pub fn python_accuracy(&self) -> f32 {
        ratio(self.python_correct, self.total)
    }
}

fn ratio(n: usize, d: usize) -> f32 {
    if d == 0 {
        0.0
    } else {
        n as f32 / d as f32
    }
}

/// Classifies every image of `set`, comparing with the labels and with the training
/// script's predictions for the classifier's weight type.
pub fn evaluate(classifier: &mut Classifier, set: &TestSet<'_>) -> Result<Evaluation, Error> {
    let quantized = classifier.weight_type() == DType::Q8_0;
    let mut e = Evaluation::default();
    for sample in set.iter() {
        let predicted = classifier.classify(sample.pixels)?;
        let python = if quantized { sample.python_q8_0 } else { sample.python_f32 };
        e.total += 1;
        e.correct += usize::from(predicted == sample.label);
        e.agree_with_python += usize::from(predicted == python);
        e.python_correct += usize::from(python == sample.label);
    }
    info!(
        "edge-digits: {=usize}/{=usize} correct ({=str} weights), {=usize} agree with the training script",
        e.correct,
        e.total,
        classifier.weight_type().name(),
        e.agree_with_python
    );
    if e.agree_with_python != e.total {
        warn!("edge-digits: {=usize} predictions differ from the training script's", e.total - e.agree_with_python);
    }
    Ok(e)
}
