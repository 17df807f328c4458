//! Deterministic test data shared by the codec's unit tests and `lowp_accuracy`: a small
//! xorshift PRNG, Box-Muller normals and the four input distributions of the accuracy tests.

use super::block::BLOCK;

/// xorshift64* (Vigna): fast, deterministic, good enough for test data.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    spare: Option<f64>,
}

impl Rng {
    /// A generator from any seed (0 is remapped; seeds are mixed by splitmix64).
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Self { state: if z == 0 { 0x2545_F491_4F6C_DD1D } else { z }, spare: None }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * 2f64.powi(-53)
    }

    /// Standard normal (Box-Muller; the second value of each pair is kept for the next call).
    pub fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - self.uniform(); // (0, 1]
        let u2 = self.uniform();
        let r = (-2.0 * u1.ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some(r * t.sin());
        r * t.cos()
    }

    /// Student-t with `dof` degrees of freedom: Z / sqrt(chi2(dof) / dof), dof integer.
    pub fn student_t(&mut self, dof: u32) -> f64 {
        let z = self.normal();
        let chi2: f64 = (0..dof).map(|_| self.normal().powi(2)).sum();
        z / (chi2 / f64::from(dof)).sqrt().max(1e-300)
    }
}

/// The input distributions of the accuracy tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dist {
    /// Standard normal.
    Gaussian,
    /// Student-t with 3 degrees of freedom (heavy tails).
    StudentT3,
    /// Normal times a per-128-block magnitude 10^u, u uniform in [-6, 0] (10^6 spread
    /// between blocks).
    MixedScale,
    /// Per element, magnitude 10^u with u uniform in [-6, 4] and a random sign: values up to
    /// 1e4 and down to 1e-6 side by side in one block.
    BigAndSmall,
    /// Normal with about 1 element in 64 replaced by NaN, +inf or -inf (in turn): the codecs'
    /// non-finite path, in blocks that also hold finite values. Not in [`Dist::ALL`] (those are
    /// the error statistics' inputs).
    Specials,
}

impl Dist {
    pub const ALL: [Dist; 4] = [Dist::Gaussian, Dist::StudentT3, Dist::MixedScale, Dist::BigAndSmall];

    pub fn name(self) -> &'static str {
        match self {
            Dist::Gaussian => "gaussian",
            Dist::StudentT3 => "student-t3",
            Dist::MixedScale => "mixed-scale",
            Dist::BigAndSmall => "big-and-small",
            Dist::Specials => "specials",
        }
    }

    /// `n` values drawn from this distribution with a generator seeded by `seed`. Blocks of
    /// `MixedScale` are aligned at index 0.
    pub fn generate(self, seed: u64, n: usize) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut out = Vec::with_capacity(n);
        match self {
            Dist::Gaussian => out.extend((0..n).map(|_| rng.normal() as f32)),
            Dist::StudentT3 => out.extend((0..n).map(|_| rng.student_t(3) as f32)),
            Dist::MixedScale => {
                let mut mag = 1.0;
                for i in 0..n {
                    if i.is_multiple_of(BLOCK) {
                        mag = 10f64.powf(-6.0 * rng.uniform());
                    }
                    out.push((rng.normal() * mag) as f32);
                }
            }
            Dist::BigAndSmall => out.extend((0..n).map(|_| {
                let m = 10f64.powf(-6.0 + 10.0 * rng.uniform());
                (if rng.next_u64() & 1 == 0 { m } else { -m }) as f32
            })),
            Dist::Specials => {
                let mut turn = 0;
                out.extend((0..n).map(|_| {
                    let x = rng.normal() as f32;
                    if rng.next_u64().is_multiple_of(64) {
                        turn += 1;
                        [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][turn % 3]
                    } else {
                        x
                    }
                }))
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::block::block_amax;

    #[test]
    fn synth_is_deterministic_and_sane() {
        let a = Dist::Gaussian.generate(5, 100_000);
        assert_eq!(a, Dist::Gaussian.generate(5, 100_000));
        let mean = a.iter().map(|&x| f64::from(x)).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "{mean} {var}");
        let t = Dist::StudentT3.generate(6, 100_000);
        assert!(t.iter().any(|x| x.abs() > 20.0), "heavy tails");
        let b = Dist::BigAndSmall.generate(7, 100_000);
        assert!(b.iter().all(|x| (1e-6..=1e4).contains(&x.abs())));
        let m = Dist::MixedScale.generate(8, 128 * 1000);
        let amaxes: Vec<f32> = m.chunks(BLOCK).map(block_amax).collect();
        let (lo, hi) = amaxes.iter().fold((f32::MAX, 0f32), |(l, h), &a| (l.min(a), h.max(a)));
        assert!(hi / lo > 1e5, "blocks span ~1e6: {lo:e}..{hi:e}");
    }
}
