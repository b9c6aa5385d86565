//! The JSON form of rows (`diff --json`, `compare --json`): one object per row.

use super::{worst_words, DiffRow, Worst};
use serde_json::json;

impl Worst {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "sequence": self.sequence,
            "token": self.token,
            "seq_len": self.seq_len,
            "packed": self.packed,
            "checkpoint": self.checkpoint,
            "head": self.head,
            "channel": self.channel,
            "k": self.k,
            "pool_row": self.pool_row,
        })
    }
}

impl DiffRow {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "case": self.case,
            "backend": self.backend,
            "kernel": self.kernel,
            "rule": self.rule,
            "device": self.device,
            "tensor": self.tensor,
            "reference": self.reference,
            "rel_l2": json_f64(self.metrics.rel_l2),
            "max_abs": json_f64(self.metrics.max_abs),
            "exact": self.exact(),
            "worst": (!self.exact()).then(|| self.worst.to_json()),
            "worst_words": (!self.exact()).then(|| worst_words(self)),
            "worst_got": (!self.exact()).then(|| json_f64(self.metrics.worst_got)),
            "worst_want": (!self.exact()).then(|| json_f64(self.metrics.worst_want)),
            "nonfinite": self.metrics.nonfinite,
            "rel_l2_f64": self.rel_l2_f64.map(json_f64),
            "per_sequence": self.per_sequence.iter().map(|x| x.map(json_f64)).collect::<Vec<_>>(),
            "tolerance": self.tolerance,
            "pass": self.pass,
        })
    }
}

fn json_f64(x: f64) -> serde_json::Value {
    if x.is_finite() {
        json!(x)
    } else {
        json!(x.to_string())
    }
}
