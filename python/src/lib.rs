//! `deltarule._native`: the PyO3 (abi3) extension behind the `deltarule` Python package.
//!
//! It receives raw device pointers, shapes, dtypes, options, the device ordinal and the caller's
//! CUDA stream (`torch.cuda.current_stream().cuda_stream`), builds a `deltarule_core::Problem`,
//! and launches through the engine facade on that stream without synchronising. It links neither
//! libtorch nor any torch version. Host-side runs (`run_host`, and `run_cpu` for the ops' CPU
//! tensors) take and return bytes.

use deltarule_core::problem::{BetaMode, FinalState, Gate, InitialState, Mode, Op, StateLayout};
use deltarule_core::select::Preference;
use deltarule_core::{BackendKind, DType, Error, HostTensor, Inputs, Kernel, Problem};
use deltarule_engine::{DevicePtrs, Engine, EngineOptions, Workspace};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The engine's errors as Python exceptions, with the engine's message (it names the argument):
/// an invalid dtype (core's fields `q/k/v dtype`, `beta dtype`, ...) is a `TypeError`, any other
/// caller error a `ValueError`, device and compile failures a `RuntimeError`.
fn to_py(e: Error) -> PyErr {
    match &e {
        Error::InvalidArgument { field, .. } if field.ends_with(" dtype") => {
            PyTypeError::new_err(e.to_string())
        }
        Error::InvalidArgument { .. }
        | Error::NoEligibleRule { .. }
        | Error::Input { .. }
        | Error::Unsupported { .. } => PyValueError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// Names of the dtypes of q/k/v, g, beta, o, initial state, final state, cu_seqlens and
/// state_indices.
type Dtypes = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
);

/// A dtype name of the Python layer; which dtypes each tensor accepts is core's check.
fn dtype(field: &str, s: &str) -> PyResult<DType> {
    DType::parse(s).ok_or_else(|| {
        let known: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        to_py(Error::invalid(
            format!("{field} dtype"),
            format!("a dtype the engine has ({})", known.join(", ")),
            s,
        ))
    })
}

fn bad(field: &str, expected: &str, got: &str) -> PyErr {
    PyValueError::new_err(format!(
        "invalid argument `{field}`: expected {expected}, got {got}"
    ))
}

/// The problem description `Spec.native()` passes: (T, N, H, HV, K, V, pool rows), dtypes, scale,
/// l2norm, gate, lower_bound, has_a_log, beta_mode, layout, initial, final, checkpoint_every.
#[derive(FromPyObject)]
struct Desc(
    (usize, usize, usize, usize, usize, usize, usize),
    Dtypes,
    f64,
    bool,
    String,
    f64,
    bool,
    String,
    String,
    String,
    String,
    usize,
);

/// Builds the problem from the flat description the Python layer passes and validates it
/// (`Problem::validate`).
fn problem(op: &str, mode: &str, d: &Desc) -> PyResult<Problem> {
    let Desc(
        dims,
        dtypes,
        scale,
        l2norm,
        gate,
        lower_bound,
        has_a_log,
        beta_mode,
        layout,
        initial,
        final_state,
        checkpoint_every,
    ) = d;
    let (scale, l2norm, lower_bound, has_a_log, checkpoint_every) =
        (*scale, *l2norm, *lower_bound, *has_a_log, *checkpoint_every);
    let (gate, beta_mode, layout, initial, final_state) = (
        gate.as_str(),
        beta_mode.as_str(),
        layout.as_str(),
        initial.as_str(),
        final_state.as_str(),
    );
    let op = Op::parse(op).ok_or_else(|| bad("op", "gdn or kda", op))?;
    let mode = Mode::parse(mode).ok_or_else(|| bad("mode", "prefill or decode", mode))?;
    let (t, n, h, hv, k, v, pool_rows) = *dims;
    let mut p = Problem::new(op, mode, n, t, h, hv, k, v);
    // 0 stands for the default 1/sqrt(K); core rejects what is not a finite positive number
    if scale != 0.0 {
        p.scale = scale;
    }
    p.l2norm = l2norm;
    p.gate = match gate {
        "log" => Gate::Log,
        "softplus" => Gate::Softplus,
        "lower_bound" => Gate::LowerBound(lower_bound),
        other => return Err(bad("gate", "log, softplus or lower_bound", other)),
    };
    p.a_log = has_a_log;
    p.beta = match beta_mode {
        "prob" => BetaMode::Prob,
        "logit" | "sigmoid" => BetaMode::Logit,
        "logit2" | "sigmoid2" => BetaMode::Logit2,
        other => return Err(bad("beta_mode", "prob, logit or logit2", other)),
    };
    p.layout = StateLayout::parse(layout).ok_or_else(|| bad("state_layout", "kv or vk", layout))?;
    p.qkv_dtype = dtype("q", &dtypes.0)?;
    p.g_dtype = dtype("g", &dtypes.1)?;
    p.beta_dtype = dtype("beta", &dtypes.2)?;
    p.out_dtype = dtype("o", &dtypes.3)?;
    p.state_in_dtype = dtype("initial_state", &dtypes.4)?;
    p.state_out_dtype = dtype("final_state", &dtypes.5)?;
    p.offsets_dtype = dtype("cu_seqlens", &dtypes.6)?;
    p.index_dtype = dtype("state_indices", &dtypes.7)?;
    p.initial = match initial {
        "none" => InitialState::None,
        "dense" => InitialState::Dense,
        "pool" => InitialState::Pool { rows: pool_rows },
        other => return Err(bad("initial_state", "none, dense or pool", other)),
    };
    p.final_state = match final_state {
        "none" => FinalState::None,
        "dense" => FinalState::Dense,
        "inplace" => FinalState::InPlace,
        other => return Err(bad("final_state", "none, dense or inplace", other)),
    };
    p.checkpoint_every = (checkpoint_every > 0).then_some(checkpoint_every);
    p.validate().map_err(to_py)?;
    Ok(p)
}

/// Validates a problem description (`Problem::validate`) without touching a device: the checks
/// of `deltarule._spec.build_spec` that are the problem's, not its tensors'.
#[pyfunction]
fn validate(op: &str, mode: &str, desc: Desc) -> PyResult<()> {
    problem(op, mode, &desc).map(|_| ())
}

/// Validates the contents of `cu_seqlens` (read once per offsets tensor by `deltarule._offsets`).
#[pyfunction]
fn validate_cu_seqlens(cu: Vec<i64>, tokens: usize) -> PyResult<()> {
    deltarule_core::varlen::validate_cu_seqlens(&cu, tokens)
        .map(|_| ())
        .map_err(to_py)
}

/// Validates the contents of `state_indices` against a pool of `rows` rows (read once per index
/// tensor by `deltarule._offsets`).
#[pyfunction]
fn validate_state_indices(idx: Vec<i64>, rows: usize) -> PyResult<()> {
    deltarule_core::validate_state_indices(&idx, rows).map_err(to_py)
}

fn engines() -> &'static Mutex<HashMap<usize, Arc<Engine>>> {
    static E: OnceLock<Mutex<HashMap<usize, Arc<Engine>>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(HashMap::new()))
}

