//! # deltarule-tests
//!
//! What the CLI, the conformance suite and the benches share: case files ([`casefile`]), the
//! seeded problem generator ([`generate`]), the cross-backend diff ([`diff`]) and the case table
//! of the conformance suite ([`cases`]).

pub mod casefile;
pub mod cases;
pub mod diff;
pub mod generate;
pub mod limits;
pub mod rng;
pub mod suite;

/// The folder of the golden case files: `DELTARULE_GOLDEN` when set, else the originals in a
/// `shared/golden` folder beside the checkout where one exists, else the copy committed in
/// `tests/golden/shared` (a test checks the copy against the originals where both exist).
pub fn golden_dir() -> std::path::PathBuf {
    if let Ok(d) = std::env::var("DELTARULE_GOLDEN") {
        return d.into();
    }
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [here.join("../../shared/golden"), here.join("golden/shared")];
    for c in &candidates {
        if c.is_dir() {
            return c.clone();
        }
    }
    candidates[0].clone()
}

/// Every `*.safetensors` file in [`golden_dir`], sorted.
pub fn golden_files() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(golden_dir())
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
