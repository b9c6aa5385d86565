//! Host tensors: a shape and typed, row-major, contiguous data.

use crate::dtype::DType;
use crate::error::{Error, Result};
use half::{bf16, f16};

/// Typed storage of a [`HostTensor`].
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F64(Vec<f64>),
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A contiguous row-major tensor in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

/// f64 to f32 with round-to-odd: with a final rounding to a format of at most 22 significand
/// bits (bf16, f16) it gives the correctly rounded (nearest-even) result, which rounding through
/// a round-to-nearest f32 does not (`half`'s `from_f64` rounds twice).
fn f64_to_f32_odd(x: f64) -> f32 {
    let r = x as f32;
    if !r.is_finite() || r as f64 == x || x.is_nan() {
        return r;
    }
    if r == 0.0 {
        // the smallest subnormal with x's sign (odd, and on x's side of zero)
        return f32::from_bits(1 | (x.is_sign_negative() as u32) << 31);
    }
    let bits = r.to_bits();
    if bits & 1 == 1 {
        return r;
    }
    // move one ulp toward x: away from zero when |x| > |r|, toward zero otherwise
    if x.abs() > (r as f64).abs() {
        f32::from_bits(bits + 1)
    } else {
        f32::from_bits(bits - 1)
    }
}

/// Correctly rounded (nearest-even) f64 to bf16.
pub fn bf16_from_f64(x: f64) -> bf16 {
    bf16::from_f32(f64_to_f32_odd(x))
}

/// Correctly rounded (nearest-even) f64 to f16.
pub fn f16_from_f64(x: f64) -> f16 {
    f16::from_f32(f64_to_f32_odd(x))
}

