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
        // Most likely first, ties to the lowest id: a total order, so selecting the top k
        // before sorting them gives what sorting everything would.
        let order = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if s.top_k > 0 && s.top_k < c.len() {
            c.select_nth_unstable_by(s.top_k - 1, order);
            c.truncate(s.top_k);
        }
        c.sort_unstable_by(order);
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
/// Two passes: the largest value, kept in lanes that the compiler turns into vector maxima, then
/// its first place. A running best index would make every step wait on the comparison before
/// it, which took about 70 us over a 32000-token vocabulary.
pub fn greedy(logits: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (m, &l) in lanes.iter_mut().zip(chunk) {
            *m = m.max(l); // `max` ignores a NaN operand
        }
    }
    let max = lanes.iter().chain(rest).fold(f32::NEG_INFINITY, |m, &l| m.max(l));
    let Some((c, chunk)) = logits.chunks(LANES).enumerate().find(|(_, c)| c.iter().fold(false, |f, &l| f | (l == max)))
    else {
        return 0; // only NaNs
    };
    (c * LANES + chunk.iter().position(|&l| l == max).unwrap_or(0)) as u32
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
    fn greedy_agrees_with_a_plain_scan() {
        // The scan it replaced: the first index whose logit beats every earlier one, a NaN
        // giving way to any number.
        let scan = |logits: &[f32]| {
            let mut best = 0;
            for (i, &l) in logits.iter().enumerate() {
                if l > logits[best] || logits[best].is_nan() && !l.is_nan() {
                    best = i;
                }
            }
            best as u32
        };
        let mut rng = SplitMix(11);
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 3.0];
        for len in [0usize, 1, 5, 15, 16, 17, 33, 100, 1000] {
            for _ in 0..50 {
                let logits: Vec<f32> = (0..len)
                    .map(|_| {
                        let u = rng.unit();
                        if u < 0.1 {
                            specials[(rng.unit() * specials.len() as f32) as usize % specials.len()]
                        } else {
                            (u * 8.0).floor() // many ties
                        }
                    })
                    .collect();
                assert_eq!(greedy(&logits), scan(&logits), "{logits:?}");
            }
        }
        assert_eq!(greedy(&[f32::NAN; 40]), 0);
        assert_eq!(greedy(&[f32::NAN, f32::NEG_INFINITY]), 1);
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
    fn top_k_picks_only_among_the_k_largest() {
        // Distinct logits 0..300 in shuffled order: the k largest are those of value >= 300 - k.
        let logits: Vec<f32> = (0..300).map(|i| ((i * 7919) % 300) as f32 / 10.0).collect();
        for k in [1, 2, 40, 299, 300, 500] {
            let mut s = Sampler::new(Sampling { temperature: 5.0, top_k: k, top_p: 1.0, seed: 9 }).unwrap();
            let floor = 300usize.saturating_sub(k) as f32 / 10.0;
            assert!((0..200).all(|_| logits[s.pick(&logits) as usize] >= floor), "top-k {k}");
        }
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
