//! The small-bh pair's launch decisions: which state pass follows the intra kernel, its V tile,
//! and whether the T-form pair overlaps.

use super::{by_op, Launch, PrefillSizes, TensorMaps};
use crate::launch::table_rows;
use crate::options::Options;
use deltarule_core::variants::tform_applies;
use deltarule_core::Problem;

/// The small-bh state pass that follows the intra kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatePass {
    /// The register-state pass on `mma.sync` with a V tile of 16, 32 or 64 columns (a state and
    /// an output warp per 16 V columns, bulk copies two chunks ahead): `{op}_prefill_state16`,
    /// `_state32`, `_state64`.
    MmaSync(usize),
    /// The wgmma pass (sm_90a, K in {64, 128}, V >= 64; 64-column tiles, one warpgroup) over
    /// the intra kernel's W, q̃, k̃, U block: `{op}_prefill_state_wgmma`.
    Wgmma,
    /// The T-form wgmma pass (gdn with 16-bit inputs): W·S and U built in the pass from the
    /// inputs' k, v rows and the block's T_w, T_u, which `gdn_prefill_intra_tform` writes
    /// (~37 KB a block instead of ~92): `gdn_prefill_state_tform_wgmma`.
    TformWgmma,
}

impl StatePass {
    /// A value of `DELTARULE_CUDA_STATE_BV`: `16`, `32`, `64` (an mma.sync tile), `wg` (the
    /// wgmma pass) or `wgt` (the T-form wgmma pass).
    pub fn parse(s: &str) -> Option<StatePass> {
        match s.trim() {
            "wg" => Some(StatePass::Wgmma),
            "wgt" => Some(StatePass::TformWgmma),
            t => t
                .parse()
                .ok()
                .filter(|bv| matches!(*bv, 16 | 32 | 64))
                .map(StatePass::MmaSync),
        }
    }
}

/// Which wgmma state passes a launch can use: the module has the wgmma pass (`wgmma`), and the
/// T-form pass with an output it can store (`tform`, see [`o_fits_tma`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaPasses {
    pub wgmma: bool,
    pub tform: bool,
}

impl WgmmaPasses {
    /// What a module with `sizes` offers a problem `p` whose o lies at `o`.
    pub fn of(sizes: &PrefillSizes, p: &Problem, o: u64) -> WgmmaPasses {
        WgmmaPasses {
            wgmma: sizes.wgmma_smem > 0,
            tform: sizes.tform_smem > 0 && o_fits_tma(p, o),
        }
    }
}

/// The V tile of the register-state pass (one CTA per SM: 230 KB of shared memory): 16 columns
/// when the 32-column tiles of all (sequence, value head) pairs fill at most half the SMs; 64
/// when the 32-column tiles would need a second wave (V >= 64); else 32 (a forced width
/// overrides it, see [`state_pass`]). With more than one wave the 64-column tiles are faster on
/// every shape measured on the H200 (gdn 16/32 16x1024 0.943 -> 0.847 ms, 256x64 1.930 ->
/// 1.428, kda 32/32 64x256 1.468 -> 1.293), also where they need two waves themselves.
pub fn state_tile(p: &Problem, sms: usize) -> usize {
    let pairs = p.seqs * p.hv;
    if pairs * (p.v / 32) * 2 <= sms {
        16
    } else if p.v >= 64 && pairs * (p.v / 32) > sms {
        64
    } else {
        32
    }
}

