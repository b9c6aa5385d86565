//! Case files (docs/case-format.md): one safetensors file holding a complete problem and,
//! optionally, the expected outputs. Read and written exactly; unknown metadata is preserved.

use deltarule_core::problem::{BetaMode, FinalState, Gate, Mode, Op, StateLayout};
use deltarule_core::{DType, Error, HostTensor, Inputs, Outputs, Problem, Result};
use safetensors::tensor::{Dtype as StDtype, TensorView};
use safetensors::SafeTensors;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The expected outputs a case file may carry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expected {
    pub o: Option<HostTensor>,
    pub final_state: Option<HostTensor>,
    pub checkpoints: Option<HostTensor>,
}

impl Expected {
    pub fn from_outputs(out: &Outputs) -> Self {
        Expected {
            o: Some(out.o.cast(DType::F32)),
            final_state: out.final_state.clone(),
            checkpoints: out.checkpoints.clone(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.o.is_none() && self.final_state.is_none() && self.checkpoints.is_none()
    }
}

/// A complete case: the problem, its inputs, the expected outputs and the file's metadata.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// File stem or generated id.
    pub name: String,
    pub problem: Problem,
    pub inputs: Inputs,
    pub expected: Expected,
    /// Every metadata entry of the file, known and unknown (preserved on rewrite).
    pub metadata: BTreeMap<String, String>,
}

const KNOWN_TENSORS: &[&str] = &[
    "q",
    "k",
    "v",
    "g",
    "beta",
    "cu_seqlens",
    "initial_state",
    "state_indices",
    "A_log",
    "dt_bias",
    "expected_o",
    "expected_final_state",
    "expected_checkpoints",
];

fn st_dtype(d: StDtype) -> Option<DType> {
    match d {
        StDtype::F64 => Some(DType::F64),
        StDtype::F32 => Some(DType::F32),
        StDtype::F16 => Some(DType::F16),
        StDtype::BF16 => Some(DType::BF16),
        StDtype::I32 => Some(DType::I32),
        StDtype::I64 => Some(DType::I64),
        _ => None,
    }
}

fn to_st_dtype(d: DType) -> StDtype {
    match d {
        DType::F64 => StDtype::F64,
        DType::F32 => StDtype::F32,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::I32 => StDtype::I32,
        DType::I64 => StDtype::I64,
    }
}

fn meta_err(key: &str, expected: &str, got: &str) -> Error {
    Error::invalid(format!("metadata `{key}`"), expected, format!("`{got}`"))
}

/// Parses the problem options from the metadata (case-format.md's table and defaults).
pub fn options_from_metadata(meta: &BTreeMap<String, String>) -> Result<Problem> {
    let get = |k: &str| meta.get(k).map(|s| s.trim());
    let op = match get("op") {
        Some("gdn") => Op::Gdn,
        Some("kda") => Op::Kda,
        Some(other) => return Err(meta_err("op", "gdn or kda", other)),
        None => return Err(Error::invalid("metadata `op`", "gdn or kda", "missing")),
    };
    let mode = match get("mode") {
        None | Some("prefill") => Mode::Prefill,
        Some("decode") => Mode::Decode,
        Some(other) => return Err(meta_err("mode", "prefill or decode", other)),
    };
    let mut p = Problem::new(op, mode, 1, 1, 1, 1, 64, 64);
    p.gate = match get("gate") {
        None | Some("precomputed") => Gate::Log,
        Some("softplus") => Gate::Softplus,
        Some("lower_bound") => {
            let lb = get("lower_bound").ok_or_else(|| {
                Error::invalid(
                    "metadata `lower_bound`",
                    "a negative float (required with gate = lower_bound)",
                    "missing",
                )
            })?;
            let x: f64 = lb
                .parse()
                .map_err(|_| meta_err("lower_bound", "a negative float such as -5.0", lb))?;
            Gate::LowerBound(x)
        }
        Some(other) => {
            return Err(meta_err(
                "gate",
                "precomputed, softplus or lower_bound",
                other,
            ))
        }
    };
    p.beta = match get("beta") {
        None | Some("precomputed") => BetaMode::Prob,
        Some("sigmoid") => BetaMode::Logit,
        Some("sigmoid2") => BetaMode::Logit2,
        Some(other) => return Err(meta_err("beta", "precomputed, sigmoid or sigmoid2", other)),
    };
    p.l2norm = match get("use_qk_l2norm") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(meta_err("use_qk_l2norm", "true or false", other)),
    };
    p.layout = match get("state_layout") {
        None | Some("kv") => StateLayout::Kv,
        Some("vk") => StateLayout::Vk,
        Some(other) => return Err(meta_err("state_layout", "kv or vk", other)),
    };
    if let Some(s) = get("scale") {
        let x: f64 = s
            .parse()
            .map_err(|_| meta_err("scale", "a float such as 0.08838834764831845", s))?;
        if !(x.is_finite() && x > 0.0) {
            return Err(meta_err("scale", "a finite positive float", s));
        }
        p.scale = x;
    } else {
        p.scale = f64::NAN; // default 1/sqrt(K), filled once K is known
    }
    if let Some(s) = get("checkpoint_every") {
        let x: usize = s
            .parse()
            .ok()
            .filter(|&x| x > 0)
            .ok_or_else(|| meta_err("checkpoint_every", "a positive integer", s))?;
        p.checkpoint_every = Some(x);
    }
    Ok(p)
}

