//! The decode kernels on the CPU: the sources of the decode modules (kernels/common.cuh,
//! decode.cuh, {gdn,kda}_decode.cu, with varlen.cu for the checkpoint offsets), exactly as NVRTC
//! gets them, compiled by the host C++ compiler against the emulator of `tests/emu/emu.h`, which
//! runs a block's threads as fibers in a seeded order with real barriers and warp shuffles,
//! starts a block's shared memory as 0xff bytes, lands cp.async copies only at their wait (NaN
//! before), puts a page with no access after every buffer, and stops on a deadlock or on threads
//! of a block that pass different numbers of barriers (see there). No GPU is needed: CI checks the indexing and the barrier protocol of
//! every decode entry point form, the block-per-item kernel and the persistent one, each
//! against float64, bit-identical to each other and under another fiber order.
//!
//! Needs a C++20 compiler (`CXX`, else `g++`); without one the tests print that they skipped,
//! and fail when `DELTARULE_REQUIRE_CXX=1` (CI).

use deltarule_core::{
    compare, BetaMode, DType, FinalState, Gate, HostTensor, InitialState, Kernel, Mode, Op,
    Outputs, Precision, Problem, StateLayout,
};
use deltarule_cuda::kernels::Module;
use deltarule_cuda::{
    launch, needs_tables, recurrent_launch, DecodeForm, DevicePtrs, Flags, WorkspaceLayout,
};
use deltarule_tests::{casefile::Case, diff, generate};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

const EMU_H: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/emu/emu.h");
const EMU_MAIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/emu/emu_main.h");
const VARLEN: &str = include_str!("../../../kernels/varlen.cu");
const SEGMENTS: &str = include_str!("../../../kernels/prefill_segments.cuh");
const COMMON: &str = include_str!("../../../kernels/common.cuh");
const SEG_CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/emu/segments_check.h");

/// The host C++ compiler, or None (printed; a failure under DELTARULE_REQUIRE_CXX=1).
fn compiler() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let found = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(cxx);
    }
    let msg = format!("no C++ compiler ({cxx}): the emulated decode kernels were not run");
    if std::env::var("DELTARULE_REQUIRE_CXX").as_deref() == Ok("1") {
        panic!("{msg} (DELTARULE_REQUIRE_CXX=1)");
    }
    println!("skipped: {msg}");
    None
}

/// FNV-1a, to name a build by its source and options.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// `src` with `EMU_SHARED_FRESH(name);` after each one-line `__shared__` declaration of one
/// variable (emu.h fills it with 0xff bytes when a block first reaches it; comments after `//`
/// are not looked at).
fn fresh_shared(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 1024);
    for line in src.lines() {
        out.push_str(line);
        let code = line.split("//").next().unwrap_or_default();
        if let Some(at) = code.find("__shared__") {
            let decl = code[at..].split(';').next().unwrap_or_default();
            assert!(
                code.trim_end().ends_with(';') && !decl.contains(','),
                "the emulator takes one `__shared__` variable a line: {line}"
            );
            let name = decl
                .split('[')
                .next()
                .and_then(|d| d.split_whitespace().last())
                .expect("a declared name");
            out.push_str(&format!(" EMU_SHARED_FRESH({name});"));
        }
        out.push('\n');
    }
    out
}

/// The emulator of `module` (a decode module) for head dims (k, v): the module's source, then
/// varlen.cu, then the entry table (`build`).
fn emulator(cxx: &str, module: Module, k: usize, v: usize) -> PathBuf {
    let mut entries: Vec<&str> = module.entry_points().to_vec();
    entries.push("varlen_build_tables");
    let table: Vec<String> = entries
        .iter()
        .map(|e| format!("{{\"{e}\", {e}}},"))
        .collect();
    let src = format!(
        "#include \"{EMU_H}\"\n{}\n#line 1 \"varlen.cu\"\n{}\n#line 1 \"emu_entries\"\n\
         struct EmuEntry {{ const char* name; void (*fn)(const Params); }};\n\
         static const EmuEntry EMU_ENTRIES[] = {{\n{}\n}};\n#include \"{EMU_MAIN}\"\n",
        fresh_shared(module.source()),
        fresh_shared(VARLEN),
        table.join("\n")
    );
    build(cxx, &src, &[EMU_H, EMU_MAIN], module.name(), k, v)
}

