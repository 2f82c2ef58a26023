//! Picking the next token from logits: greedy, or seeded sampling with temperature, top-k and
//! top-p (applied in that order, as llama.cpp's common sampler chain does).

use crate::error::{Error, Result};
use crate::splitmix::SplitMix;

/// How to pick tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 picks the most likely token (greedy); otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities sum to at least `top_p` (1: all).
    pub top_p: f32,
    pub seed: u64,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 };

    /// Checks the settings: a finite temperature of 0 or more, `top_p` in (0, 1].
    pub fn check(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::Generation {
                message: format!("temperature {} is not allowed; expected 0 (greedy) or more", self.temperature),
            });
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Generation {
                message: format!("top-p {} is not allowed; expected more than 0, up to 1", self.top_p),
            });
        }
        Ok(())
    }
}

/// A sampler: its settings and random state.
pub struct Sampler {
    settings: Sampling,
    rng: SplitMix,
    /// `(logit, id)` scratch, kept between calls.
    candidates: Vec<(f32, u32)>,
}

impl Sampler {
    pub fn new(settings: Sampling) -> Result<Sampler> {
        settings.check()?;
        Ok(Sampler { settings, rng: SplitMix(settings.seed), candidates: Vec::new() })
    }

    /// The next token given the logits of the last position. Ties and NaNs go to the lowest id.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let s = self.settings;
        if s.temperature == 0.0 {
            return greedy(logits);
        }
        let c = &mut self.candidates;
        c.clear();
        c.extend(logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (l / s.temperature, i as u32)));
        if c.is_empty() {
            return 0;
        }
        c.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        if s.top_k > 0 {
            c.truncate(s.top_k);
        }
        let max = c[0].0;
        let mut sum = 0.0f64;
        for x in c.iter_mut() {
            x.0 = (x.0 - max).exp();
            sum += f64::from(x.0);
        }
        // Top-p: the shortest head whose probability reaches `top_p`.
        let mut kept = 0.0f64;
        let mut keep = c.len();
        for (i, x) in c.iter().enumerate() {
            kept += f64::from(x.0) / sum;
            if kept >= f64::from(s.top_p) {
                keep = i + 1;
                break;
            }
        }
        c.truncate(keep);
        let total: f64 = c.iter().map(|x| f64::from(x.0)).sum();
        let mut r = f64::from(self.rng.unit()) * total;
        for x in c.iter() {
            r -= f64::from(x.0);
            if r < 0.0 {
                return x.1;
            }
        }
        c[c.len() - 1].1
    }
}

/// The index of the largest logit (the lowest on ties; NaNs are never picked unless all are).
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] || logits[best].is_nan() && !l.is_nan() {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn greedy_takes_the_first_largest() {
        assert_eq!(greedy(&[0.5, 2.0, 2.0, -1.0]), 1);
        assert_eq!(greedy(&[f32::NAN, 1.0, 0.0]), 1);
    }

    #[test]
    fn top_k_one_is_greedy_and_seeds_repeat() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 100) as f32 / 10.0).collect();
        let mut s = Sampler::new(Sampling { temperature: 1.0, top_k: 1, top_p: 1.0, seed: 7 }).unwrap();
        assert_eq!(s.pick(&logits), greedy(&logits));
        let draw = |seed| {
            let mut s = Sampler::new(Sampling { temperature: 0.8, top_k: 40, top_p: 0.95, seed }).unwrap();
            (0..20).map(|_| s.pick(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn top_p_keeps_only_the_likely_head() {
        // One token with almost all the probability: top-p 0.5 must always pick it.
        let mut logits = vec![0.0f32; 50];
        logits[17] = 20.0;
        let mut s = Sampler::new(Sampling { temperature: 1.0, top_k: 0, top_p: 0.5, seed: 1 }).unwrap();
        assert!((0..100).all(|_| s.pick(&logits) == 17));
    }

    #[test]
    fn bad_settings_are_errors() {
        assert!(Sampler::new(Sampling { temperature: -1.0, ..Sampling::GREEDY }).is_err());
        assert!(Sampler::new(Sampling { top_p: 0.0, ..Sampling::GREEDY }).is_err());
        assert!(Sampler::new(Sampling { top_p: 1.5, ..Sampling::GREEDY }).is_err());
    }
}