fn engine(device: usize) -> PyResult<Arc<Engine>> {
    let mut map = engines()
        .lock()
        .map_err(|_| PyRuntimeError::new_err("engine registry lock poisoned"))?;
    if let Some(e) = map.get(&device) {
        return Ok(e.clone());
    }
    let e = Arc::new(Engine::new(&EngineOptions {
        backends: vec![BackendKind::Cuda],
        cuda_ordinal: device,
    }));
    map.insert(device, e.clone());
    Ok(e)
}

/// The rule a device launch of this problem would run and the workspace bytes it needs (compiles
/// and loads the kernels on first use). The caller allocates the workspace (the torch ops take it
/// from PyTorch's caching allocator: freed after eager calls, kept by a captured CUDA graph's
/// memory pool) and passes it to `launch`.
/// `max_seq`: the longest sequence's tokens when known on the host (a selection hint, see
/// `Engine::launch_device`; pass `launch` the same value).
#[pyfunction]
#[pyo3(signature = (op, mode, backend, desc, device, max_seq=None))]
fn workspace_bytes(
    py: Python<'_>,
    op: &str,
    mode: &str,
    backend: &str,
    desc: Desc,
    device: usize,
    max_seq: Option<usize>,
) -> PyResult<(&'static str, usize)> {
    let p = problem(op, mode, &desc)?;
    let pref = Preference::parse(backend).map_err(to_py)?;
    let e = engine(device)?;
    py.detach(|| {
        e.device_workspace(&p, pref, max_seq)
            .map(|(r, n)| (r.id, n))
            .map_err(to_py)
    })
}

