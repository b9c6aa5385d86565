//! The selection: which row of [`RULES`] runs a problem on the devices present, and why every
//! other row does not.

use super::table::RULES;
use super::vocabulary::{
    AutoWhen, CheckpointRule, DeviceState, Need, Preference, Reject, Rule, SplitBound,
};
use crate::backend::Kernel;
use crate::caps::{BackendKind, Capabilities};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::problem::{FinalState, Gate, InitialState, Mode, Op, Problem};
use crate::variants::fused_tform_applies;

/// The result of a selection: the chosen row (if any) and every row considered with its verdict.
#[derive(Clone, Debug)]
pub struct Selection {
    pub preference: Preference,
    pub chosen: Option<&'static Rule>,
    pub trace: Vec<(&'static Rule, std::result::Result<(), Vec<Reject>>)>,
}

impl Selection {
    /// The chosen row, or the documented error carrying every rejection.
    pub fn rule(&self) -> Result<&'static Rule> {
        self.chosen.ok_or_else(|| {
            let mut reasons: Vec<String> = self
                .trace
                .iter()
                .filter(|(r, _)| self.preference.wants(r))
                .flat_map(|(r, v)| match v {
                    Ok(()) => Vec::new(),
                    Err(rs) => rs.iter().map(|x| format!("  {}: {x}", r.id)).collect(),
                })
                .collect();
            if reasons.is_empty() {
                let ids: Vec<&str> = self.trace.iter().map(|(r, _)| r.id).collect();
                reasons.push(format!(
                    "  the table has no `{}` row for this op and mode (its rows: {})",
                    self.preference,
                    ids.join(", ")
                ));
            }
            Error::NoEligibleRule {
                choice: self.preference.to_string(),
                reasons,
            }
        })
    }
}

/// Checks the problem against a row's contract (everything but the device and the preference).
pub fn contract_rejections(rule: &Rule, p: &Problem) -> Vec<Reject> {
    let mut out = Vec::new();
    let mut dt = |role: &'static str, got: DType, allowed: &'static [DType]| {
        if !allowed.contains(&got) {
            out.push(Reject::DType { role, got, allowed });
        }
    };
    dt("q/k/v", p.qkv_dtype, rule.qkv_dtypes);
    dt("g", p.g_dtype, rule.g_dtypes);
    dt("beta", p.beta_dtype, rule.beta_dtypes);
    dt("output", p.out_dtype, rule.out_dtypes);
    if p.initial != InitialState::None {
        dt("state", p.state_in_dtype, rule.state_dtypes);
    }
    if (p.final_state != FinalState::None || p.checkpoint_every.is_some())
        && !(p.initial != InitialState::None && p.state_in_dtype == p.state_out_dtype)
    {
        dt("state", p.state_out_dtype, rule.state_dtypes);
    }
    if !rule.layouts.contains(&p.layout) {
        out.push(Reject::Layout { got: p.layout });
    }
    if !rule.head_k.accepts(p.k) {
        out.push(Reject::HeadDim {
            which: "K",
            got: p.k,
            allowed: rule.head_k,
        });
    }
    if !rule.head_v.accepts(p.v) {
        out.push(Reject::HeadDim {
            which: "V",
            got: p.v,
            allowed: rule.head_v,
        });
    }
    if p.hv != p.h && !rule.gva {
        out.push(Reject::Gva { h: p.h, hv: p.hv });
    }
    let gate_ok = match p.gate {
        Gate::Log => rule.gates.log,
        Gate::Softplus => rule.gates.softplus,
        Gate::LowerBound(lb) => rule
            .gates
            .lower_bound
            .is_some_and(|(lo, hi)| lb >= lo && lb < hi),
    };
    if !gate_ok {
        out.push(Reject::Gate {
            got: p.gate.name(),
            allowed: rule.gates.describe(),
        });
    }
    if !rule.betas.contains(&p.beta) {
        out.push(Reject::Beta { got: p.beta });
    }
    if p.l2norm && !rule.l2norm {
        out.push(Reject::L2Norm);
    }
    if matches!(p.initial, InitialState::Pool { .. }) && !rule.pools {
        out.push(Reject::Pool);
    }
    if let Some(every) = p.checkpoint_every {
        let ok = match rule.checkpoints {
            CheckpointRule::None => false,
            CheckpointRule::Any => true,
            CheckpointRule::MultipleOf(m) => every % m == 0,
        };
        if !ok {
            out.push(Reject::Checkpoints {
                every,
                rule: rule.checkpoints,
            });
        }
    }
    out
}

