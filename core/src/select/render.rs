//! The rule table as text: every field (`deltarule rules`, the snapshot
//! `tests/golden/rules.txt`), the README's markdown table (`deltarule rules --markdown`), and a
//! selection's trace (`--explain`).

use super::choose::Selection;
use super::table::RULES;
use super::vocabulary::{AutoWhen, SplitBound};
use crate::dtype::{dtype_set, DType};

impl Selection {
    /// The trace as text lines (`--explain`).
    pub fn explain(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (r, v) in &self.trace {
            let mark = match (self.chosen.map(|c| c.id == r.id), v) {
                (Some(true), _) => "chosen  ".to_string(),
                (_, Ok(())) => "eligible".to_string(),
                (_, Err(_)) => "rejected".to_string(),
            };
            out.push(format!("{mark} {:<34} priority {:>3}", r.id, r.priority));
            if let Err(rs) = v {
                for x in rs {
                    out.push(format!("           - {x}"));
                }
            }
        }
        out
    }
}

/// The columns of the full table.
const FULL_COLUMNS: &[&str] = &[
    "id",
    "op",
    "mode",
    "backend:kernel",
    "prio",
    "precision",
    "q/k/v",
    "g",
    "beta",
    "out",
    "state",
    "layouts",
    "K",
    "V",
    "gva",
    "gates",
    "betas",
    "l2norm",
    "pool",
    "ckpt",
    "max len",
    "needs",
    "graph",
    "auto",
    "note",
];

/// Renders the table (the snapshot `tests/golden/rules.txt` and `deltarule rules`): every field
/// of every row, ` | `-separated.
pub fn render_rules() -> String {
    let mut out = FULL_COLUMNS.join(" | ") + "\n";
    for r in RULES {
        let needs: Vec<String> = r.needs.iter().map(|n| n.to_string()).collect();
        let cells = [
            r.id.to_string(),
            r.op.name().to_string(),
            r.mode.name().to_string(),
            format!("{}:{}", r.backend, r.kernel),
            r.priority.to_string(),
            r.precision.to_string(),
            dtype_set(r.qkv_dtypes),
            dtype_set(r.g_dtypes),
            dtype_set(r.beta_dtypes),
            dtype_set(r.out_dtypes),
            dtype_set(r.state_dtypes),
            join_names(r.layouts.iter().map(|l| l.name()), "/"),
            r.head_k.to_string(),
            r.head_v.to_string(),
            yn(r.gva).to_string(),
            r.gates.describe(),
            join_names(r.betas.iter().map(|b| b.name()), "/"),
            yn(r.l2norm).to_string(),
            yn(r.pools).to_string(),
            r.checkpoints.to_string(),
            r.max_seq_len.map_or_else(|| "-".into(), |m| m.to_string()),
            if needs.is_empty() {
                "-".into()
            } else {
                needs.join(", ")
            },
            yn(r.graph_safe).to_string(),
            auto_summary(r.auto_when),
            r.note.to_string(),
        ];
        out.push_str(&cells.join(" | "));
        out.push('\n');
    }
    out
}

fn yn(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

fn join_names<'a>(names: impl Iterator<Item = &'a str>, sep: &str) -> String {
    names.collect::<Vec<_>>().join(sep)
}

/// The columns of the README table.
const MARKDOWN_COLUMNS: &[&str] = &[
    "backend:kernel",
    "op",
    "mode",
    "q/k/v",
    "state dtypes",
    "layouts",
    "K",
    "V",
    "GVA",
    "gates",
    "pool",
    "checkpoints",
    "device",
    "graph-safe",
    "priority",
    "auto picks it",
];