/// Which state pass runs: a forced one where it exists; else the wgmma pass where the module has
/// it unless [`state_tile`] picks 16-column tiles (few pairs: the wgmma pass's 64-column tiles
/// would leave most SMs idle; H200: gdn 4/8 1x8192 0.237 ms against 0.213 with the 16-column
/// mma.sync pass); else the mma.sync tile of [`state_tile`]. (H200, wgmma against the mma.sync
/// pass: gdn 16/32 1x8192 0.427 / 0.430 ms, 16x1024 0.798 / 0.907 (32 columns), kda 64/64
/// 1x8192 1.117 / 1.210.)
///
/// Where the wgmma pass is picked, the T-form pass replaces it when it applies
/// (`deltarule_core::variants::tform_applies`). Where the 16-column tiles are picked, the
/// T-form pair replaces them too when it may overlap (`overlap`: the setting is not off;
/// [`overlap_plan`] then always applies, its state pass having at most a quarter of the SMs'
/// worth of CTAs): its few state CTAs run on SMs freed at once while the intra work runs on
/// the rest (H200: gdn 4/8 1x8192 0.200 ms against 0.213 with the 16-column pass, 4x2048 0.111
/// against 0.155, 1x512 0.035 against 0.034).
pub fn state_pass(
    p: &Problem,
    sms: usize,
    forced: Option<StatePass>,
    have: WgmmaPasses,
    overlap: bool,
) -> StatePass {
    let tform = have.tform && tform_applies(p);
    match forced {
        Some(StatePass::MmaSync(bv)) => StatePass::MmaSync(bv),
        Some(StatePass::Wgmma) if have.wgmma => StatePass::Wgmma,
        Some(StatePass::TformWgmma) if tform => StatePass::TformWgmma,
        _ => match state_tile(p, sms) {
            16 if tform && overlap => StatePass::TformWgmma,
            16 => StatePass::MmaSync(16),
            _ if tform => StatePass::TformWgmma,
            _ if have.wgmma => StatePass::Wgmma,
            bv => StatePass::MmaSync(bv),
        },
    }
}

/// The T-form pass stores a 16-bit o by TMA, whose global address must be 16-byte aligned (q, k
/// and v always are, the launch checks them); an o that is not (a caller's view at an odd
/// offset) keeps the other passes. f32 o is stored per thread.
pub fn o_fits_tma(p: &Problem, o: u64) -> bool {
    p.out_dtype.size() != 2 || o.is_multiple_of(16)
}

/// How the T-form pair may overlap ([`overlap_plan`]; `DELTARULE_CUDA_OVERLAP`).
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum OverlapSetting {
    /// Where [`overlap_plan`]'s rule says so, at its freeing point.
    #[default]
    Auto,
    /// Never.
    Off,
    /// The share of the intra work (percent) taken before SMs are freed for the state pass.
    Tau(u32),
}

impl OverlapSetting {
    /// `off` (or `0`, `no`), a percentage 1-100, anything else: automatic.
    pub fn parse(s: &str) -> Option<OverlapSetting> {
        match s.trim() {
            "off" | "no" | "0" => Some(OverlapSetting::Off),
            t => t
                .parse::<u32>()
                .ok()
                .filter(|v| (1..=100).contains(v))
                .map(OverlapSetting::Tau),
        }
    }
}

/// The overlapped pair's launch: `free` state CTAs (and SMs freed for them), `tau` intra items
/// taken before the freeing, `grid` persistent intra CTAs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub free: i32,
    pub tau: i32,
    pub grid: u32,
}

/// Whether and how the T-form pair overlaps (kernels/prefill_smallbh.cuh, the overlapped T-form
/// pair): only where its state pass has at most half the SMs' worth of CTAs (one per 64 V
/// columns, value head and sequence: gdn 16/32 1x8192 has 64 on 132 SMs), which otherwise idle
/// the rest of the GPU through the serial chain. The state CTAs should start when the intra
/// work left for the other SMs lasts as long as the chain: with per-chunk times `cs` (state
/// pass, one CTA) and `ci` (intra, per item and SM), chain S = chunks x cs and intra I = items x
/// ci / SMs, the freeing point is the share `1 - (S / I) (SMs - free) / SMs` of the items.
/// Timelines on an H200 (`DELTARULE_CUDA_OVERLAP_TRACE=1`, gdn 16/32): S / I = 183 / 184 us at
/// 1x8192 and 683 / 688 at 1x32768, i.e. cs / ci = 0.24; the best measured shares are 50-55 %,
/// this rule gives 49 %.
pub fn overlap_plan(
    p: &Problem,
    sms: usize,
    pass: StatePass,
    set: OverlapSetting,
) -> Option<Overlap> {
    if pass != StatePass::TformWgmma || set == OverlapSetting::Off || sms < 4 {
        return None;
    }
    let free = p.v / 64 * p.hv * p.seqs;
    let items = table_rows(p) * p.hv;
    if free == 0 || free > sms / 2 || items == 0 || items > i32::MAX as usize {
        return None;
    }
    let share = match set {
        OverlapSetting::Tau(t) => f64::from(t) / 100.0,
        _ => {
            let r = 0.24 * sms as f64 / (p.hv * p.seqs) as f64; // S / I
            (1.0 - r * (sms - free) as f64 / sms as f64).clamp(0.0, 1.0)
        }
    };
    Some(Overlap {
        free: free as i32,
        tau: (share * items as f64).round() as i32,
        grid: (2 * sms).min(items) as u32,
    })
}