/// Checks a row's device needs against the capabilities found.
pub fn device_rejections(rule: &Rule, caps: &Capabilities) -> Vec<Reject> {
    let mut out = Vec::new();
    for &need in rule.needs {
        let (ok, found) = match need {
            Need::ComputeCapability(a, b) => match caps.compute_capability {
                Some((x, y)) => ((x, y) >= (a, b), format!("{x}.{y}")),
                None => (false, "no compute capability".into()),
            },
            Need::WorkgroupStorage(bytes) => (
                caps.max_workgroup_storage >= bytes,
                format!("{} KiB", caps.max_workgroup_storage / 1024),
            ),
            Need::StorageBuffers(n) => (
                caps.max_storage_buffers_per_stage >= n,
                caps.max_storage_buffers_per_stage.to_string(),
            ),
            Need::Invocations(n) => (
                caps.max_invocations_per_workgroup >= n,
                caps.max_invocations_per_workgroup.to_string(),
            ),
            Need::Subgroups => (caps.subgroups, "no subgroups".into()),
            Need::ShaderF16 => (caps.shader_f16, "no shader f16".into()),
            Need::CooperativeMatrix => (
                caps.cooperative_matrix,
                "none usable (not offered, no 16x16x16 f16->f32 configuration, subgroups not 32 \
                 wide, or DELTARULE_WGPU_COOP=0)"
                    .into(),
            ),
        };
        if !ok {
            out.push(Reject::Capability { need, found });
        }
    }
    out
}

/// The row of `backend`'s `kernel` for `op` in `mode`, if the table has one.
pub fn find_rule(
    backend: BackendKind,
    kernel: Kernel,
    op: Op,
    mode: Mode,
) -> Option<&'static Rule> {
    RULES
        .iter()
        .find(|r| r.backend == backend && r.kernel == kernel && r.op == op && r.mode == mode)
}

/// Whether `backend`'s `kernel` promises to run `p` (its row's contract; not the device, not the
/// `auto` conditions): for a backend's own entry points, which take a kernel without selecting
/// it. The error lists every reason, as the table states it.
pub fn check_contract(backend: BackendKind, kernel: Kernel, p: &Problem) -> Result<()> {
    let rule = find_rule(backend, kernel, p.op, p.mode).ok_or_else(|| {
        Error::unsupported(
            backend,
            kernel.name(),
            format!("the table has no row for {} {}", p.op.name(), p.mode.name()),
        )
    })?;
    let rejects = contract_rejections(rule, p);
    if rejects.is_empty() {
        return Ok(());
    }
    let reasons: Vec<String> = rejects.iter().map(|r| r.to_string()).collect();
    Err(Error::unsupported(
        backend,
        kernel.name(),
        reasons.join("; "),
    ))
}

/// Workspace blocks of the split prefill form, at most: one per (64-token chunk, value head),
/// (tokens / 64 + sequences) x value heads (each sequence ends in at most one partial chunk).
fn split_blocks(p: &Problem) -> u64 {
    ((p.tokens / 64 + p.seqs) * p.hv) as u64
}

/// Where a prefill stands against a [`SplitBound`].
enum SplitSide {
    /// More pairs than the limit and every sequence at most `short` tokens, in the fused
    /// T-form's domain: the fused form.
    ShortSequences { pairs: u64, limit: u64 },
    /// At most the limit of pairs: too few to fill the device fused; the split form.
    FewPairs { pairs: u64, limit: u64 },
    /// Many pairs, a workspace within the bound: the split form.
    BoundedWorkspace { blocks: u64 },
    /// Many pairs, a workspace beyond the bound, but the longest sequence's `chunks` are more
    /// than 1.5 x the fused form's `waves` (and `blocks` are within the chain bound): the split
    /// form.
    LongChain {
        chunks: u64,
        waves: u64,
        blocks: u64,
    },
    /// Many pairs, a workspace beyond the bound: the fused form.
    LargeWorkspace {
        pairs: u64,
        limit: u64,
        blocks: u64,
        chain: Option<(u64, u64)>,
    },
}