/// Launches one op on device tensors with the caller's workspace (`ws_ptr`, `ws_bytes`: device
/// memory of at least `workspace_bytes(...)` bytes, 256-byte aligned, untouched by anything else
/// until the launch has completed on `stream`). `max_seq`: as for `workspace_bytes` (the same
/// value there and here). Returns the id of the rule that ran.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (op, mode, backend, desc, ptrs, stream, device, ws_ptr=0, ws_bytes=0, max_seq=None))]
fn launch(
    py: Python<'_>,
    op: &str,
    mode: &str,
    backend: &str,
    desc: Desc,
    ptrs: [u64; 13],
    stream: u64,
    device: usize,
    ws_ptr: u64,
    ws_bytes: usize,
    max_seq: Option<usize>,
) -> PyResult<&'static str> {
    let p = problem(op, mode, &desc)?;
    let pref = Preference::parse(backend).map_err(to_py)?;
    let e = engine(device)?;
    let t = DevicePtrs {
        q: ptrs[0],
        k: ptrs[1],
        v: ptrs[2],
        g: ptrs[3],
        beta: ptrs[4],
        cu_seqlens: ptrs[5],
        a_log: ptrs[6],
        dt_bias: ptrs[7],
        state_in: ptrs[8],
        state_indices: ptrs[9],
        o: ptrs[10],
        state_out: ptrs[11],
        checkpoints: ptrs[12],
    };
    // SAFETY: the caller's contract above (deltarule.ops passes a torch tensor it keeps alive
    // for the call; the allocator's stream ordering keeps it from reuse until the launch ran).
    let mut ws = unsafe { Workspace::external(ws_ptr, ws_bytes) }.map_err(to_py)?;
    // the launch only enqueues work; release the GIL around it
    py.detach(|| {
        e.launch_device(&p, pref, &t, stream, &mut ws, max_seq)
            .map(|r| r.id)
            .map_err(to_py)
    })
}

/// The rule `auto` (or `backend`) would choose for a problem, and the whole trace.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (op, mode, backend, desc, device=0, max_seq=None))]
fn select(
    op: &str,
    mode: &str,
    backend: &str,
    desc: Desc,
    device: usize,
    max_seq: Option<usize>,
) -> PyResult<(Option<&'static str>, Vec<String>)> {
    let p = problem(op, mode, &desc)?;
    let pref = Preference::parse(backend).map_err(to_py)?;
    let sel = engine(device)?.select(&p, pref, max_seq);
    Ok((sel.chosen.map(|r| r.id), sel.explain()))
}

fn host_tensor(name: &str, item: &Bound<'_, PyAny>) -> PyResult<HostTensor> {
    let (bytes, dt, shape): (Vec<u8>, String, Vec<usize>) = item
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("`{name}`: expected (bytes, dtype, shape)")))?;
    HostTensor::from_le_bytes(dtype(name, &dt)?, shape, &bytes).map_err(to_py)
}

/// The inputs of a host run from `{name: (bytes, dtype, shape)}`.
fn host_inputs(tensors: &Bound<'_, PyDict>) -> PyResult<Inputs> {
    let get = |n: &str| -> PyResult<Option<HostTensor>> {
        match tensors.get_item(n)? {
            Some(x) if !x.is_none() => Ok(Some(host_tensor(n, &x)?)),
            _ => Ok(None),
        }
    };
    let need = |n: &str| -> PyResult<HostTensor> {
        get(n)?.ok_or_else(|| PyValueError::new_err(format!("`{n}` is required")))
    };
    Ok(Inputs {
        q: need("q")?,
        k: need("k")?,
        v: need("v")?,
        g: need("g")?,
        beta: need("beta")?,
        cu_seqlens: need("cu_seqlens")?,
        a_log: get("A_log")?,
        dt_bias: get("dt_bias")?,
        initial_state: get("initial_state")?,
        state_indices: get("state_indices")?,
    })
}