/// The segmented T-form pair ([`segment_plan`]; `DELTARULE_CUDA_SEGMENTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SegmentSetting {
    /// Where [`segment_plan`]'s cost model says so.
    #[default]
    Auto,
    /// Never.
    Off,
    /// Always where the pair applies, with segments of this many chunks.
    Chunks(usize),
}

impl SegmentSetting {
    /// `off` (or `0`, `no`), a segment length in chunks from 1 to 65536.
    pub fn parse(s: &str) -> Option<SegmentSetting> {
        match s.trim() {
            "off" | "no" | "0" => Some(SegmentSetting::Off),
            t => t
                .parse::<usize>()
                .ok()
                .filter(|v| (1..=65536).contains(v))
                .map(SegmentSetting::Chunks),
        }
    }
}

/// A segmented call: every sequence cut into segments of `chunks` chunks (the last one shorter),
/// `n_seg` = N + T / (64 chunks) segments at most (the static bound the workspace and grids use).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentPlan {
    pub chunks: usize,
    pub n_seg: usize,
}

impl SegmentPlan {
    /// Segments of `chunks` chunks for `p` (`chunks` > 0).
    pub fn new(p: &Problem, chunks: usize) -> SegmentPlan {
        SegmentPlan {
            chunks,
            n_seg: p.seqs + p.tokens / (chunks * p.chunk),
        }
    }
    /// Tokens a segment.
    pub fn tokens(&self, p: &Problem) -> usize {
        self.chunks * p.chunk
    }
}

/// The cost model's constants (us, fitted on an H100 to the forced segment lengths 8 to 128 of
/// gdn 1/2, 2/4, 4/8 and 8/16, and the staged combine's step, docs/cuda-prefill.md): one chunk
/// of the overlapped pair's chain (one CTA, one SM), one chunk of a segment pass, one intra item
/// per SM, a pass's launch, prologue and epilogue, the combine per segment (serial along a
/// sequence), and the segmented call's fixed launches (setup, tables, finish).
const CS: f64 = 1.5;
const CSEG: f64 = 1.25;
const CI: f64 = 6.25;
const PASS: f64 = 12.0;
const COMBINE: f64 = 4.0;
const FIXED: f64 = 15.0;

/// Where the T-form pair's state chain leaves the GPU idle, the exact segmented pair
/// (kernels/prefill_segments.cuh, docs/segments.md) cuts each sequence into segments that run in
/// parallel: pass 1 (each segment's final state from zero and its transition), an f32 combine
/// along the sequence, pass 3 (outputs from the true incoming states). It applies to the T-form
/// pair (`tform`) with K = V (the transition pass runs the module with V = K columns) and no
/// checkpoints. The cost model, with the chain of the longest sequence (`max_seq`, the caller's
/// hint; without it a balanced batch's, C = chunks / N), intra work
/// I = items x CI / SMs and state CTAs of 64 V columns: unsegmented max(C x CS x waves, I)
/// (waves of every pair's CTAs for a balanced batch, one for a hinted long sequence, whose
/// chain the short ones run beside); segmented with L-chunk segments, C / L of them on the
/// longest sequence, I + 3 (waves_L x L x CSEG + PASS) + (C / L) x COMBINE + FIXED: the three
/// passes run one after the other, so the chain is 3 L chunks, and the combine is serial over a
/// sequence's segments. The best L (a power of two from 4 chunks, below C) is taken when it
/// saves at least 15 %. A forced length applies wherever the pair does. More
/// than 65535 segments (the state passes' grid z) are never planned.
pub fn segment_plan(
    p: &Problem,
    sms: usize,
    tform: bool,
    set: SegmentSetting,
    max_seq: Option<usize>,
) -> Option<SegmentPlan> {
    if !tform
        || set == SegmentSetting::Off
        || p.k != p.v
        || p.checkpoint_every.is_some()
        || p.tokens == 0
        || p.v < 64
        || sms == 0
    {
        return None;
    }
    // (the state passes' grid z is the segment count: at most 65535)
    let fits = |s: SegmentPlan| (s.n_seg <= 65535).then_some(s);
    if let SegmentSetting::Chunks(c) = set {
        return fits(SegmentPlan::new(p, c));
    }
    let chunks = p.tokens.div_ceil(p.chunk);
    let c = match max_seq {
        Some(m) => m.div_ceil(p.chunk).clamp(1, chunks.max(1)),
        None => chunks.div_ceil(p.seqs.max(1)),
    };
    let tiles = p.v / 64;
    let smsf = sms as f64;
    let waves = |ctas: usize| ctas.div_ceil(sms) as f64;
    let intra = (chunks * p.hv) as f64 * CI / smsf;
    let chain_waves = if max_seq.is_some() {
        1.0
    } else {
        waves(tiles * p.hv * p.seqs)
    };
    let plain = (c as f64 * CS * chain_waves).max(intra);
    let mut best: Option<(f64, usize)> = None;
    let mut l = 4;
    while l < c {
        // (segments: the longest sequence's, at most the static bound over all of them)
        let segs = c.div_ceil(l);
        let all = (p.seqs * segs).min(p.seqs + chunks / l);
        let pass = waves(tiles * p.hv * all) * l as f64 * CSEG + PASS;
        let t = intra + 3.0 * pass + segs as f64 * COMBINE + FIXED;
        if best.is_none_or(|(b, _)| t < b) {
            best = Some((t, l));
        }
        l *= 2;
    }
    let (t, l) = best?;
    if t < 0.85 * plain {
        fits(SegmentPlan::new(p, l))
    } else {
        None
    }
}

