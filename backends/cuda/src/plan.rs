//! Launch decisions, pure and host-only: for a (kernel, problem), the module's size table and
//! the [`Options`], which entry points run, on which grids, with how many threads and how much
//! shared memory ([`plan`]). Nothing here touches the device; `dispatch.rs` carries a [`Plan`]
//! out.

mod decode;
mod small_bh;

pub use decode::{decode_items, recurrent_launch, DecodeForm};
pub use small_bh::{
    o_fits_tma, overlap_plan, segment_passes, segment_plan, segmented, small_bh_launches,
    state_pass, state_tile, Overlap, OverlapSetting, SegmentPlan, SegmentSetting, StatePass,
    WgmmaPasses,
};

use crate::launch::table_rows;
use crate::options::Options;
use deltarule_core::variants::fused_tform_applies;
use deltarule_core::{BackendKind, Error, Kernel, Op, Problem, Result};

/// The size table a prefill module exports (`{op}_prefill_sizes`, `PREFILL_SIZES` in
/// kernels/prefill_sizes.cuh): dynamic shared bytes and threads of its entry points, 0 where the
/// module has no such entry point. Decode modules export none (all 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefillSizes {
    /// `{op}_prefill_fused`.
    pub fused_smem: u32,
    /// `{op}_prefill_state32`.
    pub state32_smem: u32,
    /// Workspace bytes per (chunk row, value head) of the small-bh intra kernels.
    pub block_bytes: usize,
    /// `{op}_prefill_intra` and the T-form intra kernels.
    pub intra_smem: u32,
    pub state32_threads: u32,
    /// `{op}_prefill_state16`.
    pub state16_smem: u32,
    pub state16_threads: u32,
    /// `{op}_prefill_state64` (0: V < 64).
    pub state64_smem: u32,
    pub state64_threads: u32,
    /// `{op}_prefill_state_wgmma` (0: not sm_90a, K not 64 or 128, or V < 64).
    pub wgmma_smem: u32,
    pub wgmma_threads: u32,
    /// `gdn_prefill_state_tform_wgmma` and the T-form intra kernels (0: kda, or no wgmma pass).
    pub tform_smem: u32,
    pub tform_threads: u32,
    /// `gdn_prefill_fused_tform` (0: kda, or K or V below 64).
    pub fused_tform_smem: u32,
}

impl PrefillSizes {
    /// The table's 14 integers, in `PREFILL_SIZES` order.
    pub fn from_table(t: [i32; 14]) -> PrefillSizes {
        let u = |i: usize| t[i].max(0) as u32;
        PrefillSizes {
            fused_smem: u(0),
            state32_smem: u(1),
            block_bytes: t[2].max(0) as usize,
            intra_smem: u(3),
            state32_threads: u(4),
            state16_smem: u(5),
            state16_threads: u(6),
            state64_smem: u(7),
            state64_threads: u(8),
            wgmma_smem: u(9),
            wgmma_threads: u(10),
            tform_smem: u(11),
            tform_threads: u(12),
            fused_tform_smem: u(13),
        }
    }

    /// The most dynamic shared memory any entry point of the module takes.
    pub fn largest_smem(&self) -> u32 {
        [
            self.fused_smem,
            self.state32_smem,
            self.intra_smem,
            self.state16_smem,
            self.state64_smem,
            self.wgmma_smem,
            self.tform_smem,
            self.fused_tform_smem,
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// Whether the module has entry point `name` (the size table says which optional ones were
    /// compiled for this architecture and these head dims).
    pub fn has_entry(&self, name: &str) -> bool {
        if name.ends_with("_fused_tform") {
            self.fused_tform_smem > 0
        } else if name.contains("_tform") {
            self.tform_smem > 0
        } else if name.ends_with("_state_wgmma") {
            self.wgmma_smem > 0
        } else if name.ends_with("_state64") {
            self.state64_threads > 0
        } else {
            true
        }
    }
}

/// Tensor maps passed after `Params` (a `__grid_constant__` parameter, tmap.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorMaps {
    /// `StateWgmmaMaps`: the workspace blocks' W, q̃, k̃ and P.
    StateWgmma,
    /// `TformStateMaps`: q, k, v, o and the workspace blocks' T_w, T_u, P.
    Tform,
}

/// One kernel launch: entry point, grid, threads (a 1-D block), dynamic shared bytes, the tensor
/// maps it takes, and whether it starts as a programmatic dependent launch of the kernel before
/// it in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub entry: &'static str,
    pub grid: (u32, u32, u32),
    pub threads: u32,
    pub smem: u32,
    pub maps: Option<TensorMaps>,
    pub dependent: bool,
}