fn numel_of(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl HostTensor {
    /// Builds a tensor, checking that the data length matches the shape.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Self> {
        let t = HostTensor { shape, data };
        if t.len() != numel_of(&t.shape) {
            return Err(Error::invalid(
                "tensor",
                format!("{} elements for shape {:?}", numel_of(&t.shape), t.shape),
                format!("{} elements", t.len()),
            ));
        }
        Ok(t)
    }

    /// A tensor of `dtype` whose values are `values` rounded to that dtype (round to nearest even).
    /// Integer dtypes truncate toward zero.
    pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Self {
        debug_assert_eq!(values.len(), numel_of(&shape));
        let data = match dtype {
            DType::F64 => TensorData::F64(values.to_vec()),
            DType::F32 => TensorData::F32(values.iter().map(|&x| x as f32).collect()),
            DType::F16 => TensorData::F16(values.iter().map(|&x| f16_from_f64(x)).collect()),
            DType::BF16 => TensorData::BF16(values.iter().map(|&x| bf16_from_f64(x)).collect()),
            DType::I32 => TensorData::I32(values.iter().map(|&x| x as i32).collect()),
            DType::I64 => TensorData::I64(values.iter().map(|&x| x as i64).collect()),
        };
        HostTensor { shape, data }
    }

    /// A float tensor filled with NaN (integer tensors get `i32::MIN`/`i64::MIN`): the poison
    /// written into every output before a run, so unwritten elements show up.
    pub fn poison(dtype: DType, shape: Vec<usize>) -> Self {
        let n = numel_of(&shape);
        let data = match dtype {
            DType::F64 => TensorData::F64(vec![f64::NAN; n]),
            DType::F32 => TensorData::F32(vec![f32::NAN; n]),
            DType::F16 => TensorData::F16(vec![f16::NAN; n]),
            DType::BF16 => TensorData::BF16(vec![bf16::NAN; n]),
            DType::I32 => TensorData::I32(vec![i32::MIN; n]),
            DType::I64 => TensorData::I64(vec![i64::MIN; n]),
        };
        HostTensor { shape, data }
    }

    pub fn from_i64(dtype: DType, shape: Vec<usize>, values: &[i64]) -> Self {
        let data = match dtype {
            DType::I32 => TensorData::I32(values.iter().map(|&x| x as i32).collect()),
            _ => TensorData::I64(values.to_vec()),
        };
        HostTensor { shape, data }
    }

    pub fn dtype(&self) -> DType {
        match &self.data {
            TensorData::F64(_) => DType::F64,
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
        }
    }

    /// Number of stored elements.
    pub fn len(&self) -> usize {
        match &self.data {
            TensorData::F64(v) => v.len(),
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::BF16(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn numel(&self) -> usize {
        numel_of(&self.shape)
    }

    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size()
    }

    /// Element `i` (flat index) widened to f64.
    pub fn get_f64(&self, i: usize) -> f64 {
        match &self.data {
            TensorData::F64(v) => v[i],
            TensorData::F32(v) => v[i] as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::BF16(v) => v[i].to_f64(),
            TensorData::I32(v) => v[i] as f64,
            TensorData::I64(v) => v[i] as f64,
        }
    }

    /// All elements widened to f64 (exact for every dtype here).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match &self.data {
            TensorData::F64(v) => v.clone(),
            TensorData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            TensorData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        }
    }

    /// All elements as f32 (exact for f32/f16/bf16; f64 is rounded).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            TensorData::F32(v) => v.clone(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            _ => self.to_f64_vec().iter().map(|&x| x as f32).collect(),
        }
    }

    /// Integer contents (offsets, indices) as i64. Float tensors are an error.
    pub fn to_i64_vec(&self, field: &str) -> Result<Vec<i64>> {
        match &self.data {
            TensorData::I32(v) => Ok(v.iter().map(|&x| x as i64).collect()),
            TensorData::I64(v) => Ok(v.clone()),
            _ => Err(Error::invalid(
                field,
                "an i32 or i64 tensor",
                self.dtype().name(),
            )),
        }
    }

    /// Little-endian bytes of the data, as stored in safetensors files and device buffers.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        fn le<T: Copy, const W: usize>(v: &[T], to_le: fn(T) -> [u8; W]) -> Vec<u8> {
            let mut out = Vec::with_capacity(v.len() * W);
            for &x in v {
                out.extend_from_slice(&to_le(x));
            }
            out
        }
        match &self.data {
            TensorData::F64(v) => le(v, f64::to_le_bytes),
            TensorData::F32(v) => le(v, f32::to_le_bytes),
            TensorData::F16(v) => le(v, f16::to_le_bytes),
            TensorData::BF16(v) => le(v, bf16::to_le_bytes),
            TensorData::I32(v) => le(v, i32::to_le_bytes),
            TensorData::I64(v) => le(v, i64::to_le_bytes),
        }
    }

    /// Parses little-endian bytes of `dtype` into a tensor of `shape`.
    pub fn from_le_bytes(dtype: DType, shape: Vec<usize>, bytes: &[u8]) -> Result<Self> {
        let n = numel_of(&shape);
        if bytes.len() != n * dtype.size() {
            return Err(Error::invalid(
                "tensor data",
                format!(
                    "{} bytes ({} x {} {})",
                    n * dtype.size(),
                    n,
                    dtype.size(),
                    dtype
                ),
                format!("{} bytes", bytes.len()),
            ));
        }
        fn chunks<const W: usize>(b: &[u8]) -> impl Iterator<Item = [u8; W]> + '_ {
            b.chunks_exact(W).map(|c| {
                let mut a = [0u8; W];
                a.copy_from_slice(c);
                a
            })
        }
        let data = match dtype {
            DType::F64 => TensorData::F64(chunks::<8>(bytes).map(f64::from_le_bytes).collect()),
            DType::F32 => TensorData::F32(chunks::<4>(bytes).map(f32::from_le_bytes).collect()),
            DType::F16 => TensorData::F16(chunks::<2>(bytes).map(f16::from_le_bytes).collect()),
            DType::BF16 => TensorData::BF16(chunks::<2>(bytes).map(bf16::from_le_bytes).collect()),
            DType::I32 => TensorData::I32(chunks::<4>(bytes).map(i32::from_le_bytes).collect()),
            DType::I64 => TensorData::I64(chunks::<8>(bytes).map(i64::from_le_bytes).collect()),
        };
        Ok(HostTensor { shape, data })
    }

    /// A copy converted to `dtype` (rounding to nearest for narrower floats).
    pub fn cast(&self, dtype: DType) -> HostTensor {
        if dtype == self.dtype() {
            return self.clone();
        }
        if dtype.is_int() {
            let v: Vec<i64> = self.to_f64_vec().iter().map(|&x| x as i64).collect();
            return HostTensor::from_i64(dtype, self.shape.clone(), &v);
        }
        HostTensor::from_f64(dtype, self.shape.clone(), &self.to_f64_vec())
    }

    /// Number of NaN or infinite elements.
    pub fn count_nonfinite(&self) -> usize {
        match &self.data {
            TensorData::F64(v) => v.iter().filter(|x| !x.is_finite()).count(),
            TensorData::F32(v) => v.iter().filter(|x| !x.is_finite()).count(),
            TensorData::F16(v) => v.iter().filter(|x| !x.is_finite()).count(),
            TensorData::BF16(v) => v.iter().filter(|x| !x.is_finite()).count(),
            _ => 0,
        }
    }

    /// Bitwise equality of the stored data (NaN payloads included): the determinism check.
    pub fn bit_identical(&self, other: &HostTensor) -> bool {
        self.shape == other.shape && self.to_le_bytes() == other.to_le_bytes()
    }

    /// Copies rows `[row * row_len, (row + 1) * row_len)` of the flat data from `src` into `self`.
    /// Both tensors must have the same dtype.
    pub fn copy_row_from(&mut self, row: usize, row_len: usize, src: &HostTensor) {
        let r = row * row_len..(row + 1) * row_len;
        match (&mut self.data, &src.data) {
            (TensorData::F64(d), TensorData::F64(s)) => d[r.clone()].copy_from_slice(&s[r]),
            (TensorData::F32(d), TensorData::F32(s)) => d[r.clone()].copy_from_slice(&s[r]),
            (TensorData::F16(d), TensorData::F16(s)) => d[r.clone()].copy_from_slice(&s[r]),
            (TensorData::BF16(d), TensorData::BF16(s)) => d[r.clone()].copy_from_slice(&s[r]),
            (TensorData::I32(d), TensorData::I32(s)) => d[r.clone()].copy_from_slice(&s[r]),
            (TensorData::I64(d), TensorData::I64(s)) => d[r.clone()].copy_from_slice(&s[r]),
            _ => {}
        }
    }

    /// Writes `values` (rounded to this tensor's dtype) at flat offset `start`.
    pub fn write_f64(&mut self, start: usize, values: &[f64]) {
        let r = start..start + values.len();
        match &mut self.data {
            TensorData::F64(d) => d[r].copy_from_slice(values),
            TensorData::F32(d) => convert_into(&mut d[r], values, |x| x as f32),
            TensorData::F16(d) => convert_into(&mut d[r], values, f16_from_f64),
            TensorData::BF16(d) => convert_into(&mut d[r], values, bf16_from_f64),
            TensorData::I32(d) => convert_into(&mut d[r], values, |x| x as i32),
            TensorData::I64(d) => convert_into(&mut d[r], values, |x| x as i64),
        }
    }

    /// Writes f32 `values` at flat offset `start` (rounded to this tensor's dtype).
    pub fn write_f32(&mut self, start: usize, values: &[f32]) {
        let r = start..start + values.len();
        match &mut self.data {
            TensorData::F32(d) => d[r].copy_from_slice(values),
            TensorData::F64(d) => convert_into(&mut d[r], values, |x| x as f64),
            TensorData::F16(d) => convert_into(&mut d[r], values, f16::from_f32),
            TensorData::BF16(d) => convert_into(&mut d[r], values, bf16::from_f32),
            TensorData::I32(d) => convert_into(&mut d[r], values, |x| x as i32),
            TensorData::I64(d) => convert_into(&mut d[r], values, |x| x as i64),
        }
    }
}

