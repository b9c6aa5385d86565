//! Case files (docs/case-format.md): one safetensors file holding a complete problem and,
//! optionally, the expected outputs. Read and written exactly; unknown metadata is preserved.

use crate::limits::ByteCap;
use deltarule_core::problem::InitialState;
use deltarule_core::problem::{BetaMode, FinalState, Gate, Mode, Op, StateLayout};
use deltarule_core::{DType, Error, HostTensor, Inputs, Outputs, Problem, Result};
use safetensors::tensor::{Dtype as StDtype, TensorView};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::Path;

/// The outputs a case file may carry besides its inputs: the expected outputs (`expected_*`) and,
/// optionally, the outputs the caller's own kernel produced (`observed.*`, see [`Observed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expected {
    pub o: Option<HostTensor>,
    pub final_state: Option<HostTensor>,
    pub checkpoints: Option<HostTensor>,
    /// The caller's own outputs, reported by `diff` beside every backend.
    pub observed: Option<Observed>,
}

impl Expected {
    pub fn from_outputs(out: &Outputs) -> Self {
        Expected {
            o: Some(out.o.cast(DType::F32)),
            final_state: out.final_state.clone(),
            checkpoints: out.checkpoints.clone(),
            observed: None,
        }
    }
    /// True when the file has no `expected_*` tensor (observed outputs do not count).
    pub fn is_empty(&self) -> bool {
        self.o.is_none() && self.final_state.is_none() && self.checkpoints.is_none()
    }
}

/// The outputs the caller's own kernel produced for the case's inputs (tensors `observed.o`,
/// `observed.final_state`, `observed.checkpoints`; metadata `observed` labels them). They have the
/// shapes of the `expected_*` tensors, in any float dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// A short label (metadata `observed`; [`DEFAULT_OBSERVED_LABEL`] when absent).
    pub label: String,
    pub o: Option<HostTensor>,
    pub final_state: Option<HostTensor>,
    pub checkpoints: Option<HostTensor>,
}

/// The label of observed outputs whose file names none.
pub const DEFAULT_OBSERVED_LABEL: &str = "observed";

/// The longest label of observed outputs, in characters.
pub const MAX_OBSERVED_LABEL: usize = 40;

/// Checks the label of observed outputs: 1 to [`MAX_OBSERVED_LABEL`] characters, no control
/// characters, no leading or trailing space.
pub fn check_observed_label(label: &str) -> Result<()> {
    let n = label.chars().count();
    if n == 0
        || n > MAX_OBSERVED_LABEL
        || label.trim() != label
        || label.chars().any(char::is_control)
    {
        return Err(meta_err(
            "observed",
            &format!(
                "a short label of 1 to {MAX_OBSERVED_LABEL} characters without control characters or surrounding spaces, such as `fla-chunk-h100`"
            ),
            label,
        ));
    }
    Ok(())
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

/// The tensor names a case file may hold (docs/case-format.md).
pub const KNOWN_TENSORS: &[&str] = &[
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
    "observed.o",
    "observed.final_state",
    "observed.checkpoints",
];

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

/// The largest JSON header a case file may declare (the safetensors format's own limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor entry of a case file's header.
#[derive(Clone, Debug, PartialEq)]
struct TensorEntry {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// Byte range within the data that follows the header.
    start: usize,
    end: usize,
}

/// A checked header: the tensors (in data order) and the metadata.
#[derive(Clone, Debug, PartialEq)]
struct Header {
    tensors: Vec<TensorEntry>,
    metadata: BTreeMap<String, String>,
}

/// Key-value pairs in file order, duplicates kept (so that they can be named).
struct Pairs<V>(Vec<(String, V)>);

impl<'de, V: serde::Deserialize<'de>> serde::Deserialize<'de> for Pairs<V> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit<V>(std::marker::PhantomData<V>);
        impl<'de, V: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visit<V> {
            type Value = Pairs<V>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
                Ok(Pairs(Vec::new()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = map.next_entry::<String, V>()? {
                    v.push((k, x));
                }
                Ok(Pairs(v))
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// A top-level header value: the metadata object or a tensor entry.
enum HeaderValue {
    Metadata(Pairs<String>),
    Tensor(serde_json::Value),
}

/// The header's top-level object, with `__metadata__` read as string pairs.
struct TopLevel(Vec<(String, HeaderValue)>);

impl<'de> serde::Deserialize<'de> for TopLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = TopLevel;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object of tensors and `__metadata__`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut v = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    let x = if k == "__metadata__" {
                        HeaderValue::Metadata(map.next_value::<Pairs<String>>()?)
                    } else {
                        HeaderValue::Tensor(map.next_value::<serde_json::Value>()?)
                    };
                    v.push((k, x));
                }
                Ok(TopLevel(v))
            }
        }
        d.deserialize_map(Visit)
    }
}

