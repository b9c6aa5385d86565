//! The token recurrence's launch: its form (a register budget, or a persistent grid) and grid.

use super::{by_op, Launch};
use deltarule_core::{Op, Problem};

/// The token recurrence's forms (kernels/decode.cuh): a block per (V tile, value head, sequence)
/// item under three register budgets (`__launch_bounds__(160, 4 | 5 | 6)`: 96, 80 or 64
/// registers), or a persistent grid of 4 blocks an SM walking the items with the next item's
/// state tile in flight by cp.async. All four give the same bits (the device test
/// `recurrent_forms_agree`, the CPU emulator of tests/emulated.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeForm {
    /// A block per item, 4 blocks an SM (96 registers): `{op}_decode_block4`.
    Block4,
    /// A block per item, 5 blocks an SM (80 registers): `{op}_decode_block5`.
    Block5,
    /// A block per item, 6 blocks an SM (64 registers): `{op}_decode_block6`.
    Block6,
    /// 4 blocks an SM walking the items: `{op}_decode_persistent`.
    Persistent,
}

impl DecodeForm {
    /// Every form, in the order of their names.
    pub const ALL: [DecodeForm; 4] = [
        DecodeForm::Block4,
        DecodeForm::Block5,
        DecodeForm::Block6,
        DecodeForm::Persistent,
    ];

    /// The production choice by mean tokens per sequence `a = tokens / seqs`, from sweeps on an
    /// H100 (256 sequences, K = V = 128, f32 pool states): one token moves the state and little
    /// else, and the most registers win (4 blocks; 5 and 6 lose 2 to 3 %); with several tokens
    /// each token's input loads sit between two state updates, and more resident blocks hide
    /// them: at 2 tokens 5 blocks (gdn -3 %, kda -7 % against 4), at 3 to 8 gdn takes 6 blocks
    /// (-12 to -21 %) while kda, which spills at 64 registers, takes the persistent form at 3 to
    /// 6 (-12 to -14 %; at 6 it ties 5 blocks within 0.7 %) and 5 blocks at 8 (0.827 against the
    /// persistent form's 0.870 ms). Bands: a < 1.5 four blocks; gdn a < 2.5 five, else six; kda
    /// a < 3 five, a < 7 persistent (the crossover lies between 6 and 8), else five. Whatever
    /// the tokens, when the 4-block form's blocks are all resident at once (`items <= 4 x sms`:
    /// few sequences, as in a small batch's speculative verify) more resident blocks have
    /// nothing to hide and only cost registers: 4 blocks (H100, 128 to 512 items at 2 to 8
    /// tokens: gdn -2 to -7 %, kda -3 to -9 % against the bands' choice; at 1024 items the
    /// bands' choice stays ahead).
    pub fn pick(op: Op, tokens: usize, seqs: usize, items: usize, sms: usize) -> DecodeForm {
        let (t, n) = (tokens as u128, seqs.max(1) as u128);
        if 2 * t < 3 * n || items <= Self::one_wave(sms) {
            return DecodeForm::Block4;
        }
        match op {
            Op::Gdn if 2 * t < 5 * n => DecodeForm::Block5,
            Op::Gdn => DecodeForm::Block6,
            Op::Kda if t < 3 * n => DecodeForm::Block5,
            Op::Kda if t < 7 * n => DecodeForm::Persistent,
            Op::Kda => DecodeForm::Block5,
        }
    }

    /// [`DecodeForm::pick`] for problem `p` on `sms` multiprocessors.
    pub fn for_problem(p: &Problem, sms: usize) -> DecodeForm {
        Self::pick(p.op, p.tokens, p.seqs, decode_items(p), sms)
    }

    /// The form a name of `DELTARULE_CUDA_DECODE_FORM` gives (`block4`, `block5`, `block6`,
    /// `persistent`).
    pub fn parse(s: &str) -> Option<DecodeForm> {
        Self::ALL.into_iter().find(|f| f.name() == s.trim())
    }

    /// The form's name (the entry point's after `{op}_decode_`).
    pub fn name(self) -> &'static str {
        match self {
            DecodeForm::Block4 => "block4",
            DecodeForm::Block5 => "block5",
            DecodeForm::Block6 => "block6",
            DecodeForm::Persistent => "persistent",
        }
    }

    /// The entry point of `op`'s recurrence in this form.
    pub fn entry(self, op: Op) -> &'static str {
        match self {
            DecodeForm::Block4 => by_op(op, "gdn_decode_block4", "kda_decode_block4"),
            DecodeForm::Block5 => by_op(op, "gdn_decode_block5", "kda_decode_block5"),
            DecodeForm::Block6 => by_op(op, "gdn_decode_block6", "kda_decode_block6"),
            DecodeForm::Persistent => by_op(op, "gdn_decode_persistent", "kda_decode_persistent"),
        }
    }

    /// Blocks resident at once on `sms` SMs at 4 an SM (the 4-block form's and the persistent
    /// form's `__launch_bounds__`): the persistent grid, and the item count up to which every
    /// form's blocks would fit in one wave.
    fn one_wave(sms: usize) -> usize {
        4 * sms.max(1)
    }

    /// Blocks for `items` work items (V / 32 x HV x N): one per item, or for the persistent form
    /// as many as are resident at once (4 an SM, its `__launch_bounds__`), never more than the
    /// items.
    pub fn blocks(self, items: usize, sms: usize) -> usize {
        match self {
            DecodeForm::Persistent => items.min(Self::one_wave(sms)),
            _ => items,
        }
    }
}

/// Work items of the token recurrence, a block each: V / 32 columns x HV x N.
pub fn decode_items(p: &Problem) -> usize {
    (p.v / 32).saturating_mul(p.hv).saturating_mul(p.seqs)
}

