//! The working precisions of the host-side math (f32, f64): the numeric trait that the exact
//! segment algebra ([`crate::segments`]) and the CPU backend's paths are generic over.

use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

/// f32 or f64.
pub trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    /// The most negative per-token log decay the chunked path uses: `exp` of it, and of anything
    /// below it, is exactly 0 in this precision, so a gate clamped to it is still an exact reset
    /// and every cumulative sum of a chunk stays finite (docs/spec.md, the chunked algorithm).
    const LOG_DECAY_FLOOR: Self;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn ln_1p(self) -> Self;
    fn sqrt(self) -> Self;
}

/// Implements [`Real`] for a float type with its own methods.
macro_rules! impl_real {
    ($t:ty, $floor:expr) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOG_DECAY_FLOOR: Self = $floor;
            #[inline]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
        }
    };
}

// e^-128 and e^-800 lie far below the smallest subnormal of f32 (e^-103.3) and f64 (e^-744.4)
impl_real!(f64, -800.0);
impl_real!(f32, -128.0);