/// The fused form's waves on `sms` multiprocessors: one CTA per (sequence, value head) walking
/// its chunks; counted in chunk steps, (tokens / 64 + sequences) x value heads over the CTAs the
/// device holds at once (two an SM for the fused T-form, one for the classic kernel).
fn fused_waves(p: &Problem, blocks: u64, sms: u64) -> u64 {
    let per_sm = if fused_tform_applies(p) { 2 } else { 1 };
    blocks.div_ceil((per_sm * sms).max(1))
}

fn split_side(b: SplitBound, p: &Problem, sms: u64, max_seq: Option<usize>) -> SplitSide {
    let pairs = (p.seqs * p.hv) as u64;
    let limit = sms * b.num as u64 / b.den as u64;
    let blocks = split_blocks(p);
    let short_sequences =
        b.short > 0 && max_seq.is_some_and(|m| m <= b.short) && fused_tform_applies(p);
    if pairs <= limit {
        SplitSide::FewPairs { pairs, limit }
    } else if short_sequences {
        SplitSide::ShortSequences { pairs, limit }
    } else if blocks <= b.max_blocks {
        SplitSide::BoundedWorkspace { blocks }
    } else {
        let chain = max_seq.filter(|_| b.chain_blocks > 0).map(|m| {
            (
                (m as u64).div_ceil(p.chunk.max(1) as u64),
                fused_waves(p, blocks, sms),
            )
        });
        match chain {
            Some((chunks, waves)) if 2 * chunks > 3 * waves && blocks <= b.chain_blocks => {
                SplitSide::LongChain {
                    chunks,
                    waves,
                    blocks,
                }
            }
            _ => SplitSide::LargeWorkspace {
                pairs,
                limit,
                blocks,
                chain,
            },
        }
    }
}

/// The `auto` condition of `rule` on `p` (`None`: it holds).
fn auto_rejection(
    rule: &Rule,
    p: &Problem,
    caps: &Capabilities,
    max_seq: Option<usize>,
) -> Option<Reject> {
    let sms = caps.multiprocessors.unwrap_or(1) as u64;
    match rule.auto_when {
        AutoWhen::Always => None,
        AutoWhen::Never => Some(Reject::Heuristic(
            "explicit choice only (a cross-check path, never picked by auto)".into(),
        )),
        AutoWhen::SplitWins(b) => match split_side(b, p, sms, max_seq) {
            SplitSide::FewPairs { .. }
            | SplitSide::BoundedWorkspace { .. }
            | SplitSide::LongChain { .. } => None,
            SplitSide::ShortSequences { pairs, limit } => Some(Reject::Heuristic(format!(
                "{pairs} (sequence x value head) pairs > {limit} and every sequence at most {} \
                 tokens with a dense f32 final state: the fused T-form reads the inputs and the \
                 state once",
                b.short
            ))),
            SplitSide::LargeWorkspace {
                pairs,
                limit,
                blocks,
                chain,
            } => Some(Reject::Heuristic(format!(
                "{pairs} (sequence x value head) pairs > {limit} ({}/{} of {sms} \
                 multiprocessors) and up to {blocks} workspace blocks > {}{}: the fused kernel \
                 needs no workspace",
                b.num,
                b.den,
                b.max_blocks,
                chain_text(b, chain)
            ))),
        },
        AutoWhen::FusedWins(b) => match split_side(b, p, sms, max_seq) {
            SplitSide::ShortSequences { .. } | SplitSide::LargeWorkspace { .. } => None,
            SplitSide::LongChain {
                chunks,
                waves,
                blocks,
            } => Some(Reject::Heuristic(format!(
                "the longest sequence's {chunks} chunks > 1.5 x the fused form's {waves} waves on \
                 {sms} multiprocessors, with {blocks} workspace blocks <= {}: one CTA would walk \
                 that sequence alone; the split form's state pass walks it faster",
                b.chain_blocks
            ))),
            SplitSide::FewPairs { pairs, limit } => Some(Reject::Heuristic(format!(
                "{pairs} (sequence x value head) pairs <= {limit} ({}/{} of {sms} \
                 multiprocessors): too few to fill the device",
                b.num, b.den
            ))),
            SplitSide::BoundedWorkspace { blocks } => Some(Reject::Heuristic(format!(
                "up to {blocks} workspace blocks <= {}: the split form is faster",
                b.max_blocks
            ))),
        },
    }
}

