//! The segmented T-form pair on a stream (kernels/prefill_segments.cuh; the math is in
//! docs/segments.md and the CPU reference's `segments` module): the segments' metadata, the
//! intra kernel over the segments, the state pass three times around the f32 combine, and the
//! final states to the caller's. Like every launch: no allocation, no host synchronisation.

use crate::device::Loaded;
use crate::dispatch::launch_one;
use crate::launch::{self, DevicePtrs, Params, WorkspaceLayout};
use crate::plan::{self, Launch, Plan, SegmentPlan, TensorMaps};
use crate::tmap::MapArg;
use cudarc::driver::sys;
use deltarule_core::{Error, FinalState, Problem, Result};

/// `struct SegArgs` of kernels/prefill_segments.cuh (the second parameter of its kernels): device
/// addresses of the arrays of [`launch::SegLayout`], the segment length in tokens and the static
/// segment count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SegArgs {
    pub seg_cu: u64,
    pub seg_of: u64,
    pub skip: u64,
    pub zidx: u64,
    pub ident: u64,
    pub zero_v: u64,
    pub fin: u64,
    pub trans: u64,
    pub sin: u64,
    pub seg_tokens: i32,
    pub n_seg: i32,
}

const _: () = assert!(std::mem::size_of::<SegArgs>() == 80);

/// Enqueues a segmented call: `plan`'s `main` and `state` launches run over the segments
/// (`plan::segmented`); `layout` holds the segment arrays; `flags`: `Params::mode`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn enqueue(
    main: &Loaded,
    varlen: &Loaded,
    plan: &Plan,
    seg: &SegmentPlan,
    layout: &WorkspaceLayout,
    p: &Problem,
    t: &DevicePtrs,
    stream: sys::CUstream,
    base: u64,
    flags: i32,
) -> Result<()> {
    let missing = |what: &str| Error::invalid("segmented call", what, "missing from its plan");
    let sl = layout
        .segments
        .ok_or_else(|| missing("the segment arrays"))?;
    let state = plan.state.ok_or_else(|| missing("a state pass"))?;
    let at = |o: usize| base + o as u64;
    let args = SegArgs {
        seg_cu: at(sl.seg_cu),
        seg_of: at(sl.seg_of),
        skip: at(sl.skip),
        zidx: at(sl.zidx),
        ident: at(sl.ident),
        zero_v: at(sl.zero_v),
        fin: at(sl.fin),
        trans: at(sl.trans),
        sin: at(sl.sin),
        seg_tokens: seg.tokens(p) as i32,
        n_seg: seg.n_seg as i32,
    };
    let extra = Some(MapArg::Segments(args));
    // the caller's call: setup reads its offsets, combine its initial state, finish writes its
    // final state
    let user = launch::params(p, t);
    launch_one(main, &SETUP, stream, &user, extra)?;
    // the segments as sequences: tables, intra kernel
    let ps = plan::segmented(p, seg);
    let ts = DevicePtrs {
        cu_seqlens: args.seg_cu,
        state_in: 0,
        state_indices: 0,
        state_out: 0,
        checkpoints: 0,
        ..*t
    };
    let with_meta = |q: &Problem, ptrs: &DevicePtrs| -> Params {
        let mut prm = launch::params(q, ptrs);
        prm.mode = flags;
        prm.chunk_table = at(layout.chunk_table);
        prm.chunk_offsets = at(layout.chunk_offsets);
        prm.ck_offsets = at(layout.ck_offsets);
        prm.work = at(layout.work);
        prm
    };
    let prm = with_meta(&ps, &ts);
    launch_one(varlen, &plan::TABLES, stream, &prm, None)?;
    launch_one(main, &plan.main, stream, &prm, None)?;
    // the state passes (plain launches, `plan::small_bh_launches`), f32 kv states in the
    // workspace
    let pass = state;
    let [pf, pm, p3prob] = plan::segment_passes(p, seg);
    let blocks = (launch::table_rows(&ps) * p.hv) as u64;
    let block = main.sizes.block_bytes as u64;
    let maps = MapArg::encode(TensorMaps::Tform, &ps, &ts, prm.work, blocks, block)?;
    let no_dep = flags & !launch::FLAG_DEPENDENT_LAUNCH;
    // pass 1: F (the real v, from zero) and M (v = 0, from the identity) of every segment but
    // the last of its sequence
    let mut p1 = with_meta(
        &pf,
        &DevicePtrs {
            state_out: args.fin,
            ..ts
        },
    );
    p1.mode = no_dep;
    p1.seg_skip = args.skip;
    launch_one(main, &pass, stream, &p1, Some(maps))?;
    let mut p2 = with_meta(
        &pm,
        &DevicePtrs {
            state_in: args.ident,
            state_indices: args.zidx,
            state_out: args.trans,
            ..ts
        },
    );
    p2.mode = no_dep;
    p2.seg_skip = args.skip;
    let zero_v = maps.with_zero_v(p, args.zero_v)?;
    launch_one(main, &pass, stream, &p2, Some(zero_v))?;
    // combine along each sequence
    let combine = Launch::plain(
        "gdn_prefill_segments_combine",
        ((p.v / 16) as u32, p.hv as u32, p.seqs as u32),
        256,
        ((p.k * 16 + p.k * (p.k + 4)) * 4) as u32,
    );
    launch_one(main, &combine, stream, &user, extra)?;
    // pass 3: every segment from its incoming state, o and the segments' final states
    let mut p3 = with_meta(
        &p3prob,
        &DevicePtrs {
            state_in: args.sin,
            state_out: args.fin,
            ..ts
        },
    );
    p3.mode = no_dep;
    launch_one(main, &pass, stream, &p3, Some(maps))?;
    if p.final_state != FinalState::None {
        let finish = Launch::plain(
            "gdn_prefill_segments_finish",
            ((p.k * p.v).div_ceil(256) as u32, p.hv as u32, p.seqs as u32),
            256,
            0,
        );
        launch_one(main, &finish, stream, &user, extra)?;
    }
    Ok(())
}

/// `gdn_prefill_segments_setup`: 64 CTAs fill the identity, zero rows and indices; the first
/// also builds the segment offsets (a 4 KB scan buffer).
const SETUP: Launch = Launch {
    entry: "gdn_prefill_segments_setup",
    grid: (64, 1, 1),
    threads: 1024,
    smem: 4096,
    maps: None,
    dependent: false,
};