/// `src` (which includes the `headers`) compiled by `cxx` for head dims (k, v) into the
/// target's scratch folder as `name`, once per source, headers and options (builds run one at a
/// time: the compiler is the slow part on a small machine).
fn build(cxx: &str, src: &str, headers: &[&str], name: &str, k: usize, v: usize) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let flags = [
        "-std=c++20".to_string(),
        "-O1".into(),
        "-Wno-unknown-pragmas".into(),
        format!("-DHEAD_K={k}"),
        format!("-DHEAD_V={v}"),
    ];
    let headers: String = headers
        .iter()
        .map(|h| std::fs::read_to_string(h).unwrap_or_else(|e| panic!("read {h}: {e}")))
        .collect();
    let id = fnv(&format!("{src}{headers}{flags:?}{cxx}"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emu");
    let exe = dir.join(format!("{name}_{k}x{v}_{id:016x}"));
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if exe.exists() {
        return exe;
    }
    std::fs::create_dir_all(&dir).expect("create the emulator folder");
    let cpp = exe.with_extension("cpp");
    std::fs::write(&cpp, src).expect("write the emulator source");
    let tmp = exe.with_extension("part");
    let out = Command::new(cxx)
        .args(&flags)
        .arg(&cpp)
        .arg("-o")
        .arg(&tmp)
        .output()
        .expect("run the C++ compiler");
    assert!(
        out.status.success(),
        "{name} {k}x{v} does not compile for the emulator:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &exe).expect("move the emulator into place");
    exe
}

/// The buffers of one emulated call; a pointer is (buffer + 1) << 40 | offset (emu_main.h).
#[derive(Default)]
struct Buffers(Vec<Vec<u8>>);

impl Buffers {
    fn add(&mut self, bytes: Vec<u8>) -> u64 {
        self.0.push(bytes);
        (self.0.len() as u64) << 40
    }
    fn index(ptr: u64) -> usize {
        (ptr >> 40) as usize - 1
    }
}

/// Runs the recurrence of `case` in the emulator in the decode `form`, with `sms` multiprocessors
/// for the persistent grid and fiber-order `seed`, the way `CudaBackend::launch` runs it (outputs
/// poisoned with NaN bytes, the pool updated in place).
fn run(exe: &Path, case: &Case, form: DecodeForm, sms: usize, seed: u32) -> Outputs {
    let p = &case.problem;
    let inp = &case.inputs;
    let mut b = Buffers::default();
    let mut t = DevicePtrs {
        q: b.add(inp.q.to_le_bytes()),
        k: b.add(inp.k.to_le_bytes()),
        v: b.add(inp.v.to_le_bytes()),
        g: b.add(inp.g.to_le_bytes()),
        beta: b.add(inp.beta.to_le_bytes()),
        cu_seqlens: b.add(inp.cu_seqlens.to_le_bytes()),
        ..DevicePtrs::default()
    };
    if let Some(a) = &inp.a_log {
        t.a_log = b.add(a.to_le_bytes());
    }
    if let Some(d) = &inp.dt_bias {
        t.dt_bias = b.add(d.to_le_bytes());
    }
    if let Some(i) = &inp.state_indices {
        t.state_indices = b.add(i.to_le_bytes());
    }
    if let Some(s) = &inp.initial_state {
        t.state_in = b.add(s.to_le_bytes());
    }
    let total_ck = deltarule_core::validate_inputs(p, inp)
        .expect("valid inputs")
        .total_checkpoints();
    let state_bytes = p.hv * p.k * p.v * p.state_out_dtype.size();
    t.o = b.add(vec![0xff; p.tokens * p.hv * p.v * p.out_dtype.size()]);
    t.state_out = match p.final_state {
        FinalState::None => 0,
        FinalState::Dense => b.add(vec![0xff; p.seqs * state_bytes]),
        FinalState::InPlace => t.state_in,
    };
    if p.checkpoint_every.is_some() {
        t.checkpoints = b.add(vec![0xff; total_ck * state_bytes]);
    }
    let mut prm = launch::params(p, &t);
    prm.mode = Flags::PRODUCTION.bits();
    let layout = WorkspaceLayout::new(Kernel::Recurrent, p, 0, None);
    let ws = b.add(vec![0xff; layout.total]);
    prm.chunk_table = ws + layout.chunk_table as u64;
    prm.chunk_offsets = ws + layout.chunk_offsets as u64;
    prm.ck_offsets = ws + layout.ck_offsets as u64;
    prm.work = ws + layout.work as u64;
    let mut launches = Vec::new();
    if needs_tables(Kernel::Recurrent, p) {
        launches.push(("varlen_build_tables".to_string(), 1u32, 1024u32));
    }
    let main = recurrent_launch(p, form, sms);
    launches.push((main.entry.to_string(), main.grid.0, main.threads));

    let mut file = Vec::new();
    file.extend_from_slice(b"DRE1");
    file.extend_from_slice(&seed.to_le_bytes());
    file.extend_from_slice(&(b.0.len() as u32).to_le_bytes());
    for x in &b.0 {
        file.extend_from_slice(&(x.len() as u64).to_le_bytes());
    }
    file.extend_from_slice(&(launches.len() as u32).to_le_bytes());
    for (name, grid, threads) in &launches {
        let mut n = [0u8; 64];
        n[..name.len()].copy_from_slice(name.as_bytes());
        file.extend_from_slice(&n);
        file.extend_from_slice(&grid.to_le_bytes());
        file.extend_from_slice(&threads.to_le_bytes());
    }
    // SAFETY: Params is #[repr(C)], 264 bytes of integers and floats (no padding: asserted
    // against the C struct in emu_main.h), viewed as bytes for the file.
    let raw = unsafe {
        std::slice::from_raw_parts(
            (&prm as *const launch::Params).cast::<u8>(),
            std::mem::size_of::<launch::Params>(),
        )
    };
    file.extend_from_slice(raw);
    for x in &b.0 {
        file.extend_from_slice(x);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("emu");
    std::fs::create_dir_all(&dir).expect("create the emulator folder");
    let tag = format!(
        "{}_{}_{}",
        std::process::id(),
        fnv(&case.name),
        fnv(&format!("{form:?}{sms}{seed}"))
    );
    let (fin, fout) = (
        dir.join(format!("{tag}.in")),
        dir.join(format!("{tag}.out")),
    );
    std::fs::write(&fin, &file).expect("write the emulator input");
    let out = Command::new(exe)
        .arg(&fin)
        .arg(&fout)
        .output()
        .expect("run the emulator");
    let _ = std::fs::remove_file(&fin);
    assert!(
        out.status.success(),
        "{} in {form:?} (sms {sms}, seed {seed}): the emulator stopped ({:?}):\n{}",
        case.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let back = std::fs::read(&fout).expect("read the emulator output");
    let _ = std::fs::remove_file(&fout);
    let mut at = 0;
    let mut after = Vec::new();
    for x in &b.0 {
        after.push(back[at..at + x.len()].to_vec());
        at += x.len();
    }
    assert_eq!(at, back.len(), "emulator output size");
    let tensor = |ptr: u64, dt: DType, shape: Vec<usize>| {
        HostTensor::from_le_bytes(dt, shape, &after[Buffers::index(ptr)]).expect("an output")
    };
    let final_state = p.final_shape().map(|shape| {
        let dt = if p.final_state == FinalState::InPlace {
            p.state_in_dtype
        } else {
            p.state_out_dtype
        };
        tensor(t.state_out, dt, shape)
    });
    Outputs {
        o: tensor(t.o, p.out_dtype, p.o_shape()),
        final_state,
        checkpoints: p
            .checkpoint_every
            .map(|_| tensor(t.checkpoints, p.state_out_dtype, p.state_shape(total_ck))),
    }
}

/// Every output within the CUDA rows' bound of float64 with no NaN left, pool rows that no
/// index names unchanged; returns the errors, one line.
fn check(case: &Case, got: &Outputs, want: &Outputs) -> String {
    let bound = Precision::Bf16.bound();
    let mut line = Vec::new();
    for (name, g, w) in [
        ("o", Some(&got.o), Some(&want.o)),
        ("final", got.final_state.as_ref(), want.final_state.as_ref()),
        ("ckpt", got.checkpoints.as_ref(), want.checkpoints.as_ref()),
    ] {
        let (Some(g), Some(w)) = (g, w) else {
            assert!(g.is_none() && w.is_none(), "{}: {name} missing", case.name);
            continue;
        };
        let m = compare(&g.to_f64_vec(), &w.to_f64_vec());
        assert!(
            m.passes(bound),
            "{}: {name} rel_l2 {:.3e} (bound {bound:.0e}), {} non-finite, worst flat index {} \
             (got {}, want {})",
            case.name,
            m.rel_l2,
            m.nonfinite,
            m.worst,
            m.worst_got,
            m.worst_want
        );
        line.push(format!("{name} {:.2e}", m.rel_l2));
    }
    if let (Some(pool), Some(after), Some(idx)) = (
        case.inputs.initial_state.as_ref(),
        got.final_state.as_ref(),
        case.inputs.state_indices.as_ref(),
    ) {
        if case.problem.final_state == FinalState::InPlace {
            let named = idx.to_i64_vec("state_indices").expect("indices");
            let rows = pool.shape[0];
            let (a, b) = (pool.to_le_bytes(), after.to_le_bytes());
            let row = a.len() / rows;
            for r in (0..rows).filter(|r| !named.contains(&(*r as i64))) {
                assert!(
                    a[r * row..(r + 1) * row] == b[r * row..(r + 1) * row],
                    "{}: pool row {r} is named by no index but changed",
                    case.name
                );
            }
        }
    }
    line.join(", ")
}

/// A decode problem of 30 sequences of 0 to 3 tokens (several V tiles and value heads: more
/// items than the persistent grid's blocks, and not a multiple of them) with l2norm, the states in
/// `dt`; `states` sets the initial and final states and the checkpoints, and anything else.
fn problem(
    op: Op,
    layout: StateLayout,
    dt: DType,
    (h, hv): (usize, usize),
    (k, v): (usize, usize),
    states: impl Fn(&mut Problem),
) -> Case {
    let lens: Vec<usize> = (0..30).map(|i| [1, 0, 2, 1, 3, 1, 1][i % 7]).collect();
    let mut p = Problem::new(op, Mode::Decode, lens.len(), lens.iter().sum(), h, hv, k, v);
    p.state_in_dtype = dt;
    p.state_out_dtype = dt;
    p.layout = layout;
    p.l2norm = true;
    states(&mut p);
    let mut case = generate::generate(&p, &lens, 5, generate::DataStyle::default())
        .expect("generate the problem");
    case.name = format!(
        "{op:?} {layout:?} {dt} {h}/{hv} K={k} V={v} {:?} -> {:?} ckpt {:?}",
        p.initial, p.final_state, p.checkpoint_every
    );
    case
}

/// A pool of 36 rows updated in place (6 rows named by no index), checkpoints every 2 tokens.
fn pool(p: &mut Problem) {
    p.initial = InitialState::Pool { rows: 36 };
    p.final_state = FinalState::InPlace;
    p.checkpoint_every = Some(2);
}

/// One configuration: the block-per-item kernel and the persistent one (20 blocks: 5
/// "multiprocessors") against float64; the persistent one bit-identical to it, and again under
/// another fiber order and grid (8 blocks).
fn emulate(case: impl Fn() -> Case) {
    let Some(cxx) = compiler() else { return };
    let case = case();
    let p = &case.problem;
    let module = match p.op {
        Op::Gdn => Module::GdnDecode,
        Op::Kda => Module::KdaDecode,
    };
    let exe = emulator(&cxx, module, p.k, p.v);
    let want = diff::reference_outputs(&case).expect("the float64 reference");
    let block = DecodeForm::Block4;
    let persist = DecodeForm::Persistent;
    let a = run(&exe, &case, block, 5, 1);
    let errors = check(&case, &a, &want);
    for (sms, seed) in [(5, 2), (2, 3)] {
        let b = run(&exe, &case, persist, sms, seed);
        check(&case, &b, &want);
        assert!(
            a == b,
            "{}: the persistent form ({sms} SMs, seed {seed}) differs from the block-per-item kernel",
            case.name
        );
    }
    let c = run(&exe, &case, block, 5, 4);
    assert!(
        a == c,
        "{}: another fiber order changes the result",
        case.name
    );
    println!("{}: {errors}", case.name);
}

#[test]
fn emulated_gdn_kv_f32_pool() {
    emulate(|| {
        problem(
            Op::Gdn,
            StateLayout::Kv,
            DType::F32,
            (1, 2),
            (128, 128),
            pool,
        )
    });
}

/// Dense initial and final states in f16, checkpoints every token, f16 inputs.
#[test]
fn emulated_gdn_vk_f16_dense() {
    emulate(|| {
        problem(
            Op::Gdn,
            StateLayout::Vk,
            DType::F16,
            (2, 4),
            (64, 64),
            |p| {
                p.initial = InitialState::Dense;
                p.final_state = FinalState::Dense;
                p.checkpoint_every = Some(1);
                p.qkv_dtype = DType::F16;
            },
        )
    });
}

/// K = 32 (one unit a state thread in vk's column sums), a GVA group of 4, no initial state (no
/// copies at all in the persistent form), dense final states, a softplus gate, beta as doubled
/// logits.
#[test]
fn emulated_gdn_vk_k32_gva4() {
    emulate(|| {
        problem(
            Op::Gdn,
            StateLayout::Vk,
            DType::F32,
            (1, 4),
            (32, 64),
            |p| {
                p.initial = InitialState::None;
                p.final_state = FinalState::Dense;
                p.gate = Gate::Softplus;
                p.a_log = true;
                p.beta = BetaMode::Logit2;
            },
        )
    });
}

/// A softplus gate (A_log and dt_bias), beta as logits, i64 offsets and indices.
#[test]
fn emulated_kda_kv_f32_pool() {
    emulate(|| {
        problem(
            Op::Kda,
            StateLayout::Kv,
            DType::F32,
            (1, 2),
            (128, 128),
            |p| {
                pool(p);
                p.gate = Gate::Softplus;
                p.a_log = true;
                p.beta = BetaMode::Logit;
                p.offsets_dtype = DType::I64;
                p.index_dtype = DType::I64;
            },
        )
    });
}

/// A dense bf16 initial state and no final state (only the outputs and checkpoints every 3), a
/// lower-bound gate.
#[test]
fn emulated_kda_vk_bf16() {
    emulate(|| {
        problem(
            Op::Kda,
            StateLayout::Vk,
            DType::BF16,
            (2, 4),
            (64, 64),
            |p| {
                p.initial = InitialState::Dense;
                p.final_state = FinalState::None;
                p.checkpoint_every = Some(3);
                p.gate = Gate::LowerBound(-3.0);
            },
        )
    });
}

/// The segmented pair's own kernels (kernels/prefill_segments.cuh: the cuts, the f32 combine
/// along each sequence, the final states) on the emulator against plain loops
/// (tests/emu/segments_check.h), for K = V = 32 and 128 under two fiber orders. (Their dynamic
/// shared arrays become fixed ones of the size the host launches them with.)
#[test]
fn segment_kernels_on_the_emulator() {
    let Some(cxx) = compiler() else {
        return;
    };
    let fixed = SEGMENTS
        .replace("extern __shared__ int sc[];", "__shared__ int sc[1024];")
        .replace(
            "extern __shared__ float Ssh[];",
            "__shared__ float Ssh[HEAD_K * 16 + HEAD_K * (HEAD_K + 4)];",
        );
    assert!(
        !fixed.contains("extern __shared__"),
        "a dynamic shared array left"
    );
    let src = format!(
        "#include \"{EMU_H}\"\n#line 1 \"common.cuh\"\n{}\n\
         constexpr int KD = HEAD_K;\nconstexpr int VD = HEAD_V;\n\
         #line 1 \"prefill_segments.cuh\"\n{}\n#include \"{SEG_CHECK}\"\n",
        fresh_shared(COMMON),
        fresh_shared(&fixed)
    );
    for kv in [32, 128] {
        let exe = build(&cxx, &src, &[EMU_H, SEG_CHECK], "segments", kv, kv);
        for seed in ["1", "2"] {
            let out = Command::new(&exe)
                .arg(seed)
                .output()
                .expect("run the emulator");
            let so = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && so.trim() == "ok",
                "K = V = {kv}, seed {seed}: {so}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