fn dtype_of_name(s: &str) -> Option<DType> {
    match s {
        "F64" => Some(DType::F64),
        "F32" => Some(DType::F32),
        "F16" => Some(DType::F16),
        "BF16" => Some(DType::BF16),
        "I32" => Some(DType::I32),
        "I64" => Some(DType::I64),
        _ => None,
    }
}

/// Reads one tensor entry (`{"dtype", "shape", "data_offsets"}`), naming the tensor in errors.
fn tensor_entry(name: &str, v: &serde_json::Value) -> Result<TensorEntry> {
    if !KNOWN_TENSORS.contains(&name) {
        return Err(Error::invalid(
            format!("tensor `{name}`"),
            format!("one of {}", KNOWN_TENSORS.join(", ")),
            "an unknown tensor name",
        ));
    }
    let bad = |what: &str| {
        Error::invalid(
            format!("tensor `{name}` {what}"),
            match what {
                "dtype" => "F32, F16, BF16, F64, I32 or I64",
                "shape" => "a list of non-negative integers",
                _ => "two byte offsets [start, end] with start <= end",
            },
            v.get(what).map_or("missing".to_string(), |x| x.to_string()),
        )
    };
    let dtype = v
        .get("dtype")
        .and_then(|d| d.as_str())
        .and_then(dtype_of_name)
        .ok_or_else(|| bad("dtype"))?;
    let shape = v
        .get("shape")
        .and_then(|s| s.as_array())
        .and_then(|a| {
            a.iter()
                .map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok()))
                .collect::<Option<Vec<usize>>>()
        })
        .ok_or_else(|| bad("shape"))?;
    let offsets = v
        .get("data_offsets")
        .and_then(|s| s.as_array())
        .filter(|a| a.len() == 2)
        .and_then(|a| {
            let s = usize::try_from(a[0].as_u64()?).ok()?;
            let e = usize::try_from(a[1].as_u64()?).ok()?;
            (s <= e).then_some((s, e))
        })
        .ok_or_else(|| bad("data_offsets"))?;
    Ok(TensorEntry {
        name: name.to_string(),
        dtype,
        shape,
        start: offsets.0,
        end: offsets.1,
    })
}

