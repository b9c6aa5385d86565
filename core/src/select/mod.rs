//! Selection rules as data: one static table ([`RULES`]), one row per (op, mode, backend,
//! kernel), and one pure function ([`select`]) that picks a row and explains every rejection.
//!
//! * [`vocabulary`]: what a row says (dtypes, dims, gates, checkpoints, device needs, when `auto`
//!   takes it), what a caller asks for ([`Preference`], parsed from names such as
//!   `cuda:small-bh`) and why a row is rejected ([`Reject`]);
//! * [`table`]: the rows;
//! * [`choose`]: the selection and the checks it runs;
//! * [`render`]: the table as text (`deltarule rules`, `tests/golden/rules.txt`), as the README's
//!   markdown table, and a selection's trace (`--explain`).

pub mod choose;
pub mod render;
pub mod table;
pub mod vocabulary;

pub use choose::{
    check_contract, contract_rejections, device_rejections, find_rule, select, Selection,
};
pub use render::{render_markdown, render_rules};
pub use table::RULES;
pub use vocabulary::{
    AutoWhen, CheckpointRule, DeviceState, DimRule, GateRule, Need, Preference, Reject, Rule,
    SplitBound,
};