/// The small-bh pair's launches on a module with `sizes`: the intra kernel (the W/U form, the
/// T-form, or the T-form's persistent overlapped form), then the state pass, the overlap when the
/// pair overlaps, and the segments when it is segmented (the intra and state launches then run
/// over the segments: [`segmented`]). `o`: the output's address (the T-form pass's TMA store);
/// `max_seq`: the longest sequence's tokens where the caller knows them ([`segment_plan`]).
pub fn small_bh_launches(
    p: &Problem,
    sizes: &PrefillSizes,
    options: &Options,
    sms: usize,
    o: u64,
    max_seq: Option<usize>,
) -> (Launch, Launch, Option<Overlap>, Option<SegmentPlan>) {
    let have = WgmmaPasses::of(sizes, p, o);
    let tform = have.tform && tform_applies(p) && options.state_pass.is_none();
    if let Some(seg) = segment_plan(p, sms, tform, options.segments, max_seq) {
        let ps = segmented(p, &seg);
        let o2 = Options {
            state_pass: Some(StatePass::TformWgmma),
            overlap: OverlapSetting::Off,
            segments: SegmentSetting::Off,
            ..*options
        };
        // (the passes are plain launches: a segment pass 1 skips waits for nothing, so a
        // dependent launch could complete before the intra grid)
        let (intra, state, _, _) = small_bh_launches(&ps, sizes, &o2, sms, o, None);
        let state = Launch {
            dependent: false,
            ..state
        };
        return (intra, state, None, Some(seg));
    }
    let pass = state_pass(
        p,
        sms,
        options.state_pass,
        have,
        options.overlap != OverlapSetting::Off,
    );
    let overlap = overlap_plan(p, sms, pass, options.overlap);
    let (n, hv, rows) = (p.seqs as u32, p.hv as u32, table_rows(p) as u32);
    let intra = match (pass, overlap) {
        // (the persistent kernel keeps its work item after the arena: 16 bytes more)
        (_, Some(o)) => Launch::plain(
            "gdn_prefill_intra_tform_overlap",
            (o.grid, 1, 1),
            256,
            sizes.intra_smem + 16,
        ),
        (StatePass::TformWgmma, None) => {
            let heads = if options.flags.group_heads {
                p.group()
            } else {
                1
            };
            Launch::plain(
                "gdn_prefill_intra_tform",
                (rows, hv / heads as u32, 1),
                256,
                sizes.intra_smem,
            )
        }
        _ => Launch::plain(
            by_op(p.op, "gdn_prefill_intra", "kda_prefill_intra"),
            (rows, hv, 1),
            256,
            sizes.intra_smem,
        ),
    };
    // (the dependent launch without the overlap: the state CTAs with chunks wait for the whole
    // intra grid, so this grid completes after it and the next work in the stream cannot
    // overtake it; with no token at all no CTA would wait, hence tokens > 0)
    let dependent = overlap.is_some()
        || (pass == StatePass::TformWgmma && options.flags.dependent_launch && p.tokens > 0);
    let wgmma_grid = ((p.v / 64) as u32, hv, n);
    let state = match pass {
        StatePass::Wgmma => Launch {
            entry: by_op(p.op, "gdn_prefill_state_wgmma", "kda_prefill_state_wgmma"),
            grid: wgmma_grid,
            threads: sizes.wgmma_threads,
            smem: sizes.wgmma_smem,
            maps: Some(TensorMaps::StateWgmma),
            dependent,
        },
        StatePass::TformWgmma => Launch {
            entry: "gdn_prefill_state_tform_wgmma",
            grid: wgmma_grid,
            threads: sizes.tform_threads,
            smem: sizes.tform_smem,
            maps: Some(TensorMaps::Tform),
            dependent,
        },
        // (one warp pair per 16 V columns; the 64-column pass exists for V >= 64)
        StatePass::MmaSync(bv) => {
            let (bv, entry, threads, smem) = match bv {
                16 => (
                    16,
                    by_op(p.op, "gdn_prefill_state16", "kda_prefill_state16"),
                    sizes.state16_threads,
                    sizes.state16_smem,
                ),
                64 if sizes.state64_threads > 0 => (
                    64,
                    by_op(p.op, "gdn_prefill_state64", "kda_prefill_state64"),
                    sizes.state64_threads,
                    sizes.state64_smem,
                ),
                _ => (
                    32,
                    by_op(p.op, "gdn_prefill_state32", "kda_prefill_state32"),
                    sizes.state32_threads,
                    sizes.state32_smem,
                ),
            };
            Launch::plain(entry, ((p.v / bv) as u32, hv, n), threads, smem)
        }
    };
    (intra, state, overlap, None)
}

