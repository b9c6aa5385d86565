//! Element types of the tensors the engine reads and writes.

use std::fmt;

/// Element type of a tensor. Floats for data, integers for offsets and indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    I32,
    I64,
}

impl DType {
    pub const ALL: [DType; 6] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }

    /// Lower-case name used in ids, flags and tables (`bf16`, `f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }

    /// The name safetensors uses (`BF16`, `F32`, ...).
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::F64 => "F64",
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::I32 => "I32",
            DType::I64 => "I64",
        }
    }

    /// Parses `bf16`, `BF16`, `bfloat16`, `f32`, `float32`, `fp32`, ... (case-insensitive).
    pub fn parse(s: &str) -> Option<DType> {
        match s.to_ascii_lowercase().as_str() {
            "f64" | "float64" | "fp64" => Some(DType::F64),
            "f32" | "float32" | "fp32" | "float" => Some(DType::F32),
            "f16" | "float16" | "fp16" | "half" => Some(DType::F16),
            "bf16" | "bfloat16" => Some(DType::BF16),
            "i32" | "int32" => Some(DType::I32),
            "i64" | "int64" => Some(DType::I64),
            _ => None,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Renders a dtype list as `{bf16, f16}` for messages and tables.
pub fn dtype_set(list: &[DType]) -> String {
    let names: Vec<&str> = list.iter().map(|d| d.name()).collect();
    format!("{{{}}}", names.join(", "))
}