/// The token recurrence's launch in `form` on `sms` multiprocessors: a 1-D grid whose items (V
/// tile, value head, sequence) get a block each, or (the persistent form) 4 blocks an SM walk
/// them; 4 state warps + 1 token-input warp (NTH in kernels/decode.cuh), no dynamic shared
/// memory; within i32::MAX items (`grid_limit`). The CPU emulator (tests/emulated.rs) replays
/// the same launch.
pub fn recurrent_launch(p: &Problem, form: DecodeForm, sms: usize) -> Launch {
    let blocks = form.blocks(decode_items(p), sms) as u32;
    Launch::plain(form.entry(p.op), (blocks, 1, 1), 160, 0)
}

#[cfg(test)]
mod tests {
    use super::{decode_items, recurrent_launch, DecodeForm};
    use deltarule_core::{Mode, Op, Problem};

    fn dec(op: Op, n: usize, t: usize) -> Problem {
        Problem::new(op, Mode::Decode, n, t, 16, 32, 128, 128)
    }

    #[test]
    fn the_form_follows_tokens_per_sequence() {
        let one = dec(Op::Gdn, 256, 256);
        assert_eq!(DecodeForm::for_problem(&one, 132), DecodeForm::Block4);
        assert_eq!(decode_items(&one), 32768, "the decode anchor: 4 x 32 x 256");
        // (tokens, sequences) per 256 sequences -> the (gdn, kda) entry points
        let entries: Vec<_> = [
            (1, 1),
            (3, 2),
            (2, 1),
            (5, 2),
            (3, 1),
            (6, 1),
            (7, 1),
            (8, 1),
        ]
        .iter()
        .map(|&(t, n)| {
            let e = |op| {
                let p = dec(op, 256 * n, 256 * t);
                recurrent_launch(&p, DecodeForm::for_problem(&p, 132), 132).entry
            };
            (e(Op::Gdn), e(Op::Kda))
        })
        .collect();
        assert_eq!(
            entries,
            [
                ("gdn_decode_block4", "kda_decode_block4"), // 1 token a sequence
                ("gdn_decode_block5", "kda_decode_block5"), // 1.5
                ("gdn_decode_block5", "kda_decode_block5"), // 2
                ("gdn_decode_block6", "kda_decode_block5"), // 2.5
                ("gdn_decode_block6", "kda_decode_persistent"), // 3
                ("gdn_decode_block6", "kda_decode_persistent"), // 6
                ("gdn_decode_block6", "kda_decode_block5"), // 7
                ("gdn_decode_block6", "kda_decode_block5"), // 8
            ]
        );
        assert_eq!(
            DecodeForm::pick(Op::Gdn, 0, 0, 0, 132),
            DecodeForm::Block4,
            "no tokens"
        );
        let many = 1 << 20;
        assert_eq!(
            DecodeForm::pick(Op::Kda, 5, 0, many, 132),
            DecodeForm::Persistent
        );
        assert_eq!(
            DecodeForm::pick(Op::Kda, 20, 3, many, 132),
            DecodeForm::Persistent
        );
        assert_eq!(
            DecodeForm::pick(Op::Kda, 21, 3, many, 132),
            DecodeForm::Block5
        );
    }

    #[test]
    fn items_in_one_wave_take_four_blocks_whatever_the_tokens() {
        for (op, items, sms, form) in [
            (Op::Gdn, 528, 132, DecodeForm::Block4),
            (Op::Gdn, 529, 132, DecodeForm::Block6),
            (Op::Kda, 528, 132, DecodeForm::Block4),
            (Op::Kda, 529, 132, DecodeForm::Persistent),
            (Op::Kda, 128, 32, DecodeForm::Block4),
            (Op::Kda, 129, 32, DecodeForm::Persistent),
        ] {
            assert_eq!(
                DecodeForm::pick(op, 16, 4, items, sms),
                form,
                "{items} items"
            );
        }
        let few = |n| dec(Op::Gdn, n, 4 * n);
        assert_eq!(
            DecodeForm::for_problem(&few(4), 132),
            DecodeForm::Block4,
            "512 items"
        );
        assert_eq!(
            DecodeForm::for_problem(&few(8), 132),
            DecodeForm::Block6,
            "1024 items"
        );
    }

    #[test]
    fn grids_give_a_block_an_item_or_four_an_sm() {
        assert_eq!(
            DecodeForm::Block6.blocks(32768, 132),
            32768,
            "a block per item"
        );
        let dp = DecodeForm::Persistent;
        assert_eq!(dp.blocks(32768, 132), 528, "4 blocks an SM");
        assert_eq!(dp.blocks(100, 132), 100, "no more than the items");
        let p = dec(Op::Kda, 256, 256);
        let l = recurrent_launch(&p, DecodeForm::Persistent, 132);
        assert_eq!(
            (l.entry, l.grid, l.threads, l.smem),
            ("kda_decode_persistent", (528, 1, 1), 160, 0)
        );
        let l = recurrent_launch(&p, DecodeForm::Block5, 132);
        assert_eq!((l.entry, l.grid), ("kda_decode_block5", (32768, 1, 1)));
    }

    #[test]
    fn forms_are_named_as_their_entry_points() {
        for f in DecodeForm::ALL {
            assert_eq!(DecodeForm::parse(f.name()), Some(f));
            assert_eq!(f.entry(Op::Gdn), format!("gdn_decode_{}", f.name()));
            assert_eq!(f.entry(Op::Kda), format!("kda_decode_{}", f.name()));
        }
        assert_eq!(DecodeForm::parse("recurrent"), None);
    }
}