/// The README table: which kernel accepts which dtypes, state dtypes, layouts, head dims and
/// devices, one row per rule, generated from [`RULES`] (a test keeps the README in sync).
pub fn render_markdown() -> String {
    let markdown_row = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let header: Vec<String> = MARKDOWN_COLUMNS.iter().map(|c| c.to_string()).collect();
    let rule: Vec<String> = MARKDOWN_COLUMNS.iter().map(|_| "---".to_string()).collect();
    let mut out = markdown_row(&header) + &markdown_row(&rule);
    for r in RULES {
        let needs: Vec<String> = r.needs.iter().map(|n| n.to_string()).collect();
        let device = if needs.is_empty() {
            r.backend.name().to_string()
        } else {
            format!("{} ({})", r.backend.name(), needs.join(", "))
        };
        let dtypes = |d: &[DType]| join_names(d.iter().map(|x| x.name()), ", ");
        out.push_str(&markdown_row(&[
            format!("`{}:{}`", r.backend, r.kernel),
            r.op.name().to_string(),
            r.mode.name().to_string(),
            dtypes(r.qkv_dtypes),
            dtypes(r.state_dtypes),
            join_names(r.layouts.iter().map(|l| l.name()), ", "),
            r.head_k.to_string(),
            r.head_v.to_string(),
            yn(r.gva).to_string(),
            r.gates.describe(),
            yn(r.pools).to_string(),
            r.checkpoints.to_string(),
            device,
            yn(r.graph_safe).to_string(),
            r.priority.to_string(),
            auto_text(r.auto_when),
        ]));
    }
    out
}

/// The `auto` column of the full table.
fn auto_summary(a: AutoWhen) -> String {
    match a {
        AutoWhen::Always => "always".to_string(),
        AutoWhen::Never => "explicit only".to_string(),
        AutoWhen::SplitWins(b) => {
            let unless = if b.short > 0 {
                format!(", unless every sequence <= {} (dense f32 final)", b.short)
            } else {
                String::new()
            };
            let SplitBound {
                num,
                den,
                max_blocks,
                chain_blocks,
                ..
            } = b;
            let chain = if chain_blocks > 0 {
                format!(" (<= {chain_blocks} if longest chunks > 1.5 x fused waves)")
            } else {
                String::new()
            };
            format!("pairs <= {num}/{den} SMs or blocks <= {max_blocks}{chain}{unless}")
        }
        AutoWhen::FusedWins(b) => {
            let SplitBound {
                num,
                den,
                max_blocks,
                short,
                chain_blocks,
            } = b;
            let chain = if chain_blocks > 0 {
                format!(" (and > {chain_blocks} or longest chunks <= 1.5 x fused waves)")
            } else {
                String::new()
            };
            let or = if short > 0 {
                format!(
                    ", or pairs > {num}/{den} SMs and every sequence <= {short} (dense f32 final)"
                )
            } else {
                String::new()
            };
            format!("pairs > {num}/{den} SMs and blocks > {max_blocks}{chain}{or}")
        }
    }
}

/// The long-chain exception of a [`SplitBound`] in the markdown table ("" where it has none),
/// its block bound after `rel`.
fn chain_clause(b: SplitBound, rel: &str) -> String {
    if b.chain_blocks == 0 {
        return String::new();
    }
    format!(
        " ({rel}{} when the longest sequence's chunks are more than 1.5 x the fused form's waves)",
        b.chain_blocks
    )
}

/// The `auto picks it` column of the markdown table.
fn auto_text(a: AutoWhen) -> String {
    match a {
        AutoWhen::Always => "when eligible".into(),
        AutoWhen::Never => "never (by name only)".into(),
        AutoWhen::SplitWins(b) => format!(
            "sequences x value heads <= {}/{} x SMs, or (tokens / 64 + sequences) x value heads \
             <= {}{}{}",
            b.num,
            b.den,
            b.max_blocks,
            chain_clause(b, ""),
            if b.short > 0 {
                format!(
                    ", unless every sequence is at most {} tokens (K, V >= 64, dense f32 final \
                     state)",
                    b.short
                )
            } else {
                String::new()
            }
        ),
        AutoWhen::FusedWins(b) => format!(
            "sequences x value heads > {}/{} x SMs and (tokens / 64 + sequences) x value heads \
             > {}{}{}",
            b.num,
            b.den,
            b.max_blocks,
            chain_clause(b, "> "),
            if b.short > 0 {
                format!(
                    "; or more pairs than that and every sequence at most {} tokens (K, V >= 64, \
                     dense f32 final state)",
                    b.short
                )
            } else {
                String::new()
            }
        ),
    }
}