impl Launch {
    /// A launch with `Params` as its only parameter, in stream order.
    pub fn plain(entry: &'static str, grid: (u32, u32, u32), threads: u32, smem: u32) -> Launch {
        Launch {
            entry,
            grid,
            threads,
            smem,
            maps: None,
            dependent: false,
        }
    }
}

/// The metadata kernel of `kernels/varlen.cu` (chunk table, chunk and checkpoint offsets).
pub const TABLES: Launch = Launch {
    entry: "varlen_build_tables",
    grid: (1, 1, 1),
    threads: 1024,
    smem: 0,
    maps: None,
    dependent: false,
};

/// Every launch of one call, in stream order: [`TABLES`] when `tables`, then `main` (the fused
/// kernel, the small-bh intra kernel or the token recurrence), then the small-bh state pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    pub tables: bool,
    pub main: Launch,
    pub state: Option<Launch>,
    /// The overlapped T-form pair's parameters (`Params::ov_*` and the sync area).
    pub overlap: Option<Overlap>,
    /// The segmented T-form pair: `main` and `state` then run over the segments, and the state
    /// pass three times around the combine (dispatch.rs).
    pub segments: Option<SegmentPlan>,
}

/// The launches of `kernel` on `p` with a main module of `sizes`, `options` and `sms`
/// multiprocessors; `o`: the output's device address (the T-form pass stores a 16-bit o by TMA);
/// `max_seq`: the longest sequence's tokens where the caller knows them (the segment rule uses
/// it; a stale hint changes the plan, never the result).
pub fn plan(
    kernel: Kernel,
    p: &Problem,
    sizes: &PrefillSizes,
    options: &Options,
    sms: usize,
    o: u64,
    max_seq: Option<usize>,
) -> Result<Plan> {
    let tables = needs_tables(kernel, p);
    let (main, state, overlap, segments) = match kernel {
        Kernel::Chunked => (fused_launch(p, sizes, options), None, None, None),
        Kernel::SmallBh => {
            let (intra, state, overlap, seg) =
                small_bh_launches(p, sizes, options, sms, o, max_seq);
            (intra, Some(state), overlap, seg)
        }
        Kernel::Recurrent => {
            let form = options
                .decode_form
                .unwrap_or_else(|| DecodeForm::for_problem(p, sms));
            (recurrent_launch(p, form, sms), None, None, None)
        }
        other => {
            return Err(Error::unsupported(
                BackendKind::Cuda,
                other.name(),
                "not a CUDA kernel",
            ))
        }
    };
    Ok(Plan {
        tables,
        main,
        state,
        overlap,
        segments,
    })
}

/// `chunked`: the fused T-form (`gdn_prefill_fused_tform`) where the module has it (gdn, K and
/// V >= 64) and it applies (`deltarule_core::variants::fused_tform_applies`: it keeps the
/// running state in the final-state row between chunks, so it needs a dense f32 final state),
/// unless `DELTARULE_CUDA_FUSED=classic`; else the classic fused kernel. Either has one CTA per
/// (value head, sequence), 256 threads.
fn fused_launch(p: &Problem, sizes: &PrefillSizes, options: &Options) -> Launch {
    let grid = (p.hv as u32, p.seqs as u32, 1);
    if sizes.fused_tform_smem > 0 && fused_tform_applies(p) && !options.fused_classic {
        Launch::plain("gdn_prefill_fused_tform", grid, 256, sizes.fused_tform_smem)
    } else {
        let entry = by_op(p.op, "gdn_prefill_fused", "kda_prefill_fused");
        Launch::plain(entry, grid, 256, sizes.fused_smem)
    }
}

/// `gdn` or `kda`'s name of an entry point.
fn by_op(op: Op, gdn: &'static str, kda: &'static str) -> &'static str {
    match op {
        Op::Gdn => gdn,
        Op::Kda => kda,
    }
}

/// Whether a launch of `kernel` on `p` starts with the metadata kernel [`TABLES`]: every kernel
/// but the token recurrence needs the tables, the recurrence only the checkpoint offsets.
pub fn needs_tables(kernel: Kernel, p: &Problem) -> bool {
    kernel != Kernel::Recurrent || p.checkpoint_every.is_some()
}

