//! A small seeded generator (SplitMix64 + Box-Muller): reproducible problems from a seed without a
//! dependency whose streams change between versions.

use rayon::prelude::*;

/// SplitMix64's increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function of a state.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A draw's uniform in [0, 1).
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    spare: Option<f64>,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng {
            state: seed ^ GAMMA,
            spare: None,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        unit(self.next_u64())
    }

    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// Fills `out` with exactly the values `out.len()` calls of [`Rng::normal`] would return, and
    /// leaves the generator where those calls would. The state after n draws is `state + n x
    /// GAMMA`, so long slices are filled in parallel, pair by pair (each pair of normals takes two
    /// draws unless a draw is rejected, which happens with probability 2^-53 a pair: then the
    /// slice is redone in order).
    pub fn fill_normal(&mut self, out: &mut [f64]) {
        self.fill_normal_map(out, |z| z);
    }

    /// [`Rng::fill_normal`] with each value mapped by `f` on its way into `out` (a dtype
    /// conversion, a scale): `out[i] = f(i-th normal)`, without a float64 copy of the slice.
    pub fn fill_normal_map<T: Send>(&mut self, out: &mut [T], f: impl Fn(f64) -> T + Sync) {
        const PAR_MIN: usize = 1 << 16;
        const BLOCK: usize = 1 << 12; // pairs a parallel task
        let rest = match self.spare.take() {
            Some(s) if !out.is_empty() => {
                out[0] = f(s);
                &mut out[1..]
            }
            spare => {
                self.spare = spare;
                out
            }
        };
        if rest.len() < PAR_MIN {
            rest.iter_mut().for_each(|x| *x = f(self.normal()));
            return;
        }
        let base = self.state;
        let pair = |i: u64| {
            let u = unit(mix(base.wrapping_add((2 * i + 1).wrapping_mul(GAMMA))));
            let v = unit(mix(base.wrapping_add((2 * i + 2).wrapping_mul(GAMMA))));
            let r = (-2.0 * u.ln()).sqrt();
            let th = 2.0 * std::f64::consts::PI * v;
            (u > 1e-300, r * th.cos(), r * th.sin())
        };
        let accepted = rest
            .par_chunks_mut(2 * BLOCK)
            .enumerate()
            .map(|(b, chunk)| {
                let mut ok = true;
                for (j, two) in chunk.chunks_mut(2).enumerate() {
                    let (good, c, s) = pair((b * BLOCK + j) as u64);
                    ok &= good;
                    two[0] = f(c);
                    if let Some(x) = two.get_mut(1) {
                        *x = f(s);
                    }
                }
                ok
            })
            .reduce(|| true, |a, b| a && b);
        if !accepted {
            rest.iter_mut().for_each(|x| *x = f(self.normal()));
            return;
        }
        let pairs = rest.len().div_ceil(2) as u64;
        if rest.len() % 2 == 1 {
            self.spare = Some(pair(pairs - 1).2);
        }
        self.state = base.wrapping_add((2 * pairs).wrapping_mul(GAMMA));
    }

    /// Standard normal.
    pub fn normal(&mut self) -> f64 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        loop {
            let u = self.uniform();
            let v = self.uniform();
            if u > 1e-300 {
                let r = (-2.0 * u.ln()).sqrt();
                let th = 2.0 * std::f64::consts::PI * v;
                self.spare = Some(r * th.sin());
                return r * th.cos();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    /// `fill_normal` is the sequence of `normal` calls, whatever the length, a pending spare
    /// and the draws before and after.
    #[test]
    fn fill_normal_equals_repeated_normal() {
        for (seed, before, len) in [
            (1u64, 0usize, 0usize),
            (2, 1, 5),
            (3, 0, (1 << 16) + 1),
            (4, 1, (1 << 16) + 1),
            (5, 3, 1 << 17),
            (6, 2, 3 * (1 << 12) + 7 + (1 << 16)),
        ] {
            let mut a = Rng::new(seed);
            let mut b = Rng::new(seed);
            for _ in 0..before {
                assert_eq!(a.normal().to_bits(), b.normal().to_bits());
            }
            let want: Vec<f64> = (0..len).map(|_| a.normal()).collect();
            let mut got = vec![0.0; len];
            b.fill_normal(&mut got);
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "seed {seed}, len {len}"
            );
            for _ in 0..3 {
                assert_eq!(a.normal().to_bits(), b.normal().to_bits());
                assert_eq!(a.uniform().to_bits(), b.uniform().to_bits());
            }
            // mapped on the way in: the same values through the map
            let mut c = Rng::new(seed);
            for _ in 0..before {
                c.normal();
            }
            let mut mapped = vec![0f32; len];
            c.fill_normal_map(&mut mapped, |z| (0.5 * z) as f32);
            assert!(want
                .iter()
                .zip(&mapped)
                .all(|(x, y)| ((0.5 * x) as f32).to_bits() == y.to_bits()));
        }
    }
}