/// `dst[i] = convert(src[i])`.
fn convert_into<S: Copy, T>(dst: &mut [T], src: &[S], convert: impl Fn(S) -> T) {
    dst.iter_mut().zip(src).for_each(|(o, &x)| *o = convert(x));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_bit_rounding_is_correct_to_nearest_even() {
        // just above the tie between two bf16 values: must round up in magnitude
        let x = -0.767578363f64;
        assert_eq!(bf16_from_f64(x).to_f32(), -0.769_531_25);
        // exact ties go to even
        assert_eq!(bf16_from_f64(1.0 + 2f64.powi(-8)).to_f64(), 1.0);
        assert_eq!(
            bf16_from_f64(1.0 + 3.0 * 2f64.powi(-8)).to_f64(),
            1.0 + 2f64.powi(-6)
        );
        // f16 just above a tie
        assert_eq!(
            f16_from_f64(1.0 + 2f64.powi(-11) + 1e-9).to_f64(),
            1.0 + 2f64.powi(-10)
        );
        assert_eq!(f16_from_f64(1.0 + 2f64.powi(-11)).to_f64(), 1.0);
        // exhaustive against a direct nearest-even search on a sweep
        for i in 0..200_000u32 {
            let x = (i as f64 * 0.618_033_988_749_894_9).sin() * 3.0 + (i as f64) * 1e-7;
            let b = bf16_from_f64(x).to_f64();
            let below = bf16::from_bits(bf16::from_f64(x).to_bits().wrapping_sub(1)).to_f64();
            let above = bf16::from_bits(bf16::from_f64(x).to_bits().wrapping_add(1)).to_f64();
            for c in [below, above] {
                if c.is_finite() {
                    assert!((b - x).abs() <= (c - x).abs(), "x {x}: {b} vs {c}");
                }
            }
        }
        assert_eq!(bf16_from_f64(0.0).to_bits(), 0);
        assert!(bf16_from_f64(f64::NAN).is_nan());
        assert_eq!(bf16_from_f64(1e-300).to_f64(), 0.0);
    }
}