/// Whether the CUDA `kernel` implements `p`, a problem `Problem::validate` accepts, with the
/// reason if not: the contract of the kernel's row in the selection table (modes, head dims,
/// dtypes, gates, checkpoints; one definition, `deltarule_core::select::check_contract`), then
/// the grid limits, which the table does not state.
pub fn check_supported(kernel: Kernel, p: &Problem) -> Result<()> {
    deltarule_core::select::check_contract(BackendKind::Cuda, kernel, p)?;
    if let Some(why) = grid_limit(kernel, p) {
        return Err(Error::unsupported(BackendKind::Cuda, kernel.name(), why));
    }
    Ok(())
}

/// Why `kernel`'s grid cannot hold `p`, if it cannot: the prefill kernels put the sequences and
/// the value heads on grid dimensions capped at 65535; the token recurrence's 1-D grid holds up
/// to i32::MAX items.
fn grid_limit(kernel: Kernel, p: &Problem) -> Option<String> {
    if kernel == Kernel::Recurrent {
        let items = decode_items(p);
        (items > i32::MAX as usize).then(|| {
            format!(
                "{items} work items (V / 32 x HV x N) above the 1-D grid limit {}",
                i32::MAX
            )
        })
    } else {
        (p.seqs > 65535 || p.hv > 65535)
            .then(|| format!("N = {}, HV = {} above the grid limit 65535", p.seqs, p.hv))
    }
}

/// Which entry points an sm_90a build of `p`'s module has (kernels/prefill_sizes.cuh): the
/// 64-column state pass where V >= 64, the wgmma pass where K is 64 or 128 and V >= 64, the
/// T-form pass with it for gdn, the fused T-form for gdn with K, V >= 64. Sizes and threads are
/// placeholders (1 where the entry point exists): only choices and grids planned with it mean
/// anything, which is what [`describe`] shows without a device.
pub fn sm90a_entries(p: &Problem) -> PrefillSizes {
    let gdn = p.op == Op::Gdn;
    let wg = matches!(p.k, 64 | 128) && p.v >= 64;
    let one = |b: bool| u32::from(b);
    PrefillSizes {
        fused_smem: 1,
        state32_smem: 1,
        block_bytes: 1,
        intra_smem: 1,
        state32_threads: 1,
        state16_smem: 1,
        state16_threads: 1,
        state64_smem: one(p.v >= 64),
        state64_threads: one(p.v >= 64),
        wgmma_smem: one(wg),
        wgmma_threads: one(wg),
        tform_smem: one(wg && gdn),
        tform_threads: one(wg && gdn),
        fused_tform_smem: one(gdn && p.k >= 64 && p.v >= 64),
    }
}

