//! The selection table: invariants, a committed snapshot (`tests/golden/rules.txt`) so any change
//! to the rules shows in review, and the README table kept in sync. Regenerate both with
//! `DELTARULE_BLESS=1 cargo test -p deltarule-tests --test rules`.

use deltarule_core::caps::{BackendKind, Capabilities};
use deltarule_core::problem::{FinalState, InitialState, Mode, Op, StateLayout};
use deltarule_core::select::{
    contract_rejections, render_markdown, render_rules, select, AutoWhen, DeviceState, Preference,
    Reject, RULES,
};
use deltarule_core::{DType, Error, Gate, Kernel, Problem};
use proptest::prelude::*;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn bless() -> bool {
    std::env::var("DELTARULE_BLESS").ok().as_deref() == Some("1")
}

fn wgpu_caps(workgroup_kib: u32, subgroup: u32) -> Capabilities {
    let mut c = Capabilities::cpu(1);
    c.backend = BackendKind::Wgpu;
    c.device = "synthetic wgpu adapter".into();
    c.multiprocessors = None;
    c.max_workgroup_storage = workgroup_kib << 10;
    c.max_storage_buffers_per_stage = 8;
    c.max_invocations_per_workgroup = 256;
    c.subgroups = true;
    c.subgroup_size = (subgroup, subgroup);
    c.shader_f16 = true;
    c.timestamps = true;
    c
}

/// NVIDIA's Vulkan driver: 48 KiB, 32-wide subgroups, 16x16x16 f16 cooperative matrices,
/// 524288 storage buffers per stage.
fn wgpu_coop_caps() -> Capabilities {
    let mut c = wgpu_caps(48, 32);
    c.cooperative_matrix = true;
    c.max_storage_buffers_per_stage = 1 << 19;
    c
}

fn cuda_caps(major: u32, minor: u32, sms: u32) -> Capabilities {
    let mut c = Capabilities::cpu(1);
    c.backend = BackendKind::Cuda;
    c.device = format!("synthetic sm_{major}{minor}");
    c.compute_capability = Some((major, minor));
    c.multiprocessors = Some(sms);
    c.max_workgroup_storage = 227 << 10;
    c.max_storage_buffers_per_stage = u32::MAX;
    c.max_invocations_per_workgroup = 1024;
    c.subgroups = true;
    c.subgroup_size = (32, 32);
    c
}

fn cpu() -> DeviceState {
    DeviceState::Available(Capabilities::cpu(2))
}

fn no(kind: BackendKind, why: &str) -> DeviceState {
    DeviceState::Unavailable {
        backend: kind,
        reason: why.into(),
    }
}

fn device_sets() -> Vec<Vec<DeviceState>> {
    vec![
        vec![
            cpu(),
            no(BackendKind::Wgpu, "no adapter"),
            no(BackendKind::Cuda, "libcuda not found"),
        ],
        vec![
            cpu(),
            DeviceState::Available(wgpu_caps(32, 8)),
            no(BackendKind::Cuda, "none"),
        ],
        vec![
            cpu(),
            DeviceState::Available(wgpu_caps(48, 32)),
            no(BackendKind::Cuda, "none"),
        ],
        vec![
            cpu(),
            DeviceState::Available(wgpu_coop_caps()),
            no(BackendKind::Cuda, "none"),
        ],
        vec![
            cpu(),
            no(BackendKind::Wgpu, "none"),
            DeviceState::Available(cuda_caps(9, 0, 132)),
        ],
        vec![
            cpu(),
            no(BackendKind::Wgpu, "none"),
            DeviceState::Available(cuda_caps(8, 6, 84)),
        ],
        vec![
            cpu(),
            DeviceState::Available(wgpu_caps(48, 32)),
            DeviceState::Available(cuda_caps(9, 0, 132)),
        ],
        vec![
            cpu(),
            DeviceState::Available(wgpu_caps(48, 32)),
            DeviceState::Available(cuda_caps(10, 0, 148)),
        ],
    ]
}