/// Writes the problem's options as case-file metadata (only non-default values and `op`).
pub fn metadata_from_problem(p: &Problem) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert("op".into(), p.op.name().into());
    m.insert("mode".into(), p.mode.name().into());
    m.insert(
        "gate".into(),
        match p.gate {
            Gate::Log => "precomputed",
            Gate::Softplus => "softplus",
            Gate::LowerBound(_) => "lower_bound",
        }
        .into(),
    );
    if let Gate::LowerBound(lb) = p.gate {
        m.insert("lower_bound".into(), format!("{lb:?}"));
    }
    m.insert(
        "beta".into(),
        match p.beta {
            BetaMode::Prob => "precomputed",
            BetaMode::Logit => "sigmoid",
            BetaMode::Logit2 => "sigmoid2",
        }
        .into(),
    );
    m.insert("use_qk_l2norm".into(), p.l2norm.to_string());
    m.insert("scale".into(), format!("{:?}", p.scale));
    m.insert("state_layout".into(), p.layout.name().into());
    if let Some(e) = p.checkpoint_every {
        m.insert("checkpoint_every".into(), e.to_string());
    }
    m
}

/// Parses a case from the bytes of a safetensors file. `name` labels messages.
pub fn parse_case(name: &str, bytes: &[u8]) -> Result<Case> {
    let input_err = |reason: String| Error::Input {
        path: name.to_string(),
        reason,
    };
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| input_err(format!("not a valid safetensors file: {e}")))?;
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| input_err(format!("not a valid safetensors file: {e}")))?;
    let metadata: BTreeMap<String, String> = header
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let mut tensors: HashMap<String, HostTensor> = HashMap::new();
    for (tname, view) in st.tensors() {
        if !KNOWN_TENSORS.contains(&tname.as_str()) {
            return Err(Error::invalid(
                format!("tensor `{tname}`"),
                format!("one of {}", KNOWN_TENSORS.join(", ")),
                "an unknown tensor name",
            ));
        }
        let dtype = st_dtype(view.dtype()).ok_or_else(|| {
            Error::invalid(
                format!("tensor `{tname}` dtype"),
                "F32, F16, BF16, F64, I32 or I64",
                format!("{:?}", view.dtype()),
            )
        })?;
        let t = HostTensor::from_le_bytes(dtype, view.shape().to_vec(), view.data())
            .map_err(|e| input_err(format!("tensor `{tname}`: {e}")))?;
        tensors.insert(tname, t);
    }
    let mut take = |n: &str| tensors.remove(n);
    let required = |t: Option<HostTensor>, n: &str| {
        t.ok_or_else(|| Error::invalid(format!("tensor `{n}`"), "present (required)", "missing"))
    };
    let inputs = Inputs {
        q: required(take("q"), "q")?,
        k: required(take("k"), "k")?,
        v: required(take("v"), "v")?,
        g: required(take("g"), "g")?,
        beta: required(take("beta"), "beta")?,
        cu_seqlens: required(take("cu_seqlens"), "cu_seqlens")?,
        a_log: take("A_log"),
        dt_bias: take("dt_bias"),
        initial_state: take("initial_state"),
        state_indices: take("state_indices"),
    };
    let expected = Expected {
        o: take("expected_o"),
        final_state: take("expected_final_state"),
        checkpoints: take("expected_checkpoints"),
    };
    let mut template = options_from_metadata(&metadata)?;
    if inputs.q.shape.len() == 3 && template.scale.is_nan() {
        template.k = inputs.q.shape[2];
        template.scale = 1.0 / (template.k as f64).sqrt();
    }
    if template.scale.is_nan() {
        template.scale = 1.0;
    }
    template.out_dtype = DType::F32;
    template.final_state = FinalState::Dense;
    template.state_out_dtype = DType::F32;
    let problem = Problem::from_inputs(&template, &inputs)?;
    if expected.checkpoints.is_some() && problem.checkpoint_every.is_none() {
        return Err(Error::invalid(
            "metadata `checkpoint_every`",
            "present when the file has expected_checkpoints",
            "missing",
        ));
    }
    Ok(Case {
        name: name.to_string(),
        problem,
        inputs,
        expected,
        metadata,
    })
}