/// The launches `kernel` makes for `p` on an sm_90a device with `sms` multiprocessors under the
/// default options (no `DELTARULE_CUDA_*` variable), one line each: entry point, grid and the
/// launch rule's choice (state pass and V tile, fused form, overlap, segments). For `deltarule
/// select --explain`; needs no device. `max_seq`: the longest sequence's tokens, where known.
pub fn describe(
    kernel: Kernel,
    p: &Problem,
    sms: usize,
    max_seq: Option<usize>,
) -> Result<Vec<String>> {
    let options = Options::from_vars(|_| None)?;
    let sizes = sm90a_entries(p);
    let plan = plan(kernel, p, &sizes, &options, sms, 0, max_seq)?;
    let grid = |l: &Launch| format!("grid {:?}", l.grid);
    let mut out = Vec::new();
    match kernel {
        Kernel::Chunked => {
            let form = if plan.main.entry.ends_with("_fused_tform") {
                "the fused T-form, two CTAs an SM"
            } else {
                "the classic fused kernel, one CTA an SM"
            };
            out.push(format!(
                "{}  {}: one CTA per (value head, sequence), {form}",
                plan.main.entry,
                grid(&plan.main)
            ));
        }
        Kernel::SmallBh => {
            let pass = state_pass(
                p,
                sms,
                options.state_pass,
                WgmmaPasses::of(&sizes, p, 0),
                options.overlap != OverlapSetting::Off,
            );
            out.push(format!(
                "{}  {}: the chunk-parallel intra stage",
                plan.main.entry,
                grid(&plan.main)
            ));
            if let Some(s) = &plan.state {
                let pass = if plan.segments.is_some() {
                    StatePass::TformWgmma
                } else {
                    pass
                };
                let what = match pass {
                    StatePass::MmaSync(bv) => format!("mma.sync state pass, {bv}-column V tiles"),
                    StatePass::Wgmma => "wgmma state pass, 64-column V tiles".into(),
                    StatePass::TformWgmma => "T-form wgmma state pass, 64-column V tiles".into(),
                };
                out.push(format!(
                    "{}  {}: {what}{}",
                    s.entry,
                    grid(s),
                    if s.dependent {
                        ", launched dependent"
                    } else {
                        ""
                    }
                ));
            }
            if let Some(sg) = plan.segments {
                out.push(format!(
                    "segments: every sequence cut into segments of {} tokens ({} at most): the \
                     state pass from zero and from the identity over v = 0 (each segment's final \
                     state and transition, the last segment of a sequence skipped), \
                     gdn_prefill_segments_combine along each sequence in f32, the state pass \
                     again from the true incoming states",
                    sg.tokens(p),
                    sg.n_seg
                ));
            }
            if let Some(o) = plan.overlap {
                let items = table_rows(p) * p.hv;
                out.push(format!(
                    "overlap: {} state CTAs start on SMs freed after {} of {items} intra items \
                     ({:.0} %), the intra kernel persistent on {} CTAs",
                    o.free,
                    o.tau,
                    100.0 * f64::from(o.tau) / items.max(1) as f64,
                    o.grid
                ));
            }
        }
        Kernel::Recurrent => {
            out.push(format!(
                "{}  {}: the token recurrence",
                plan.main.entry,
                grid(&plan.main)
            ));
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{
        check_supported, grid_limit, plan, DecodeForm, Launch, OverlapSetting, Plan, PrefillSizes,
        StatePass, TensorMaps,
    };
    use crate::options::{Flags, Options};
    use deltarule_core::{DType, FinalState, InitialState, Kernel, Mode, Op, Problem};

    fn prefill(seqs: usize, tokens: usize, h: usize, hv: usize) -> Problem {
        Problem::new(Op::Gdn, Mode::Prefill, seqs, tokens, h, hv, 128, 128)
    }

    /// `describe` plans with the entry points an sm_90a build has for the head dims: the wgmma
    /// passes only for K in {64, 128} and V >= 64, the T-form ones only for gdn.
    #[test]
    fn describe_names_the_launches_and_the_state_pass() {
        let text =
            |k: Kernel, p: &Problem| super::describe(k, p, 132, None).expect("plan").join("\n");
        let gdn = prefill(16, 16384, 16, 32);
        let t = text(Kernel::SmallBh, &gdn);
        assert!(
            t.contains("gdn_prefill_state_tform_wgmma  grid (2, 32, 16)"),
            "{t}"
        );
        let mut kda = Problem::new(Op::Kda, Mode::Prefill, 16, 16384, 16, 32, 128, 128);
        let t = text(Kernel::SmallBh, &kda);
        assert!(t.contains("kda_prefill_state_wgmma"), "{t}");
        assert!(!t.contains("tform"), "{t}");
        kda.k = 32;
        let t = text(Kernel::SmallBh, &kda);
        assert!(
            t.contains("kda_prefill_state64") && t.contains("64-column"),
            "{t}"
        );
        let mut fused = prefill(256, 256 * 64, 16, 32);
        fused.initial = InitialState::Dense;
        let t = text(Kernel::Chunked, &fused);
        assert!(
            t.contains("gdn_prefill_fused_tform  grid (32, 256, 1)"),
            "{t}"
        );
        fused.k = 32;
        let t = text(Kernel::Chunked, &fused);
        assert!(
            t.contains("gdn_prefill_fused  grid") && t.contains("classic"),
            "{t}"
        );
    }

    /// A gdn prefill module on sm_90a with K = V = 128 (every entry point present), with
    /// distinct made-up sizes so that each launch shows which entry's sizes it took.
    const GDN: PrefillSizes = PrefillSizes {
        fused_smem: 1000,
        state32_smem: 2000,
        block_bytes: 37 * 1024,
        intra_smem: 3000,
        state32_threads: 128,
        state16_smem: 4000,
        state16_threads: 64,
        state64_smem: 5000,
        state64_threads: 256,
        wgmma_smem: 6000,
        wgmma_threads: 160,
        tform_smem: 7000,
        tform_threads: 161,
        fused_tform_smem: 8000,
    };

    fn run(kernel: Kernel, p: &Problem, sizes: &PrefillSizes, o: &Options) -> Plan {
        plan(kernel, p, sizes, o, 132, 0x1000, None).expect("a CUDA kernel")
    }

    #[test]
    fn the_size_table_reads_in_prefill_sizes_order() {
        let t = [
            1000, 2000, 37888, 3000, 128, 4000, 64, 5000, 256, 6000, 160, 7000, 161, 8000,
        ];
        assert_eq!(PrefillSizes::from_table(t), GDN);
        assert_eq!(GDN.largest_smem(), 8000);
        for name in [
            "gdn_prefill_fused_tform",
            "gdn_prefill_intra_tform_overlap",
            "gdn_prefill_state_tform_wgmma",
            "kda_prefill_state_wgmma",
            "kda_prefill_state64",
            "kda_prefill_state32",
        ] {
            assert!(GDN.has_entry(name), "{name}");
        }
        let decode = PrefillSizes::default();
        assert!(
            decode.has_entry("kda_decode_persistent") && decode.has_entry("kda_prefill_state32")
        );
        for name in [
            "gdn_prefill_fused_tform",
            "kda_prefill_state_wgmma",
            "kda_prefill_state64",
        ] {
            assert!(!decode.has_entry(name), "{name}");
        }
        let no_tform = PrefillSizes {
            tform_smem: 0,
            ..GDN
        };
        assert!(!no_tform.has_entry("gdn_prefill_intra_tform"));
        assert!(!no_tform.has_entry("gdn_prefill_state_tform_wgmma"));
        assert!(no_tform.has_entry("gdn_prefill_fused_tform"));
        assert!(no_tform.has_entry("gdn_prefill_state_wgmma"));
    }

    /// The production launches of the benchmark anchors (132 SMs).
    #[test]
    fn the_anchors_launch_what_production_runs() {
        let prod = Options::default();
        // chunked gdn 16/32 256x64 with a dense f32 final state: the fused T-form
        let mut p = prefill(256, 256 * 64, 16, 32);
        p.final_state = FinalState::Dense;
        let pl = run(Kernel::Chunked, &p, &GDN, &prod);
        assert!(pl.tables && pl.state.is_none() && pl.overlap.is_none());
        assert_eq!(
            pl.main,
            Launch::plain("gdn_prefill_fused_tform", (32, 256, 1), 256, 8000)
        );
        // small-bh gdn 16/32 16x1024: the T-form pair, heads grouped, dependent launch
        let p = prefill(16, 16 * 1024, 16, 32);
        let pl = run(Kernel::SmallBh, &p, &GDN, &prod);
        let rows = (16 * 1024 / 64 + 16 - 1) as u32; // ceil(T / 64) + N - 1
        assert_eq!(pl.overlap, None);
        assert_eq!(
            pl.main,
            Launch::plain("gdn_prefill_intra_tform", (rows, 16, 1), 256, 3000)
        );
        assert_eq!(
            pl.state,
            Some(Launch {
                entry: "gdn_prefill_state_tform_wgmma",
                grid: (2, 32, 16),
                threads: 161,
                smem: 7000,
                maps: Some(TensorMaps::Tform),
                dependent: true,
            })
        );
        // gdn 16/32 1x8192: the overlapped pair
        let p = prefill(1, 8192, 16, 32);
        let pl = run(Kernel::SmallBh, &p, &GDN, &prod);
        let ov = pl.overlap.expect("overlaps");
        assert_eq!((ov.free, ov.grid), (64, 264));
        assert_eq!(
            pl.main,
            Launch::plain("gdn_prefill_intra_tform_overlap", (264, 1, 1), 256, 3016)
        );
        let state = pl.state.expect("a state pass");
        assert_eq!((state.grid, state.dependent), ((2, 32, 1), true));
        // kda 32/32 1x8192: the W/U intra kernel and the wgmma pass, in stream order
        let k = Problem::new(Op::Kda, Mode::Prefill, 1, 8192, 32, 32, 128, 128);
        let kda = PrefillSizes {
            tform_smem: 0,
            tform_threads: 0,
            fused_tform_smem: 0,
            ..GDN
        };
        let pl = run(Kernel::SmallBh, &k, &kda, &prod);
        assert_eq!(
            pl.main,
            Launch::plain("kda_prefill_intra", (128, 32, 1), 256, 3000)
        );
        assert_eq!(
            pl.state,
            Some(Launch {
                entry: "kda_prefill_state_wgmma",
                grid: (2, 32, 1),
                threads: 160,
                smem: 6000,
                maps: Some(TensorMaps::StateWgmma),
                dependent: false,
            })
        );
        // decode gdn 16/32 256x1: one block per item, 4 an SM; no tables without checkpoints
        let d = Problem::new(Op::Gdn, Mode::Decode, 256, 256, 16, 32, 128, 128);
        let pl = run(Kernel::Recurrent, &d, &PrefillSizes::default(), &prod);
        assert!(!pl.tables && pl.state.is_none());
        assert_eq!(
            pl.main,
            Launch::plain("gdn_decode_block4", (32768, 1, 1), 160, 0)
        );
    }

    #[test]
    fn options_force_what_the_rules_would_not_pick() {
        let p = prefill(16, 16 * 1024, 16, 32);
        let flags_off = Options {
            flags: Flags {
                group_heads: false,
                dependent_launch: false,
                deferred_wait: true,
            },
            ..Options::default()
        };
        let pl = run(Kernel::SmallBh, &p, &GDN, &flags_off);
        assert_eq!(pl.main.grid, (271, 32, 1), "a CTA per value head");
        assert_eq!(pl.state.map(|s| s.dependent), Some(false));
        let no_group = prefill(16, 16 * 1024, 32, 32);
        let pl = run(Kernel::SmallBh, &no_group, &GDN, &Options::default());
        assert_eq!(
            pl.main.grid,
            (271, 32, 1),
            "no GVA group: a CTA per value head"
        );
        // no token: no dependent launch (no CTA would wait)
        let none = prefill(16, 0, 16, 32);
        let pl = run(Kernel::SmallBh, &none, &GDN, &Options::default());
        assert_eq!(pl.state.map(|s| s.dependent), Some(false));
        // a forced mma.sync tile, and its fallback where V < 64 has no 64-column pass
        let forced = |bv| Options {
            state_pass: Some(StatePass::MmaSync(bv)),
            ..Options::default()
        };
        let pl = run(Kernel::SmallBh, &p, &GDN, &forced(64));
        assert_eq!(pl.main.entry, "gdn_prefill_intra");
        assert_eq!(
            pl.state,
            Some(Launch::plain("gdn_prefill_state64", (2, 32, 16), 256, 5000))
        );
        let v32 = PrefillSizes {
            state64_smem: 0,
            state64_threads: 0,
            ..GDN
        };
        let pl = run(Kernel::SmallBh, &p, &v32, &forced(64));
        assert_eq!(
            pl.state,
            Some(Launch::plain("gdn_prefill_state32", (4, 32, 16), 128, 2000))
        );
        let pl = run(Kernel::SmallBh, &p, &GDN, &forced(16));
        assert_eq!(
            pl.state,
            Some(Launch::plain("gdn_prefill_state16", (8, 32, 16), 64, 4000))
        );
        // the classic fused kernel
        let mut c = prefill(256, 256 * 64, 16, 32);
        c.final_state = FinalState::Dense;
        let classic = Options {
            fused_classic: true,
            ..Options::default()
        };
        let pl = run(Kernel::Chunked, &c, &GDN, &classic);
        assert_eq!(
            pl.main,
            Launch::plain("gdn_prefill_fused", (32, 256, 1), 256, 1000)
        );
        // a forced decode form
        let d = Problem::new(Op::Kda, Mode::Decode, 256, 256, 16, 32, 128, 128);
        let persistent = Options {
            decode_form: Some(DecodeForm::Persistent),
            ..Options::default()
        };
        let pl = run(Kernel::Recurrent, &d, &PrefillSizes::default(), &persistent);
        assert_eq!(pl.main.entry, "kda_decode_persistent");
        assert_eq!(pl.main.grid, (528, 1, 1));
        // the overlap off: the plain pair
        let off = Options {
            overlap: OverlapSetting::Off,
            ..Options::default()
        };
        let pl = run(Kernel::SmallBh, &prefill(1, 8192, 16, 32), &GDN, &off);
        assert_eq!(pl.overlap, None);
        assert_eq!(pl.main.entry, "gdn_prefill_intra_tform");
    }

    /// The fused T-form keeps the running state in the final-state row between chunks: only a
    /// dense f32 final state has one for every sequence (a pool row may be -1), and only gdn
    /// modules with K, V >= 64 have it.
    #[test]
    fn the_fused_t_form_needs_a_dense_f32_final_state() {
        let prod = Options::default();
        let entry =
            |p: &Problem, sizes: &PrefillSizes| run(Kernel::Chunked, p, sizes, &prod).main.entry;
        let mut p = prefill(4, 4096, 16, 32);
        p.final_state = FinalState::Dense;
        assert_eq!(entry(&p, &GDN), "gdn_prefill_fused_tform");
        p.initial = InitialState::Dense;
        p.qkv_dtype = DType::F32;
        assert_eq!(
            entry(&p, &GDN),
            "gdn_prefill_fused_tform",
            "any input dtype, any initial state"
        );
        let mut q = p.clone();
        q.state_out_dtype = DType::BF16;
        assert_eq!(entry(&q, &GDN), "gdn_prefill_fused");
        for f in [FinalState::None, FinalState::InPlace] {
            let mut q = p.clone();
            q.final_state = f;
            assert_eq!(entry(&q, &GDN), "gdn_prefill_fused", "{f:?}");
        }
        let mut q = p.clone();
        q.op = Op::Kda;
        assert_eq!(entry(&q, &GDN), "kda_prefill_fused");
        let small = PrefillSizes {
            fused_tform_smem: 0,
            ..GDN
        };
        assert_eq!(entry(&p, &small), "gdn_prefill_fused");
    }

    #[test]
    fn the_grid_limits_follow_each_kernels_grid() {
        let decode = |seqs, hv| Problem::new(Op::Gdn, Mode::Decode, seqs, seqs, 1, hv, 128, 128);
        // a 3-D prefill grid caps N and HV at 65535; the recurrence's 1-D grid does not
        let wide = prefill(70_000, 70_000, 1, 1);
        let why = grid_limit(Kernel::Chunked, &wide).unwrap_or_default();
        assert!(why.contains("N = 70000"), "{why}");
        assert!(grid_limit(Kernel::SmallBh, &prefill(1, 8192, 1, 65535)).is_none());
        assert!(grid_limit(Kernel::Recurrent, &decode(70_000, 32)).is_none());
        // 4 x 32768 x 16384 = 2^31 items: one past i32::MAX
        let why = grid_limit(Kernel::Recurrent, &decode(16384, 32768)).unwrap_or_default();
        assert!(why.contains("2147483648 work items"), "{why}");
        assert!(grid_limit(Kernel::Recurrent, &decode(16383, 32768)).is_none());
        let e = check_supported(Kernel::Recurrent, &decode(16384, 32768));
        assert!(e.is_err());
    }

    #[test]
    fn each_kernel_runs_its_mode_and_head_dims() {
        let p = prefill(1, 64, 1, 1);
        assert!(check_supported(Kernel::Chunked, &p).is_ok());
        assert!(check_supported(Kernel::Recurrent, &p).is_err());
        let mut odd = p.clone();
        odd.k = 48;
        assert!(check_supported(Kernel::SmallBh, &odd).is_err());
        let mut ck = p.clone();
        ck.checkpoint_every = Some(32);
        assert!(check_supported(Kernel::Chunked, &ck).is_err());
        ck.checkpoint_every = Some(128);
        assert!(check_supported(Kernel::Chunked, &ck).is_ok());
    }

    #[test]
    fn the_compiled_head_dims_are_the_rows_head_dims() {
        use crate::kernels::HEAD_DIMS;
        use deltarule_core::{select::find_rule, BackendKind};
        for (kernel, mode) in [
            (Kernel::Chunked, Mode::Prefill),
            (Kernel::SmallBh, Mode::Prefill),
            (Kernel::Recurrent, Mode::Decode),
        ] {
            for op in [Op::Gdn, Op::Kda] {
                let Some(row) = find_rule(BackendKind::Cuda, kernel, op, mode) else {
                    panic!("no CUDA row for {kernel} {op:?} {mode:?}");
                };
                for d in 1..=256 {
                    assert_eq!(row.head_k.accepts(d), HEAD_DIMS.contains(&d), "K = {d}");
                    assert_eq!(row.head_v.accepts(d), HEAD_DIMS.contains(&d), "V = {d}");
                }
            }
        }
    }
}
