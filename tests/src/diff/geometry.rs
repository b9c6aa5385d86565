//! The geometry of an output: what is needed to name one of its elements.

use crate::casefile::Case;
use deltarule_core::problem::FinalState;
use deltarule_core::{Problem, Result};

/// What is needed to name an element of an output: the problem, the sequence offsets and, for a
/// pool updated in place, the pool row of each sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    pub problem: Problem,
    /// `cu_seqlens`, `[N + 1]`.
    pub cu: Vec<usize>,
    /// Pool row of each sequence (-1: none), when the final state is a pool updated in place.
    pub state_indices: Option<Vec<i64>>,
}

impl Geometry {
    /// The geometry of a case (its offsets as read; the reader has validated them).
    pub fn of_case(case: &Case) -> Result<Geometry> {
        let cu = case
            .inputs
            .cu_seqlens
            .to_i64_vec("cu_seqlens")?
            .iter()
            .map(|&x| x.max(0) as usize)
            .collect();
        let state_indices = match &case.inputs.state_indices {
            Some(t) => Some(t.to_i64_vec("state_indices")?),
            None => None,
        };
        Ok(Geometry {
            problem: case.problem.clone(),
            cu,
            state_indices,
        })
    }

    pub(super) fn seq_of_token(&self, t: usize) -> usize {
        self.cu.partition_point(|&c| c <= t).saturating_sub(1)
    }

    pub(super) fn seq_len(&self, n: usize) -> usize {
        match (self.cu.get(n), self.cu.get(n + 1)) {
            (Some(a), Some(b)) => b.saturating_sub(*a),
            _ => 0,
        }
    }

    /// Whether the final state is a pool updated in place (rows named by `state_indices`).
    pub fn pooled(&self) -> bool {
        self.state_indices.is_some() && self.problem.final_state == FinalState::InPlace
    }
}