/// Reads a case file.
pub fn read_case(path: &Path) -> Result<Case> {
    let bytes = std::fs::read(path).map_err(|e| Error::Input {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    parse_case(&name, &bytes).map_err(|e| match e {
        Error::Input { reason, .. } => Error::Input {
            path: path.display().to_string(),
            reason,
        },
        other => other,
    })
}

/// Serialises a case (inputs, expected outputs, metadata: the case's own entries, with the
/// problem's options written over them).
pub fn case_bytes(case: &Case) -> Result<Vec<u8>> {
    let mut meta = case.metadata.clone();
    meta.extend(metadata_from_problem(&case.problem));
    let i = &case.inputs;
    let mut list: Vec<(&str, &HostTensor)> = vec![
        ("q", &i.q),
        ("k", &i.k),
        ("v", &i.v),
        ("g", &i.g),
        ("beta", &i.beta),
        ("cu_seqlens", &i.cu_seqlens),
    ];
    let opt = [
        ("A_log", &i.a_log),
        ("dt_bias", &i.dt_bias),
        ("initial_state", &i.initial_state),
        ("state_indices", &i.state_indices),
        ("expected_o", &case.expected.o),
        ("expected_final_state", &case.expected.final_state),
        ("expected_checkpoints", &case.expected.checkpoints),
    ];
    for (n, t) in opt.iter() {
        if let Some(t) = t {
            list.push((n, t));
        }
    }
    let bytes: Vec<(String, DType, Vec<usize>, Vec<u8>)> = list
        .iter()
        .map(|(n, t)| (n.to_string(), t.dtype(), t.shape.clone(), t.to_le_bytes()))
        .collect();
    let mut views = Vec::new();
    for (n, d, s, b) in &bytes {
        let view = TensorView::new(to_st_dtype(*d), s.clone(), b).map_err(|e| {
            Error::invalid(
                format!("tensor `{n}`"),
                "a consistent tensor",
                e.to_string(),
            )
        })?;
        views.push((n.clone(), view));
    }
    let info: HashMap<String, String> = meta.into_iter().collect();
    safetensors::tensor::serialize(views, Some(info))
        .map_err(|e| Error::invalid("case", "a serialisable case", e.to_string()))
}

/// Writes a case file.
pub fn write_case(path: &Path, case: &Case) -> Result<()> {
    let bytes = case_bytes(case)?;
    std::fs::write(path, bytes).map_err(|e| Error::Input {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}