/// A spread of problems covering the dimensions the rows constrain.
fn sample_problems() -> Vec<(Problem, usize)> {
    let mut out = Vec::new();
    for op in Op::ALL {
        for mode in Mode::ALL {
            // ((512, 1024): many pairs and more workspace blocks than the split form is allowed)
            for (seqs, len) in [
                (1usize, 8192usize),
                (64, 256),
                (256, 1),
                (8, 3),
                (512, 1024),
            ] {
                for hv in [4usize, 32] {
                    for k in [64usize, 128, 96] {
                        for sdt in [DType::F32, DType::BF16] {
                            for layout in StateLayout::ALL {
                                for pool in [false, true] {
                                    let mut p =
                                        Problem::new(op, mode, seqs, seqs * len, hv / 2, hv, k, k);
                                    p.layout = layout;
                                    p.state_in_dtype = sdt;
                                    p.state_out_dtype = sdt;
                                    p.out_dtype = DType::BF16;
                                    if pool {
                                        p.initial = InitialState::Pool { rows: seqs + 1 };
                                        p.final_state = FinalState::InPlace;
                                    } else {
                                        p.initial = InitialState::Dense;
                                    }
                                    out.push((p, len));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

#[test]
fn rule_ids_are_unique_and_name_their_row() {
    let mut ids: Vec<&str> = RULES.iter().map(|r| r.id).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate rule ids");
    for r in RULES {
        let want = format!(
            "{}.{}.{}.{}",
            r.backend,
            r.op.name(),
            r.mode.name(),
            r.kernel
        );
        assert!(r.id.starts_with(&want), "{} should start with {want}", r.id);
        assert!(!r.note.is_empty(), "{} has no note", r.id);
    }
}

#[test]
fn every_op_and_mode_has_a_cpu_reference_row() {
    for op in Op::ALL {
        for mode in Mode::ALL {
            let r = RULES.iter().find(|r| {
                r.op == op
                    && r.mode == mode
                    && r.backend == BackendKind::Cpu
                    && r.kernel == Kernel::Reference
            });
            let r = r.unwrap_or_else(|| panic!("no CPU reference row for {op:?} {mode:?}"));
            assert_eq!(r.auto_when, AutoWhen::Always);
            // the universal last resort: no other auto row has a larger priority number
            for other in RULES.iter().filter(|o| o.op == op && o.mode == mode) {
                if other.auto_when != AutoWhen::Never {
                    assert!(
                        other.priority <= r.priority,
                        "{} ranks after the reference",
                        other.id
                    );
                }
            }
        }
    }
}

fn arb_problem() -> impl Strategy<Value = Problem> {
    (
        (
            0usize..2,
            0usize..2,
            1usize..4,
            1usize..5,
            16usize..=256,
            16usize..=256,
        ),
        (
            0usize..3,
            0usize..3,
            any::<bool>(),
            0usize..3,
            0usize..3,
            0usize..2,
        ),
        (0usize..3, 0usize..3, 0usize..3, any::<bool>(), 0usize..4),
    )
        .prop_map(
            |(
                (op, mode, h, g, k, v),
                (gate, beta, l2, init, fin, layout),
                (qkv, sd, out, ck, lb),
            )| {
                let op = Op::ALL[op];
                let mut p = Problem::new(op, Mode::ALL[mode], 3, 100, h, h * g, k, v);
                p.gate = match (gate, op) {
                    (1, _) => Gate::Softplus,
                    (2, Op::Kda) => Gate::LowerBound([-5.0, -0.5, -20.0, -1e-3][lb]),
                    _ => Gate::Log,
                };
                p.a_log = matches!(p.gate, Gate::Softplus | Gate::LowerBound(_));
                p.beta = deltarule_core::BetaMode::ALL[beta];
                p.l2norm = l2;
                p.layout = StateLayout::ALL[layout];
                p.qkv_dtype = [DType::BF16, DType::F16, DType::F32][qkv];
                p.out_dtype = [DType::BF16, DType::F16, DType::F32][out];
                let sdt = [DType::F32, DType::BF16, DType::F16][sd];
                p.state_in_dtype = sdt;
                p.state_out_dtype = sdt;
                p.initial = [
                    InitialState::None,
                    InitialState::Dense,
                    InitialState::Pool { rows: 5 },
                ][init];
                p.final_state = match (fin, init) {
                    (_, 2) => FinalState::InPlace,
                    (0, _) => FinalState::None,
                    _ => FinalState::Dense,
                };
                if ck {
                    p.checkpoint_every = Some(1 + lb * 17);
                }
                p
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_cpu_reference_accepts_every_valid_problem(p in arb_problem()) {
        prop_assume!(p.validate().is_ok());
        let devices = vec![cpu(), no(BackendKind::Wgpu, "none"), no(BackendKind::Cuda, "none")];
        let sel = select(&p, &devices, Preference::Auto, Some(100));
        let chosen = sel.chosen.expect("auto must always find a row");
        prop_assert_eq!(chosen.backend, BackendKind::Cpu);
        let r = RULES.iter().find(|r| r.op == p.op && r.mode == p.mode && r.backend == BackendKind::Cpu && r.kernel == Kernel::Reference).expect("row");
        prop_assert!(contract_rejections(r, &p).is_empty());
        // and auto is deterministic
        let again = select(&p, &devices, Preference::Auto, Some(100));
        prop_assert_eq!(again.chosen.map(|r| r.id), Some(chosen.id));
    }
}

#[test]
fn no_row_is_unreachable() {
    let problems = sample_problems();
    let sets = device_sets();
    for r in RULES {
        let pref = if r.auto_when == AutoWhen::Never {
            Preference::Kernel(r.backend, r.kernel)
        } else {
            Preference::Auto
        };
        let witness = problems.iter().find_map(|(p, len)| {
            if p.op != r.op || p.mode != r.mode {
                return None;
            }
            sets.iter()
                .find(|ds| select(p, ds, pref, Some(*len)).chosen.map(|c| c.id) == Some(r.id))
        });
        assert!(
            witness.is_some(),
            "{} is never chosen ({pref}) for any sample problem and device set: a \
             higher-priority row accepts a superset of its problems, or its contract is empty",
            r.id
        );
    }
}

#[test]
fn explicit_choices_that_do_not_fit_are_errors_with_reasons() {
    let mut p = Problem::new(Op::Kda, Mode::Prefill, 1, 8192, 32, 32, 128, 128);
    p.state_in_dtype = DType::BF16;
    p.state_out_dtype = DType::BF16;
    let devices = vec![
        cpu(),
        no(BackendKind::Wgpu, "no adapter"),
        no(
            BackendKind::Cuda,
            "libcuda not found (searched libcuda.so.1)",
        ),
    ];
    for choice in ["cuda:small-bh", "cuda", "wgpu:chunked"] {
        let sel = select(
            &p,
            &devices,
            Preference::parse(choice).expect("parse"),
            Some(8192),
        );
        assert!(
            sel.chosen.is_none(),
            "{choice} must not be chosen without its device"
        );
        match sel.rule() {
            Err(Error::NoEligibleRule { choice: c, reasons }) => {
                assert_eq!(c, choice);
                assert!(!reasons.is_empty());
                let all = reasons.join("\n");
                assert!(all.contains("no ") && all.contains("device"), "{all}");
            }
            other => panic!("{choice}: expected NoEligibleRule, got {other:?}"),
        }
    }
    // auto on this machine picks a CPU row and says so
    let sel = select(&p, &devices, Preference::Auto, Some(8192));
    assert_eq!(sel.chosen.map(|r| r.backend), Some(BackendKind::Cpu));
    // a contract reason is typed and printable
    let mut q = p.clone();
    q.k = 96;
    q.v = 96;
    let sel = select(
        &q,
        &device_sets()[3],
        Preference::Backend(BackendKind::Cuda),
        Some(8192),
    );
    for (r, v) in &sel.trace {
        if r.backend == BackendKind::Cuda {
            let rejects = v.as_ref().expect_err("96 is not a fast head dim");
            assert!(
                rejects.iter().any(|x| matches!(x, Reject::HeadDim { .. })),
                "{:?}",
                rejects
            );
        }
    }
}

#[test]
fn unknown_backend_names_are_invalid_arguments() {
    for bad in ["gpu", "cuda:fast", "cpu:", ""] {
        assert!(
            matches!(Preference::parse(bad), Err(Error::InvalidArgument { .. })),
            "{bad}"
        );
    }
    assert_eq!(
        Preference::parse("cuda:small-bh").expect("ok"),
        Preference::Kernel(BackendKind::Cuda, Kernel::SmallBh)
    );
}

#[test]
fn the_rendered_table_matches_the_snapshot() {
    let path = root().join("tests/golden/rules.txt");
    let now = render_rules();
    if bless() {
        std::fs::write(&path, &now).expect("write snapshot");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        committed, now,
        "the rule table changed: review the diff and regenerate with DELTARULE_BLESS=1 cargo test -p deltarule-tests --test rules"
    );
}

const BEGIN: &str =
    "<!-- rules:begin (generated by `deltarule rules --markdown`; a test keeps it in sync) -->\n";
const END: &str = "<!-- rules:end -->";

#[test]
fn the_readme_table_matches_the_rules() {
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let (Some(a), Some(b)) = (readme.find(BEGIN), readme.find(END)) else {
        panic!("README.md lacks the rules markers");
    };
    let table = render_markdown();
    let current = &readme[a + BEGIN.len()..b];
    if bless() && current != table {
        let new = format!(
            "{}{}{}{}",
            &readme[..a + BEGIN.len()],
            table,
            "",
            &readme[b..]
        );
        std::fs::write(&path, new).expect("write README");
        return;
    }
    assert_eq!(
        current, table,
        "README rules table is stale: DELTARULE_BLESS=1 cargo test -p deltarule-tests --test rules"
    );
}

#[test]
fn auto_splits_prefill_while_the_workspace_is_bounded_then_fuses() {
    // measured on an H200: small-bh is as fast as or faster than the fused kernel on every
    // many-pair shape measured, so auto takes it up to 16 Ki (chunk, value head) workspace blocks
    let devices = vec![cpu(), DeviceState::Available(cuda_caps(9, 0, 132))];
    let pick = |op: Op, seqs: usize, len: usize, hv: usize| {
        let mut p = Problem::new(op, Mode::Prefill, seqs, seqs * len, hv / 2, hv, 128, 128);
        p.initial = InitialState::Dense;
        let sel = select(&p, &devices, Preference::Auto, Some(len));
        let id = sel.chosen.map(|r| r.id).unwrap_or("none");
        (id, sel.explain().join("\n"))
    };
    // few pairs: split whatever the length (1 x 32768 at HV 32 is already past the block bound)
    assert_eq!(pick(Op::Gdn, 1, 32768, 32).0, "cuda.gdn.prefill.small-bh");
    assert_eq!(pick(Op::Gdn, 1, 1 << 20, 32).0, "cuda.gdn.prefill.small-bh");
    // many pairs, bounded workspace: split
    assert_eq!(pick(Op::Gdn, 16, 1024, 32).0, "cuda.gdn.prefill.small-bh");
    assert_eq!(pick(Op::Kda, 256, 64, 32).0, "cuda.kda.prefill.small-bh");
    // many pairs beyond the bound: fused, and the split row says why it was passed over
    let (id, why) = pick(Op::Gdn, 512, 1024, 32);
    assert_eq!(id, "cuda.gdn.prefill.chunked");
    assert!(why.contains("workspace blocks"), "{why}");
    assert_eq!(pick(Op::Kda, 512, 1024, 32).0, "cuda.kda.prefill.chunked");
}

/// A mixed batch (one long sequence among short ones) past the workspace bound: the fused form
/// would walk the long sequence in one CTA a value head while the device idles, so auto keeps
/// the split form when the longest sequence's chunks are more than 1.5 x the fused form's waves,
/// up to the long-chain bound; equal sequences keep the fused form. H100, fused against split:
/// gdn 16/32 1x32768+4x500 8.206 against 1.290 ms.
#[test]
fn auto_splits_a_mixed_batch_whose_long_sequence_is_the_fused_chain() {
    let devices = vec![cpu(), DeviceState::Available(cuda_caps(9, 0, 132))];
    let pick = |op: Op, lens: &[usize], known: bool| {
        let tokens = lens.iter().sum();
        let mut p = Problem::new(op, Mode::Prefill, lens.len(), tokens, 16, 32, 128, 128);
        p.initial = InitialState::Dense;
        let max_seq = lens.iter().copied().max().filter(|_| known);
        let sel = select(&p, &devices, Preference::Auto, max_seq);
        let id = sel.chosen.map(|r| r.id).unwrap_or("none");
        (id, sel.explain().join("\n"))
    };
    let mixed = [32768, 500, 500, 500, 500];
    for op in Op::ALL {
        let split = format!("cuda.{}.prefill.small-bh", op.name());
        let fused = format!("cuda.{}.prefill.chunked", op.name());
        // 17,536 blocks > 16 Ki, 512 chunks against 67 fused waves (gdn, two CTAs an SM)
        let (id, why) = pick(op, &mixed, true);
        assert_eq!(id, split, "{why}");
        assert!(why.contains("512 chunks"), "{why}");
        // 16384 + 32 x 500: 256 chunks against 66 waves of the fused T-form (two CTAs an SM),
        // 131 of kda's classic kernel (one an SM); H100, kda: fused 5.147 ms, split 2.491
        let mut many = vec![16384];
        many.extend([500; 32]);
        assert_eq!(pick(op, &many, true).0, split);
        // the longest sequence unknown: the workspace bound alone decides
        let (id, why) = pick(op, &mixed, false);
        assert_eq!(id, fused);
        assert!(why.contains("longest sequence not known"), "{why}");
        // equal sequences: the chain is the waves, fused as before
        let (id, why) = pick(op, &[8192; 8], true);
        assert_eq!(id, fused);
        assert!(why.contains("fused waves"), "{why}");
        // beyond the long-chain bound (65,536 blocks): fused
        let mut huge = vec![1 << 20];
        huge.extend([500; 400]);
        let (id, why) = pick(op, &huge, true);
        assert_eq!(id, fused);
        assert!(why.contains("long-chain bound"), "{why}");
    }
}

/// Measured on an H200: gdn 16/32 256x64 on the fused T-form 0.890 ms against 1.159 on small-bh,
/// 128x128 0.898 against 0.816: auto fuses gdn where every sequence fits one chunk (and the final
/// state is dense f32, K, V >= 64: the fused T-form's domain), knowing the longest sequence.
#[test]
fn auto_fuses_gdn_when_every_sequence_is_one_chunk() {
    use deltarule_core::{DType, FinalState};
    let devices = vec![cpu(), DeviceState::Available(cuda_caps(9, 0, 132))];
    let base = |seqs: usize, len: usize| {
        let mut p = Problem::new(Op::Gdn, Mode::Prefill, seqs, seqs * len, 16, 32, 128, 128);
        p.initial = InitialState::Dense;
        p
    };
    let pick = |p: &Problem, max_seq: Option<usize>| {
        let sel = select(p, &devices, Preference::Auto, max_seq);
        let id = sel.chosen.map(|r| r.id).unwrap_or("none");
        (id, sel.explain().join("\n"))
    };
    let (id, why) = pick(&base(256, 64), Some(64));
    assert_eq!(id, "cuda.gdn.prefill.chunked");
    assert!(why.contains("fused T-form"), "{why}");
    // the longest sequence unknown, longer than a chunk, or too few pairs: split
    assert_eq!(pick(&base(256, 64), None).0, "cuda.gdn.prefill.small-bh");
    assert_eq!(
        pick(&base(128, 128), Some(128)).0,
        "cuda.gdn.prefill.small-bh"
    );
    assert_eq!(pick(&base(2, 64), Some(64)).0, "cuda.gdn.prefill.small-bh");
    // outside the fused T-form's domain: split
    let mut p = base(256, 64);
    p.state_out_dtype = DType::BF16;
    assert_eq!(pick(&p, Some(64)).0, "cuda.gdn.prefill.small-bh");
    let mut p = base(256, 64);
    p.final_state = FinalState::None;
    assert_eq!(pick(&p, Some(64)).0, "cuda.gdn.prefill.small-bh");
    let mut p = Problem::new(Op::Gdn, Mode::Prefill, 256, 256 * 64, 16, 32, 32, 128);
    p.initial = InitialState::Dense;
    assert_eq!(pick(&p, Some(64)).0, "cuda.gdn.prefill.small-bh");
    // kda has no fused T-form
    let mut p = Problem::new(Op::Kda, Mode::Prefill, 256, 256 * 64, 32, 32, 128, 128);
    p.initial = InitialState::Dense;
    assert_eq!(pick(&p, Some(64)).0, "cuda.kda.prefill.small-bh");
}

/// gdn's coop kernel holds 48,144 bytes of workgroup memory in its intra stage, kda's 32 KiB: an
/// adapter with cooperative matrices but 32 KiB of workgroup memory keeps the kda row and rejects
/// the gdn row with that number, and auto falls back to the f32 kernel for gdn.
#[test]
fn the_gdn_coop_row_needs_the_workgroup_memory_of_its_intra_stage() {
    let mut small = wgpu_coop_caps();
    small.max_workgroup_storage = 32 << 10;
    let devices = vec![cpu(), DeviceState::Available(small)];
    let gdn = Problem::new(Op::Gdn, Mode::Prefill, 1, 1024, 2, 4, 128, 128);
    let kda = Problem::new(Op::Kda, Mode::Prefill, 1, 1024, 2, 4, 128, 128);
    let sel = select(
        &gdn,
        &devices,
        Preference::Kernel(BackendKind::Wgpu, Kernel::Coop),
        Some(8192),
    );
    assert!(sel.chosen.is_none());
    let why = format!("{:?}", sel.rule());
    assert!(why.contains("48144"), "{why}");
    let auto = select(&gdn, &devices, Preference::Auto, Some(8192));
    assert_eq!(auto.chosen.map(|r| r.id), Some("wgpu.gdn.prefill.chunked"));
    let sel = select(
        &kda,
        &devices,
        Preference::Kernel(BackendKind::Wgpu, Kernel::Coop),
        Some(8192),
    );
    assert_eq!(sel.chosen.map(|r| r.id), Some("wgpu.kda.prefill.coop"));
    // NVIDIA's 48 KiB fits
    let devices = vec![cpu(), DeviceState::Available(wgpu_coop_caps())];
    let sel = select(&gdn, &devices, Preference::Auto, Some(8192));
    assert_eq!(sel.chosen.map(|r| r.id), Some("wgpu.gdn.prefill.coop"));
}
