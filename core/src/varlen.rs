//! Variable-length metadata (docs/spec.md section 7): the offsets' checks, the chunk table
//! derived from `cu_seqlens`, the per-sequence chunk and checkpoint offsets, and the static
//! (graph-capture) table with sentinel rows.

use crate::error::{Error, Result};

/// Checks `cu_seqlens` (docs/spec.md section 2): `cu[0] = 0`, non-decreasing, `cu[N] = T`.
/// Returns the offsets as `usize`.
pub fn validate_cu_seqlens(cu: &[i64], tokens: usize) -> Result<Vec<usize>> {
    if cu.len() < 2 {
        return Err(Error::invalid(
            "cu_seqlens",
            "at least 2 entries ([N + 1], N >= 1)",
            format!("{} entries", cu.len()),
        ));
    }
    if cu[0] != 0 {
        return Err(Error::invalid("cu_seqlens[0]", "0", cu[0].to_string()));
    }
    for i in 1..cu.len() {
        if cu[i] < cu[i - 1] {
            return Err(Error::invalid(
                format!("cu_seqlens[{i}]"),
                format!(
                    "non-decreasing offsets (>= cu_seqlens[{}] = {})",
                    i - 1,
                    cu[i - 1]
                ),
                cu[i].to_string(),
            ));
        }
        if cu[i] > tokens as i64 {
            return Err(Error::invalid(
                format!("cu_seqlens[{i}]"),
                format!("an offset in 0..={tokens} (T)"),
                cu[i].to_string(),
            ));
        }
    }
    let last = cu[cu.len() - 1];
    if last != tokens as i64 {
        return Err(Error::invalid(
            format!("cu_seqlens[{}]", cu.len() - 1),
            format!("T = {tokens}"),
            last.to_string(),
        ));
    }
    Ok(cu.iter().map(|&x| x as usize).collect())
}

/// Per-sequence start offsets into a checkpoint buffer: `floor(len_n / every)` states per sequence,
/// in sequence order. Returns `[N + 1]`.
pub fn checkpoint_offsets(cu: &[usize], every: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(cu.len());
    out.push(0);
    for w in cu.windows(2) {
        let last = out[out.len() - 1];
        out.push(last + (w[1] - w[0]) / every.max(1));
    }
    out
}

/// The chunk table of one `cu_seqlens`: one `(sequence, chunk within the sequence)` row per chunk,
/// in sequence order, and the per-sequence chunk offsets `[N + 1]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkTable {
    pub chunk: usize,
    /// The offsets this table was built from.
    pub cu: Vec<usize>,
    /// `(sequence, chunk index within the sequence)`.
    pub rows: Vec<(u32, u32)>,
    /// Start of sequence n's chunks in `rows` (fla's `prepare_chunk_offsets`).
    pub chunk_offsets: Vec<usize>,
}

impl ChunkTable {
    /// Builds the table from validated offsets.
    pub fn build(cu: &[usize], chunk: usize) -> Self {
        let mut rows = Vec::new();
        let mut chunk_offsets = vec![0usize];
        for (n, w) in cu.windows(2).enumerate() {
            let nc = (w[1] - w[0]).div_ceil(chunk);
            for c in 0..nc {
                rows.push((n as u32, c as u32));
            }
            chunk_offsets.push(rows.len());
        }
        ChunkTable {
            chunk,
            cu: cu.to_vec(),
            rows,
            chunk_offsets,
        }
    }

    /// Validates raw offsets, then builds.
    pub fn from_raw(cu: &[i64], tokens: usize, chunk: usize) -> Result<Self> {
        Ok(Self::build(&validate_cu_seqlens(cu, tokens)?, chunk))
    }

    pub fn seqs(&self) -> usize {
        self.cu.len() - 1
    }

    /// Token range `[start, end)` of table row `r`.
    pub fn token_range(&self, r: usize) -> (usize, usize) {
        let (n, c) = self.rows[r];
        let start = self.cu[n as usize] + c as usize * self.chunk;
        let end = (start + self.chunk).min(self.cu[n as usize + 1]);
        (start, end)
    }

    /// The static row count of docs/spec.md section 7 for graph capture: `ceil(T/C) + N - 1`, an
    /// upper bound on the rows of any segmentation of T tokens into N sequences.
    pub fn static_rows(tokens: usize, seqs: usize, chunk: usize) -> usize {
        (tokens.div_ceil(chunk) + seqs).saturating_sub(1).max(1)
    }

    /// The rows padded to [`ChunkTable::static_rows`] with sentinel `(-1, -1)` rows, as the device
    /// builder of graph-captured calls produces them.
    pub fn padded_rows(&self) -> Vec<[i32; 2]> {
        let total = Self::static_rows(self.cu[self.cu.len() - 1], self.seqs(), self.chunk);
        let mut out: Vec<[i32; 2]> = self
            .rows
            .iter()
            .map(|&(n, c)| [n as i32, c as i32])
            .collect();
        out.resize(total.max(out.len()), [-1, -1]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_and_offsets() {
        let t = ChunkTable::from_raw(&[0, 0, 64, 65, 200], 200, 64).expect("valid");
        // seq 0 empty, seq 1 one chunk, seq 2 one chunk (1 token), seq 3 135 tokens -> 3 chunks
        assert_eq!(t.rows, vec![(1, 0), (2, 0), (3, 0), (3, 1), (3, 2)]);
        assert_eq!(t.chunk_offsets, vec![0, 0, 1, 2, 5]);
        assert_eq!(t.token_range(4), (193, 200));
        assert_eq!(ChunkTable::static_rows(200, 4, 64), 7);
        let padded = t.padded_rows();
        assert_eq!(padded.len(), 7);
        assert_eq!(padded[5], [-1, -1]);
    }

    #[test]
    fn static_rows_is_an_upper_bound() {
        // every segmentation of T tokens into N sequences has at most ceil(T/C) + N - 1 chunks
        for t in [1usize, 63, 64, 65, 200, 513] {
            for n in 1..6usize {
                for split in 0..t.min(50) {
                    let mut cu = vec![0i64];
                    for i in 1..n {
                        cu.push(((split * i * 7919) % (t + 1)) as i64);
                    }
                    cu.push(t as i64);
                    cu.sort();
                    let tab = ChunkTable::from_raw(&cu, t, 64).expect("valid");
                    assert!(tab.rows.len() <= ChunkTable::static_rows(t, n, 64));
                }
            }
        }
    }

    #[test]
    fn bad_offsets_are_named() {
        let e = validate_cu_seqlens(&[1, 5], 5).expect_err("must fail");
        assert!(e.to_string().contains("cu_seqlens[0]"));
        let e = validate_cu_seqlens(&[0, 5, 3], 5).expect_err("must fail");
        assert!(e.to_string().contains("cu_seqlens[2]"));
        let e = validate_cu_seqlens(&[0, 4], 5).expect_err("must fail");
        assert!(e.to_string().contains("T = 5"));
        let e = validate_cu_seqlens(&[0, 9, 5], 5).expect_err("must fail");
        assert!(e.to_string().contains("cu_seqlens[1]"));
    }

    #[test]
    fn checkpoint_counts_floor() {
        assert_eq!(
            checkpoint_offsets(&[0, 130, 194, 194], 64),
            vec![0, 2, 3, 3]
        );
    }
}