/// Parses and checks a header's JSON against `data_len`, the bytes of tensor data that follow
/// it: no duplicate keys, known tensor names and dtypes, each tensor's bytes equal to its shape
/// times its dtype, the tensors tiling the data exactly.
fn parse_header(name: &str, json: &[u8], data_len: u64) -> Result<Header> {
    let input_err = |reason: String| Error::Input {
        path: name.to_string(),
        reason,
    };
    let top: TopLevel = serde_json::from_slice(json)
        .map_err(|e| input_err(format!("not a valid safetensors header: {e}")))?;
    let mut metadata = BTreeMap::new();
    let mut tensors: Vec<TensorEntry> = Vec::new();
    let mut seen_metadata = false;
    for (key, value) in &top.0 {
        match value {
            HeaderValue::Metadata(pairs) => {
                if seen_metadata {
                    return Err(input_err("`__metadata__` appears twice".into()));
                }
                seen_metadata = true;
                for (k, v) in &pairs.0 {
                    if metadata.insert(k.clone(), v.clone()).is_some() {
                        return Err(Error::invalid(
                            format!("metadata `{k}`"),
                            "one entry per key",
                            "a duplicate key",
                        ));
                    }
                }
            }
            HeaderValue::Tensor(v) => {
                if tensors.iter().any(|t| &t.name == key) {
                    return Err(Error::invalid(
                        format!("tensor `{key}`"),
                        "one entry per tensor",
                        "a duplicate tensor name",
                    ));
                }
                tensors.push(tensor_entry(key, v)?);
            }
        }
    }
    tensors.sort_by_key(|t| (t.start, t.end));
    let mut at = 0usize;
    for t in &tensors {
        let bytes = t
            .shape
            .iter()
            .try_fold(t.dtype.size(), |acc, &d| acc.checked_mul(d));
        if bytes != Some(t.end - t.start) {
            return Err(Error::invalid(
                format!("tensor `{}`", t.name),
                format!(
                    "data_offsets spanning its shape {:?} of {} ({})",
                    t.shape,
                    t.dtype,
                    bytes.map_or("more than usize bytes".into(), |b| format!("{b} bytes"))
                ),
                format!("[{}, {}] ({} bytes)", t.start, t.end, t.end - t.start),
            ));
        }
        if t.start != at {
            return Err(Error::invalid(
                format!("tensor `{}`", t.name),
                format!("data starting at byte {at} (tensors tile the data, no gaps or overlaps)"),
                format!("data_offsets [{}, {}]", t.start, t.end),
            ));
        }
        at = t.end;
    }
    if at as u64 != data_len {
        return Err(input_err(format!(
            "the header declares {at} bytes of tensor data but the file holds {data_len} after it"
        )));
    }
    Ok(Header { tensors, metadata })
}

/// The problem a header describes (dimensions from the tensor shapes, options from the
/// metadata), for the cost check before the data is read.
fn header_problem(header: &Header) -> Result<Problem> {
    let shape = |n: &str| {
        header
            .tensors
            .iter()
            .find(|t| t.name == n)
            .map(|t| t.shape.as_slice())
            .ok_or_else(|| Error::invalid(format!("tensor `{n}`"), "present (required)", "missing"))
    };
    let q = shape("q")?;
    let v = shape("v")?;
    let cu = shape("cu_seqlens")?;
    for (n, s, want) in [("q", q, "[T, H, K]"), ("v", v, "[T, HV, V]")] {
        if s.len() != 3 {
            return Err(Error::invalid(n, format!("shape {want}"), format!("{s:?}")));
        }
    }
    if cu.len() != 1 || cu[0] < 2 {
        return Err(Error::invalid(
            "cu_seqlens",
            "shape [N + 1] with N >= 1",
            format!("{cu:?}"),
        ));
    }
    let mut p = options_from_metadata(&header.metadata)?;
    let (op, mode) = (p.op, p.mode);
    let dims = Problem::new(op, mode, cu[0] - 1, q[0], q[1], v[1], q[2], v[2]);
    (p.seqs, p.tokens, p.h, p.hv, p.k, p.v) =
        (dims.seqs, dims.tokens, dims.h, dims.hv, dims.k, dims.v);
    p.initial = match shape("initial_state").ok().and_then(|s| s.first().copied()) {
        None => InitialState::None,
        Some(rows) if shape("state_indices").is_ok() => InitialState::Pool { rows },
        Some(_) => InitialState::Dense,
    };
    p.final_state = match p.initial {
        InitialState::Pool { .. } => FinalState::InPlace,
        _ => FinalState::Dense,
    };
    Ok(p)
}