/// Runs `p` on `engine` and returns the outputs as `{name: (bytes, dtype, shape)}` plus `rule`.
fn run_on<'py>(
    py: Python<'py>,
    engine: &Engine,
    p: &Problem,
    inputs: &Inputs,
    pref: Preference,
) -> PyResult<Bound<'py, PyDict>> {
    let out = py.detach(|| {
        engine
            .run(p, inputs, pref)
            .map(|(o, r)| (o, r.id))
            .map_err(to_py)
    })?;
    let d = PyDict::new(py);
    let put = |n: &str, t: &HostTensor| -> PyResult<()> {
        d.set_item(
            n,
            (
                PyBytes::new(py, &t.to_le_bytes()),
                t.dtype().name(),
                t.shape.clone(),
            ),
        )
    };
    put("o", &out.0.o)?;
    if let Some(s) = &out.0.final_state {
        put("final_state", s)?;
    }
    if let Some(c) = &out.0.checkpoints {
        put("checkpoints", c)?;
    }
    d.set_item("rule", out.1)?;
    Ok(d)
}

/// Runs a problem on host tensors with a named backend (`cpu` = the float64 reference,
/// `cpu:chunked`, `cuda`, ...) and returns the outputs as `{name: (bytes, dtype, shape)}`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (backend, op, mode, desc, tensors))]
fn run_host<'py>(
    py: Python<'py>,
    backend: &str,
    op: &str,
    mode: &str,
    desc: Desc,
    tensors: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyDict>> {
    let p = problem(op, mode, &desc)?;
    let inputs = host_inputs(tensors)?;
    let pref = if backend == "cpu" {
        Preference::Kernel(BackendKind::Cpu, Kernel::Reference)
    } else {
        Preference::parse(backend).map_err(to_py)?
    };
    let kinds = match pref.backend() {
        None => BackendKind::ALL.to_vec(),
        Some(b) => vec![b],
    };
    let e = Engine::new(&EngineOptions {
        backends: kinds,
        ..EngineOptions::default()
    });
    run_on(py, &e, &p, &inputs, pref)
}

/// The CPU backend's preference for a selection name: `auto` or a `cpu` name; any other
/// backend is an invalid argument (host tensors run on the CPU backend only).
fn cpu_preference(backend: &str) -> PyResult<Preference> {
    let pref = Preference::parse(backend).map_err(to_py)?;
    match pref.backend() {
        None | Some(BackendKind::Cpu) => Ok(pref),
        Some(_) => Err(bad(
            "backend",
            "auto or a CPU selection name (cpu, cpu:reference, cpu:chunked, cpu:chunked-f64, cpu:segmented) for CPU tensors",
            backend,
        )),
    }
}

/// Runs one op call on host tensors through the selection table's CPU rows (`auto` picks among
/// them as everywhere else) and returns the outputs as `run_host` does. The torch ops' path for
/// CPU tensors.
#[pyfunction]
#[pyo3(signature = (backend, op, mode, desc, tensors))]
fn run_cpu<'py>(
    py: Python<'py>,
    backend: &str,
    op: &str,
    mode: &str,
    desc: Desc,
    tensors: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyDict>> {
    static CPU: OnceLock<Engine> = OnceLock::new();
    let pref = cpu_preference(backend)?;
    let p = problem(op, mode, &desc)?;
    let inputs = host_inputs(tensors)?;
    run_on(py, CPU.get_or_init(Engine::cpu_only), &p, &inputs, pref)
}

/// The devices found and why any backend is unavailable.
#[pyfunction]
#[pyo3(signature = (device=0))]
fn backends(device: usize) -> PyResult<Vec<String>> {
    let e = engine(device)?;
    Ok(e.devices()
        .iter()
        .map(|d| match d {
            deltarule_core::DeviceState::Available(c) => format!("{}: {}", c.backend, c.summary()),
            deltarule_core::DeviceState::Unavailable { backend, reason } => {
                format!("{backend}: unavailable: {reason}")
            }
        })
        .collect())
}

/// The selection table as markdown.
#[pyfunction]
fn rules_markdown() -> String {
    deltarule_core::select::render_markdown()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(validate_cu_seqlens, m)?)?;
    m.add_function(wrap_pyfunction!(validate_state_indices, m)?)?;
    m.add_function(wrap_pyfunction!(launch, m)?)?;
    m.add_function(wrap_pyfunction!(workspace_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    m.add_function(wrap_pyfunction!(run_host, m)?)?;
    m.add_function(wrap_pyfunction!(run_cpu, m)?)?;
    m.add_function(wrap_pyfunction!(backends, m)?)?;
    m.add_function(wrap_pyfunction!(rules_markdown, m)?)?;
    Ok(())
}
