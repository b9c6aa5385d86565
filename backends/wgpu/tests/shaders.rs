//! Device-free checks of the WGSL sources: every file in `shaders/` is registered (and every
//! registered shader exists), and every module parses and validates with naga (the version wgpu
//! uses) under the capabilities the backend requests.

use deltarule_wgpu::device::wanted_features;
use deltarule_wgpu::shaders::{Shader, PRELUDES};
use std::collections::BTreeSet;
use std::path::Path;

fn shader_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders")
}

#[test]
fn every_wgsl_file_is_registered_and_vice_versa() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(shader_dir())
        .expect("shaders/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    let mut registered: BTreeSet<String> = Shader::ALL
        .iter()
        .map(|s| s.file_name().to_string())
        .collect();
    // a stage file may serve several shaders (variants with other preludes), each named apart
    let names: BTreeSet<&str> = Shader::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names.len(), Shader::ALL.len(), "duplicate shader names");
    assert!(!registered.is_empty());
    registered.extend(PRELUDES.iter().map(|p| p.file.to_string()));
    // every prelude serves some stage
    for p in PRELUDES {
        assert!(
            Shader::ALL
                .iter()
                .any(|s| s.preludes().iter().any(|q| q.file == p.file)),
            "{} is in no stage's preludes",
            p.file
        );
    }
    assert_eq!(
        on_disk, registered,
        "shaders/*.wgsl and the registry (plus the preludes) differ"
    );
    for s in Shader::ALL {
        let text = std::fs::read_to_string(shader_dir().join(s.file_name())).expect("readable");
        assert!(
            s.source().ends_with(&text),
            "{} embeds a stale copy",
            s.file_name()
        );
    }
}

/// naga's capabilities for the wgpu features the backend requests (the superset any adapter can
/// grant: subgroups and f16, and cooperative matrices for the `coop` stages, which the backend
/// uses only when the adapter grants them).
fn requested_capabilities(s: Shader) -> naga::valid::Capabilities {
    let f = wanted_features();
    let mut c = naga::valid::Capabilities::empty();
    if f.contains(wgpu::Features::SUBGROUP) {
        c |= naga::valid::Capabilities::SUBGROUP;
    }
    if f.contains(wgpu::Features::SHADER_F16) {
        c |= naga::valid::Capabilities::SHADER_FLOAT16;
    }
    if s.coop() {
        c |= naga::valid::Capabilities::COOPERATIVE_MATRIX;
    }
    c
}

#[test]
fn every_shader_validates_with_naga() {
    let mut failures = Vec::new();
    for s in Shader::ALL {
        let src = s.source();
        let module = match naga::front::wgsl::parse_str(&src) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!(
                    "{} (prelude {} lines):\n{}",
                    s.file_name(),
                    s.prelude_lines(),
                    e.emit_to_string_with_path(&src, s.file_name())
                ));
                continue;
            }
        };
        let mut v = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            requested_capabilities(s),
        );
        if let Err(e) = v.validate(&module) {
            failures.push(format!(
                "{}:\n{}",
                s.file_name(),
                e.emit_to_string_with_path(&src, s.file_name())
            ));
            continue;
        }
        // every override the host sets is declared
        let declared: BTreeSet<String> = module
            .overrides
            .iter()
            .filter_map(|(_, o)| o.name.clone())
            .collect();
        for o in s.overrides() {
            if !declared.contains(*o) {
                failures.push(format!("{}: override {o} not declared", s.file_name()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