/// Checks a header's cost against `cap`: the problem's estimated allocation
/// ([`crate::limits::problem_bytes`]) plus the file's data, read and decoded.
fn check_cost(name: &str, header: &Header, data_len: u64, cap: &ByteCap) -> Result<()> {
    let p = header_problem(header)?;
    let asked =
        crate::limits::problem_bytes(&p).and_then(|b| b.checked_add(data_len.checked_mul(2)?));
    cap.check(&format!("case `{name}` ({p})"), asked)
}

/// The header length that starts a file, checked against the file's length.
fn header_len(name: &str, first8: &[u8], file_len: u64) -> Result<u64> {
    let input_err = |reason: String| Error::Input {
        path: name.to_string(),
        reason,
    };
    let Ok(b8) = <[u8; 8]>::try_from(first8) else {
        return Err(input_err(format!(
            "not a valid safetensors file: {file_len} bytes, shorter than the 8-byte header length"
        )));
    };
    let n = u64::from_le_bytes(b8);
    if n > MAX_HEADER_BYTES || n > file_len.saturating_sub(8) {
        return Err(input_err(format!(
            "not a valid safetensors file: a header of {n} bytes declared in a file of {file_len} bytes (at most {MAX_HEADER_BYTES})"
        )));
    }
    Ok(n)
}

/// Parses a case from the bytes of a safetensors file. `name` labels messages. The problem's
/// cost is checked against the machine's cap ([`ByteCap::resolve`]).
pub fn parse_case(name: &str, bytes: &[u8]) -> Result<Case> {
    parse_case_with_limit(name, bytes, &ByteCap::resolve(None)?)
}