/// Why a large workspace did not take the long-chain exception, for the rejection text.
fn chain_text(b: SplitBound, chain: Option<(u64, u64)>) -> String {
    match chain {
        _ if b.chain_blocks == 0 => String::new(),
        None => " (longest sequence not known)".into(),
        Some((chunks, waves)) if 2 * chunks <= 3 * waves => {
            format!(" (longest sequence {chunks} chunks <= 1.5 x the {waves} fused waves)")
        }
        Some(_) => format!(" (beyond the long-chain bound of {})", b.chain_blocks),
    }
}

/// Picks a row for `p` given the devices present and the preference. Pure and deterministic:
/// rows are tried in (priority, id) order. `max_seq` is the longest sequence of the problem when
/// known (decode kernels bound it).
pub fn select(
    p: &Problem,
    devices: &[DeviceState],
    pref: Preference,
    max_seq: Option<usize>,
) -> Selection {
    let mut rows: Vec<&'static Rule> = RULES
        .iter()
        .filter(|r| r.op == p.op && r.mode == p.mode)
        .collect();
    rows.sort_by(|a, b| (a.priority, a.id).cmp(&(b.priority, b.id)));
    let mut trace = Vec::new();
    let mut chosen = None;
    for r in rows {
        let mut rejects = Vec::new();
        if !pref.wants(r) {
            rejects.push(Reject::NotRequested {
                wanted: pref.to_string(),
            });
        }
        let device = devices.iter().find(|d| d.backend() == r.backend);
        let caps = match device {
            Some(DeviceState::Available(c)) => Some(c),
            Some(DeviceState::Unavailable { backend, reason }) => {
                rejects.push(Reject::NoDevice {
                    backend: *backend,
                    reason: reason.clone(),
                });
                None
            }
            None => {
                rejects.push(Reject::NoDevice {
                    backend: r.backend,
                    reason: "not probed (this choice does not need it, or it is not compiled in)"
                        .into(),
                });
                None
            }
        };
        rejects.extend(contract_rejections(r, p));
        if let (Some(max), Some(seq)) = (r.max_seq_len, max_seq) {
            if seq > max {
                rejects.push(Reject::SeqLen { got: seq, max });
            }
        }
        if let Some(c) = caps {
            rejects.extend(device_rejections(r, c));
            if pref.applies_auto_conditions() {
                if let Some(h) = auto_rejection(r, p, c, max_seq) {
                    rejects.push(h);
                }
            }
        }
        let verdict = if rejects.is_empty() {
            if chosen.is_none() {
                chosen = Some(r);
            }
            Ok(())
        } else {
            Err(rejects)
        };
        trace.push((r, verdict));
    }
    Selection {
        preference: pref,
        chosen,
        trace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gdn_prefill(k: usize) -> Problem {
        Problem::new(Op::Gdn, Mode::Prefill, 1, 128, 2, 4, k, k)
    }

    #[test]
    fn a_kernel_outside_its_row_is_unsupported_with_the_tables_reasons() {
        assert!(check_contract(BackendKind::Cuda, Kernel::Chunked, &gdn_prefill(64)).is_ok());
        match check_contract(BackendKind::Cuda, Kernel::Chunked, &gdn_prefill(96)) {
            Err(Error::Unsupported { reason, .. }) => {
                assert!(reason.contains("head dim K = 96"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        let mut p = Problem::new(Op::Kda, Mode::Prefill, 1, 128, 2, 4, 64, 64);
        p.gate = Gate::LowerBound(-6.0);
        p.a_log = true;
        p.checkpoint_every = Some(32);
        match check_contract(BackendKind::Cuda, Kernel::SmallBh, &p) {
            Err(Error::Unsupported { reason, .. }) => {
                assert!(reason.contains("lower_bound in [-5, 0)"), "{reason}");
                assert!(reason.contains("checkpoints every 32"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        match check_contract(BackendKind::Cuda, Kernel::Coop, &gdn_prefill(64)) {
            Err(Error::Unsupported { reason, .. }) => {
                assert!(reason.contains("no row"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_row_is_found_by_its_backend_kernel_op_and_mode() {
        for r in RULES {
            let found = find_rule(r.backend, r.kernel, r.op, r.mode).map(|f| f.id);
            assert_eq!(found, Some(r.id));
        }
    }
}
