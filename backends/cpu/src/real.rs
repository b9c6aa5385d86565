//! The two working precisions of the CPU paths ([`Real`], defined in `deltarule_core::real`) and
//! the elementwise math of the gate and beta options (docs/spec.md) written once for both.

pub use deltarule_core::real::Real;

/// `softplus(x) = x` for `x > 20`, else `log(1 + e^x)` (docs/spec.md).
#[inline]
pub fn softplus<R: Real>(x: R) -> R {
    if x > R::from_f64(20.0) {
        x
    } else {
        x.exp().ln_1p()
    }
}

#[inline]
pub fn sigmoid<R: Real>(x: R) -> R {
    R::ONE / (R::ONE + (-x).exp())
}

/// L2 normalisation with the epsilon inside the square root: `x / sqrt(sum x^2 + 1e-6)`.
pub fn l2norm_in_place<R: Real>(x: &mut [R]) {
    let mut s = R::ZERO;
    for &a in x.iter() {
        s += a * a;
    }
    let inv = R::ONE / (s + R::from_f64(1e-6)).sqrt();
    for a in x.iter_mut() {
        *a *= inv;
    }
}