/// The problems of a segmented call's three state passes over the segments
/// ([`segmented`]), every state f32 in the `kv` layout in the workspace: the final states from
/// zero (F), the transitions from the identity, a one-row pool with every index 0, over v = 0
/// (M: the state's V columns are the identity's K columns, so K = V), and the pass from the
/// incoming states (a dense initial state) with the segments' final states.
pub fn segment_passes(p: &Problem, seg: &SegmentPlan) -> [Problem; 3] {
    use deltarule_core::{DType, FinalState, InitialState, StateLayout};
    let ps = segmented(p, seg);
    let f32kv = |initial: InitialState| Problem {
        initial,
        state_in_dtype: DType::F32,
        index_dtype: DType::I32,
        final_state: FinalState::Dense,
        state_out_dtype: DType::F32,
        layout: StateLayout::Kv,
        ..ps.clone()
    };
    [
        f32kv(InitialState::None),
        f32kv(InitialState::Pool { rows: 1 }),
        f32kv(InitialState::Dense),
    ]
}

/// The problem the intra kernel and the state passes of a segmented call see: `n_seg` sequences
/// (the segments, padding ones empty) with i32 offsets, no checkpoints.
pub fn segmented(p: &Problem, seg: &SegmentPlan) -> Problem {
    Problem {
        seqs: seg.n_seg,
        offsets_dtype: deltarule_core::DType::I32,
        checkpoint_every: None,
        ..p.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{
        o_fits_tma, overlap_plan, segment_plan, segmented, state_pass, state_tile, Overlap,
        OverlapSetting, SegmentPlan, SegmentSetting, StatePass, WgmmaPasses,
    };
    use deltarule_core::{DType, Mode, Op, Problem};

    fn prefill(seqs: usize, h: usize, hv: usize) -> Problem {
        Problem::new(Op::Gdn, Mode::Prefill, seqs, 8192, h, hv, 128, 128)
    }

    const NONE: WgmmaPasses = WgmmaPasses {
        wgmma: false,
        tform: false,
    };
    const WG: WgmmaPasses = WgmmaPasses {
        wgmma: true,
        tform: false,
    };
    const BOTH: WgmmaPasses = WgmmaPasses {
        wgmma: true,
        tform: true,
    };
    const MMA: fn(usize) -> StatePass = StatePass::MmaSync;

    #[test]
    fn narrow_state_tiles_only_when_the_wide_ones_leave_most_sms_idle() {
        // gdn 4/8, 1 x 8192 on 132 SMs: 8 pairs x 4 tiles = 32 CTAs -> 16-column tiles (64 CTAs)
        assert_eq!(state_tile(&prefill(1, 4, 8), 132), 16);
        // 16/32: 128 CTAs of 32 columns already fill the SMs
        assert_eq!(state_tile(&prefill(1, 16, 32), 132), 32);
        // 66 CTAs fill exactly half of 132: still narrow; 67 would not be
        let kda = |seqs, v| Problem::new(Op::Kda, Mode::Prefill, seqs, 8192, 1, 1, 128, v);
        assert_eq!(state_tile(&kda(33, 64), 132), 16);
        assert_eq!(state_tile(&kda(67, 32), 132), 32);
        // kda 64/64: 256 CTAs of 32 columns (two waves) -> 128 of 64 columns (one wave)
        let kda64 = Problem::new(Op::Kda, Mode::Prefill, 1, 8192, 64, 64, 128, 128);
        assert_eq!(state_tile(&kda64, 132), 64);
        // ... and also when the 64-column tiles need two waves too
        assert_eq!(state_tile(&kda(200, 128), 132), 64);
        // V = 32 has no 64-column variant
        assert_eq!(state_tile(&kda(200, 32), 132), 32);
        // a forced width wins either way
        let pass = |p: &Problem, f| state_pass(p, 132, Some(f), NONE, true);
        assert_eq!(pass(&prefill(1, 16, 32), MMA(16)), MMA(16));
        assert_eq!(pass(&prefill(1, 4, 8), MMA(32)), MMA(32));
        assert_eq!(pass(&prefill(1, 16, 32), MMA(64)), MMA(64));
    }

    #[test]
    fn the_pair_overlaps_only_with_the_t_form_and_few_state_ctas() {
        let auto = OverlapSetting::Auto;
        let tform = StatePass::TformWgmma;
        // gdn 16/32 1x8192: 64 state CTAs on 132 SMs, 128 rows x 32 heads; S / I = 0.24 x 132 /
        // 32 = 0.99, freeing point 1 - 0.99 x 68 / 132 = 0.49 of the 4096 items
        let p = prefill(1, 16, 32);
        let o = overlap_plan(&p, 132, tform, auto).expect("overlaps");
        assert_eq!((o.free, o.grid), (64, 264));
        assert!((1950..2050).contains(&o.tau), "{o:?}");
        // only the T-form pass
        assert_eq!(overlap_plan(&p, 132, StatePass::Wgmma, auto), None);
        assert_eq!(overlap_plan(&p, 132, MMA(32), auto), None);
        // off, or a forced share
        assert_eq!(overlap_plan(&p, 132, tform, OverlapSetting::Off), None);
        let forced = overlap_plan(&p, 132, tform, OverlapSetting::Tau(50));
        assert_eq!(
            forced,
            Some(Overlap {
                free: 64,
                tau: 2048,
                grid: 264
            })
        );
        // more state CTAs than half the SMs: the plain pair (16x1024: 1024 CTAs)
        assert_eq!(overlap_plan(&prefill(16, 16, 32), 132, tform, auto), None);
        assert_eq!(overlap_plan(&p, 100, tform, auto), None);
        // few heads: the state chain is long against the intra work, the SMs are freed at once
        let few = overlap_plan(&prefill(1, 4, 8), 132, tform, auto).expect("overlaps");
        assert_eq!((few.free, few.tau), (16, 0));
        // the setting's text
        assert_eq!(OverlapSetting::parse("off"), Some(OverlapSetting::Off));
        assert_eq!(OverlapSetting::parse("0"), Some(OverlapSetting::Off));
        assert_eq!(OverlapSetting::parse("35"), Some(OverlapSetting::Tau(35)));
        assert_eq!(OverlapSetting::parse("135"), None);
        assert_eq!(OverlapSetting::parse("on"), None);
    }

    #[test]
    fn the_wgmma_state_pass_wherever_the_module_has_it_unless_a_tile_is_forced() {
        let p = prefill(1, 16, 32);
        assert_eq!(state_pass(&p, 132, None, WG, true), StatePass::Wgmma);
        assert_eq!(state_pass(&p, 132, None, NONE, true), MMA(32));
        // few pairs (gdn 4/8): the 16-column mma.sync tiles, even where the wgmma pass exists,
        // unless the T-form pair may overlap
        let few = prefill(1, 4, 8);
        assert_eq!(state_pass(&few, 132, None, WG, true), MMA(16));
        assert_eq!(state_pass(&few, 132, None, BOTH, false), MMA(16));
        assert_eq!(
            state_pass(&few, 132, None, BOTH, true),
            StatePass::TformWgmma
        );
        let wg = Some(StatePass::Wgmma);
        assert_eq!(state_pass(&few, 132, wg, WG, true), StatePass::Wgmma);
        assert_eq!(state_pass(&p, 132, Some(MMA(16)), BOTH, true), MMA(16));
        // a forced wgmma pass where the module has none: the automatic mma.sync tile
        assert_eq!(state_pass(&p, 132, wg, NONE, true), MMA(32));
        assert_eq!(StatePass::parse("wg"), wg);
        assert_eq!(StatePass::parse("wgt"), Some(StatePass::TformWgmma));
        assert_eq!(StatePass::parse("64"), Some(MMA(64)));
        assert_eq!(StatePass::parse("48"), None);
    }

    #[test]
    fn the_t_form_replaces_the_wgmma_pass_for_gdn_with_16_bit_inputs() {
        let tform = StatePass::TformWgmma;
        let p = prefill(1, 16, 32);
        assert_eq!(state_pass(&p, 132, None, BOTH, true), tform);
        // forcing the other wgmma pass keeps it (benchmarks compare the two)
        let wg = Some(StatePass::Wgmma);
        assert_eq!(state_pass(&p, 132, wg, BOTH, true), StatePass::Wgmma);
        // f32 inputs cannot be the pass's 16-bit operands: the W/U block pass
        let mut f32in = prefill(1, 16, 32);
        f32in.qkv_dtype = DType::F32;
        assert_eq!(state_pass(&f32in, 132, None, BOTH, true), StatePass::Wgmma);
        let forced = Some(tform);
        assert_eq!(
            state_pass(&f32in, 132, forced, BOTH, true),
            StatePass::Wgmma
        );
        // kda: per-channel decays, no T-form
        let kda = Problem::new(Op::Kda, Mode::Prefill, 1, 8192, 32, 32, 128, 128);
        assert_eq!(state_pass(&kda, 132, None, BOTH, true), StatePass::Wgmma);
        // a module without it
        assert_eq!(state_pass(&p, 132, forced, WG, true), StatePass::Wgmma);
        // a 16-bit o the TMA store cannot address (WgmmaPasses::of folds this in); f32 o is
        // stored per thread
        let mut o16 = prefill(1, 16, 32);
        o16.out_dtype = DType::BF16;
        assert!(o_fits_tma(&o16, 0x1000) && !o_fits_tma(&o16, 0x1002));
        assert!(o_fits_tma(&p, 0x1002));
    }

    #[test]
    fn sequences_are_segmented_only_where_the_chain_idles_the_gpu() {
        let auto = SegmentSetting::Auto;
        // (H100, one call, forced lengths against the unsegmented pair: docs/cuda-prefill.md)
        // gdn 4/8 1x8192: three 16-chunk passes and the combine cost more than the overlapped
        // pair's 128-chunk chain (0.228 against 0.201 ms): not segmented
        let few = prefill(1, 4, 8);
        assert_eq!(segment_plan(&few, 132, true, auto, None), None);
        let g = |n, t, h, hv| Problem::new(Op::Gdn, Mode::Prefill, n, t, h, hv, 128, 128);
        // gdn 4/8 1x32768: 64-chunk segments (0.593 against 0.724 ms); 1x16384: 32 (0.351
        // against 0.375); gdn 1/2 1x16384: 16 (0.231 against 0.369)
        let s = segment_plan(&g(1, 32768, 4, 8), 132, true, auto, None).expect("segmented");
        assert_eq!(
            s,
            SegmentPlan {
                chunks: 64,
                n_seg: 9
            }
        );
        assert_eq!(s.tokens(&few), 4096);
        let s = segment_plan(&g(1, 16384, 4, 8), 132, true, auto, None);
        assert_eq!(s.map(|s| s.chunks), Some(32));
        let s = segment_plan(&g(1, 16384, 1, 2), 132, true, auto, None);
        assert_eq!(s.map(|s| s.chunks), Some(16));
        // gdn 8/16 and 2/4 1x8192: not (8/16 loses at every length, 2/4 gains 10 % at best)
        assert_eq!(
            segment_plan(&g(1, 8192, 8, 16), 132, true, auto, None),
            None
        );
        assert_eq!(segment_plan(&g(1, 8192, 2, 4), 132, true, auto, None), None);
        // gdn 16/32 1x8192, 4x8192, 16x1024: the intra work is as long as the chain, or the
        // GPU is full: never
        let gdn = |n, t| Problem::new(Op::Gdn, Mode::Prefill, n, t, 16, 32, 128, 128);
        for p in [gdn(1, 8192), gdn(4, 32768), gdn(16, 16384), gdn(1, 32768)] {
            assert_eq!(segment_plan(&p, 132, true, auto, None), None, "{p:?}");
        }
        // only the T-form pair with K = V, no checkpoints, tokens, and not off
        assert_eq!(segment_plan(&few, 132, false, auto, None), None);
        let mut kv = few.clone();
        kv.v = 64;
        assert_eq!(segment_plan(&kv, 132, true, auto, None), None);
        let mut ck = few.clone();
        ck.checkpoint_every = Some(128);
        assert_eq!(segment_plan(&ck, 132, true, auto, None), None);
        assert_eq!(
            segment_plan(&few, 132, true, SegmentSetting::Off, None),
            None
        );
        // a forced length applies wherever the pair does, on any shape
        let forced = segment_plan(&gdn(16, 16384), 132, true, SegmentSetting::Chunks(4), None);
        // (16 sequences, 16384 tokens: 16384 / 256 segments + 16, the static bound)
        assert_eq!(
            forced,
            Some(SegmentPlan {
                chunks: 4,
                n_seg: 16 + 64
            })
        );
        assert_eq!(
            segment_plan(&ck, 132, true, SegmentSetting::Chunks(4), None),
            None
        );
        // a mixed batch, one long sequence among short ones (gdn 2/4 1x30000 + 4x500): the
        // balanced chain (100 chunks) hides the long one's (469); the caller's longest-sequence
        // hint shows it: 64-chunk segments (0.427 against 0.658 ms)
        let mixed = |h, hv| Problem::new(Op::Gdn, Mode::Prefill, 5, 32000, h, hv, 128, 128);
        assert_eq!(segment_plan(&mixed(2, 4), 132, true, auto, None), None);
        let s = segment_plan(&mixed(2, 4), 132, true, auto, Some(30000));
        assert_eq!(s.map(|s| s.chunks), Some(64));
        // with 32 value heads the intra work dominates either way
        assert_eq!(
            segment_plan(&mixed(16, 32), 132, true, auto, Some(30000)),
            None
        );
        // past 65535 segments (the grid's z) the pair runs unsegmented
        let huge = Problem::new(Op::Gdn, Mode::Prefill, 1, 1 << 23, 4, 8, 128, 128);
        assert_eq!(
            segment_plan(&huge, 132, true, SegmentSetting::Chunks(1), None),
            None
        );
        assert!(segment_plan(&huge, 132, true, SegmentSetting::Chunks(4), None).is_some());
        // the segments' problem: n_seg sequences, i32 offsets, no checkpoints
        let ps = segmented(
            &ck,
            &SegmentPlan {
                chunks: 4,
                n_seg: 40,
            },
        );
        assert_eq!((ps.seqs, ps.tokens), (40, ck.tokens));
        assert_eq!(ps.offsets_dtype, deltarule_core::DType::I32);
        assert_eq!(ps.checkpoint_every, None);
        // the setting's text
        assert_eq!(SegmentSetting::parse("off"), Some(SegmentSetting::Off));
        assert_eq!(
            SegmentSetting::parse(" 8 "),
            Some(SegmentSetting::Chunks(8))
        );
        assert_eq!(SegmentSetting::parse("65537"), None);
        assert_eq!(SegmentSetting::parse("auto"), None);
    }
}