/// [`parse_case`] with an explicit cap.
pub fn parse_case_with_limit(name: &str, bytes: &[u8], cap: &ByteCap) -> Result<Case> {
    let file_len = bytes.len() as u64;
    let n = header_len(name, bytes.get(..8).unwrap_or(bytes), file_len)? as usize;
    let data = &bytes[8 + n..];
    let header = parse_header(name, &bytes[8..8 + n], data.len() as u64)?;
    check_cost(name, &header, data.len() as u64, cap)?;
    let mut tensors: HashMap<String, HostTensor> = HashMap::new();
    for e in &header.tensors {
        let t = HostTensor::from_le_bytes(e.dtype, e.shape.clone(), &data[e.start..e.end])
            .map_err(|err| {
                Error::invalid(format!("tensor `{}`", e.name), "its data", err.to_string())
            })?;
        tensors.insert(e.name.clone(), t);
    }
    let metadata = header.metadata;
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
    let observed = observed_from(
        take("observed.o"),
        take("observed.final_state"),
        take("observed.checkpoints"),
        &metadata,
    )?;
    let expected = Expected {
        o: take("expected_o"),
        final_state: take("expected_final_state"),
        checkpoints: take("expected_checkpoints"),
        observed,
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
    check_expected_shapes(&problem, &inputs, &expected)?;
    let observed_checkpoints = expected
        .observed
        .as_ref()
        .is_some_and(|o| o.checkpoints.is_some());
    if (expected.checkpoints.is_some() || observed_checkpoints)
        && problem.checkpoint_every.is_none()
    {
        return Err(Error::invalid(
            "metadata `checkpoint_every`",
            "present when the file has expected_checkpoints or observed.checkpoints",
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

/// The observed outputs of a file: its `observed.*` tensors (any float dtype) labelled by the
/// metadata `observed`. A label without tensors is an error (it names nothing).
fn observed_from(
    o: Option<HostTensor>,
    final_state: Option<HostTensor>,
    checkpoints: Option<HostTensor>,
    metadata: &BTreeMap<String, String>,
) -> Result<Option<Observed>> {
    for (name, t) in [
        ("observed.o", &o),
        ("observed.final_state", &final_state),
        ("observed.checkpoints", &checkpoints),
    ] {
        if let Some(t) = t {
            if !t.dtype().is_float() {
                return Err(Error::invalid(
                    format!("tensor `{name}`"),
                    "a float dtype (F32, BF16, F16 or F64)",
                    t.dtype().name(),
                ));
            }
        }
    }
    let label = metadata.get("observed").map(|s| s.as_str());
    if o.is_none() && final_state.is_none() && checkpoints.is_none() {
        return match label {
            Some(l) => Err(Error::invalid(
                "metadata `observed`",
                "observed.o, observed.final_state or observed.checkpoints in the file (the label names them)",
                format!("`{l}` and no observed tensor"),
            )),
            None => Ok(None),
        };
    }
    let label = label.unwrap_or(DEFAULT_OBSERVED_LABEL);
    check_observed_label(label)?;
    Ok(Some(Observed {
        label: label.to_string(),
        o,
        final_state,
        checkpoints,
    }))
}

/// Checks the expected tensors' shapes against the problem: a wrong shape is an input error
/// naming the tensor, not a tolerance failure.
fn check_expected_shapes(p: &Problem, inputs: &Inputs, expected: &Expected) -> Result<()> {
    let check = |name: &str, got: Option<&HostTensor>, want: Option<Vec<usize>>, what: &str| match (
        got, want,
    ) {
        (Some(t), Some(w)) if t.shape != w => Err(Error::invalid(
            format!("tensor `{name}`"),
            format!("shape {w:?} ({what})"),
            format!("{:?}", t.shape),
        )),
        _ => Ok(()),
    };
    check(
        "expected_o",
        expected.o.as_ref(),
        Some(p.o_shape()),
        "[T, HV, V]",
    )?;
    check(
        "expected_final_state",
        expected.final_state.as_ref(),
        p.final_shape(),
        "the final state: [N, HV, ...] dense, or the whole pool",
    )?;
    let observed = expected.observed.as_ref();
    check(
        "observed.o",
        observed.and_then(|o| o.o.as_ref()),
        Some(p.o_shape()),
        "[T, HV, V]",
    )?;
    check(
        "observed.final_state",
        observed.and_then(|o| o.final_state.as_ref()),
        p.final_shape(),
        "the final state: [N, HV, ...] dense, or the whole pool",
    )?;
    // offsets that do not validate are reported by the input checks; here they only need to
    // bound the arithmetic (each length at most T)
    let cu = inputs
        .cu_seqlens
        .to_i64_vec("cu_seqlens")
        .ok()
        .and_then(|cu| deltarule_core::varlen::validate_cu_seqlens(&cu, p.tokens).ok());
    if let (Some(every), Some(cu)) = (p.checkpoint_every, cu) {
        let total: usize = cu.windows(2).map(|w| (w[1] - w[0]) / every.max(1)).sum();
        let mut want = p.state_shape(0);
        want[0] = total;
        check(
            "expected_checkpoints",
            expected.checkpoints.as_ref(),
            Some(want.clone()),
            "[total checkpoints, HV, ...]",
        )?;
        check(
            "observed.checkpoints",
            observed.and_then(|o| o.checkpoints.as_ref()),
            Some(want),
            "[total checkpoints, HV, ...]",
        )?;
    }
    Ok(())
}

/// Reads a case file, with the machine's cap ([`ByteCap::resolve`]).
pub fn read_case(path: &Path) -> Result<Case> {
    read_case_with_limit(path, &ByteCap::resolve(None)?)
}

/// Reads a case file: refuses anything but a regular file, reads and checks the header (its
/// tensors, metadata and the problem's cost against `cap`) before the data, then reads exactly
/// the declared data.
pub fn read_case_with_limit(path: &Path, cap: &ByteCap) -> Result<Case> {
    let shown = path.display().to_string();
    let input_err = |reason: String| Error::Input {
        path: shown.clone(),
        reason,
    };
    let not_regular = || {
        input_err(
            "not a regular file (a directory, FIFO or device); a case is a .safetensors file"
                .into(),
        )
    };
    // stat before opening: opening a FIFO blocks until a writer comes
    let meta = std::fs::metadata(path).map_err(|e| input_err(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let mut file = std::fs::File::open(path).map_err(|e| input_err(e.to_string()))?;
    let meta = file.metadata().map_err(|e| input_err(e.to_string()))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| shown.clone());
    let relabel = |e: Error| match e {
        Error::Input { reason, .. } => input_err(reason),
        other => other,
    };
    let file_len = meta.len();
    let mut first8 = Vec::with_capacity(8);
    (&mut file)
        .take(8)
        .read_to_end(&mut first8)
        .map_err(|e| input_err(e.to_string()))?;
    let n = header_len(&name, &first8, file_len).map_err(relabel)?;
    let data_len = file_len - 8 - n;
    let mut header_bytes = Vec::with_capacity(n as usize);
    (&mut file)
        .take(n)
        .read_to_end(&mut header_bytes)
        .map_err(|e| input_err(e.to_string()))?;
    if header_bytes.len() as u64 != n {
        return Err(input_err("the file ended inside its header".into()));
    }
    let header = parse_header(&name, &header_bytes, data_len).map_err(relabel)?;
    check_cost(&name, &header, data_len, cap).map_err(relabel)?;
    let total = usize::try_from(file_len).map_err(|_| input_err("too large to read".into()))?;
    let mut bytes = Vec::with_capacity(total);
    bytes.extend_from_slice(&first8);
    bytes.extend_from_slice(&header_bytes);
    (&mut file)
        .take(data_len)
        .read_to_end(&mut bytes)
        .map_err(|e| input_err(e.to_string()))?;
    if bytes.len() != total {
        return Err(input_err(format!(
            "the file holds {} bytes, {total} when it was opened",
            bytes.len()
        )));
    }
    parse_case_with_limit(&name, &bytes, cap).map_err(relabel)
}

/// Serialises a case (inputs, expected outputs, metadata: the case's own entries, with the
/// problem's options written over them).
pub fn case_bytes(case: &Case) -> Result<Vec<u8>> {
    let mut meta = case.metadata.clone();
    meta.extend(metadata_from_problem(&case.problem));
    let observed = case.expected.observed.as_ref();
    match observed {
        Some(o) => {
            check_observed_label(&o.label)?;
            meta.insert("observed".into(), o.label.clone());
        }
        None => {
            meta.remove("observed");
        }
    }
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
    if let Some(o) = observed {
        for (n, t) in [
            ("observed.o", &o.o),
            ("observed.final_state", &o.final_state),
            ("observed.checkpoints", &o.checkpoints),
        ] {
            if let Some(t) = t {
                list.push((n, t));
            }
        }
    }
    serialize_tensors(&list, meta, "case")
}

/// The safetensors bytes of named host tensors and string metadata (case files and saved output
/// sets); `what` names the file kind in an error.
pub fn serialize_tensors(
    list: &[(&str, &HostTensor)],
    meta: impl IntoIterator<Item = (String, String)>,
    what: &str,
) -> Result<Vec<u8>> {
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
        .map_err(|e| Error::invalid(what, format!("a serialisable {what}"), e.to_string()))
}

/// Writes a case file atomically (see [`write_atomic`]).
pub fn write_case(path: &Path, case: &Case) -> Result<()> {
    let bytes = case_bytes(case)?;
    write_atomic(path, &bytes)
}

/// Writes `bytes` to `path` through a temporary file in the same folder, synced and renamed into
/// place: a reader sees the old file or the new one, never a part. Failures say
/// `cannot write <path>: <reason>` and leave no temporary file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let out_err = |reason: String| Error::Output {
        path: path.display().to_string(),
        reason,
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| out_err("not a file name".into()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        out_err(e.to_string())
    })
}
