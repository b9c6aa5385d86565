//! The worst element: where an element of an output sits, in the problem's terms and in words.

use super::Geometry;

/// Where an element sits, in the problem's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worst {
    pub sequence: Option<usize>,
    /// Token within the sequence (`o`), or the tokens covered by a checkpoint.
    pub token: Option<usize>,
    /// Length of the sequence.
    pub seq_len: Option<usize>,
    /// Packed token index (`o`).
    pub packed: Option<usize>,
    /// Index of the checkpoint within its sequence (checkpoints).
    pub checkpoint: Option<usize>,
    /// The value head.
    pub head: usize,
    /// The value channel.
    pub channel: usize,
    /// The key channel (states and checkpoints).
    pub k: Option<usize>,
    /// The pool row (pooled final states).
    pub pool_row: Option<usize>,
}

impl Worst {
    /// The element in words: `seq 1, token 37 of 120 (packed 157), value head 3, channel 12`.
    pub fn describe(&self) -> String {
        let mut s = Vec::new();
        match (self.pool_row, self.sequence) {
            (Some(r), Some(n)) => s.push(format!("pool row {r} (seq {n})")),
            (Some(r), None) => s.push(format!("pool row {r} (named by no sequence)")),
            (None, Some(n)) => match (self.checkpoint, self.token, self.packed) {
                (Some(c), Some(t), _) => {
                    s.push(format!("seq {n}, checkpoint {c} (after token {t}"));
                    if let Some(l) = self.seq_len {
                        let last = s.len() - 1;
                        s[last].push_str(&format!(" of {l}"));
                    }
                    let last = s.len() - 1;
                    s[last].push(')');
                }
                (None, Some(t), Some(p)) => {
                    let of = self.seq_len.map_or(String::new(), |l| format!(" of {l}"));
                    s.push(format!("seq {n}, token {t}{of} (packed {p})"));
                }
                _ => s.push(format!("seq {n}, final state")),
            },
            (None, None) => {}
        }
        s.push(format!("value head {}", self.head));
        match self.k {
            Some(k) => s.push(format!("key {k}, value channel {}", self.channel)),
            None => s.push(format!("channel {}", self.channel)),
        }
        s.join(", ")
    }
}

/// Locates flat index `i` of tensor `tensor` (`o`, `final_state` or `checkpoints`).
pub fn locate(g: &Geometry, tensor: &str, i: usize) -> Worst {
    let p = &g.problem;
    let (s0, s1) = p.state_dims();
    if tensor == "o" {
        let t = i / (p.hv * p.v).max(1);
        let head = (i / p.v.max(1)) % p.hv.max(1);
        let channel = i % p.v.max(1);
        let seq = g.seq_of_token(t);
        return Worst {
            sequence: Some(seq),
            token: Some(t - g.cu.get(seq).copied().unwrap_or(0).min(t)),
            seq_len: Some(g.seq_len(seq)),
            packed: Some(t),
            checkpoint: None,
            head,
            channel,
            k: None,
            pool_row: None,
        };
    }
    let per_row = (p.hv * s0 * s1).max(1);
    let row = i / per_row;
    let head = (i / (s0 * s1).max(1)) % p.hv.max(1);
    let a = (i / s1.max(1)) % s0.max(1);
    let b = i % s1.max(1);
    let (kk, vv) = match p.layout {
        deltarule_core::StateLayout::Kv => (a, b),
        deltarule_core::StateLayout::Vk => (b, a),
    };
    let state = |sequence, pool_row| Worst {
        sequence,
        token: None,
        seq_len: None,
        packed: None,
        checkpoint: None,
        head,
        channel: vv,
        k: Some(kk),
        pool_row,
    };
    if tensor == "checkpoints" {
        let every = p.checkpoint_every.unwrap_or(1).max(1);
        let offs = deltarule_core::varlen::checkpoint_offsets(&g.cu, every);
        let seq = offs.partition_point(|&c| c <= row).saturating_sub(1);
        let c = row - offs.get(seq).copied().unwrap_or(0).min(row);
        return Worst {
            token: Some((c + 1) * every),
            seq_len: Some(g.seq_len(seq)),
            checkpoint: Some(c),
            ..state(Some(seq), None)
        };
    }
    if g.pooled() {
        let seq = g
            .state_indices
            .as_ref()
            .and_then(|v| v.iter().position(|&x| x == row as i64));
        state(seq, Some(row))
    } else {
        state(Some(row), None)
    }
}
