//! Case files: read and written exactly (dtypes, offsets, metadata defaults, unknown metadata
//! preserved), and every malformed file is a clear error, never a panic.

use deltarule_core::problem::{BetaMode, Gate, InitialState, Mode, Op};
use deltarule_core::{DType, Error, Problem};
use deltarule_tests::casefile::{case_bytes, parse_case, read_case};
use deltarule_tests::generate::{generate, with_expected, DataStyle};

fn sample() -> deltarule_tests::casefile::Case {
    let mut p = Problem::new(Op::Kda, Mode::Prefill, 1, 1, 1, 2, 32, 16);
    p.gate = Gate::LowerBound(-5.0);
    p.a_log = false;
    p.beta = BetaMode::Logit2;
    p.l2norm = true;
    p.initial = InitialState::Pool { rows: 3 };
    p.final_state = deltarule_core::FinalState::InPlace;
    p.state_in_dtype = DType::BF16;
    p.state_out_dtype = DType::BF16;
    p.offsets_dtype = DType::I32;
    p.index_dtype = DType::I32;
    p.checkpoint_every = Some(8);
    p.layout = deltarule_core::StateLayout::Vk;
    let c = generate(&p, &[20, 0, 9], 3, DataStyle::default()).expect("generate");
    with_expected(c).expect("reference")
}

#[test]
fn golden_copy_matches_the_shared_originals() {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/golden");
    let copy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/shared");
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(&shared) {
        for e in rd.flatten() {
            let name = e.file_name();
            let a = std::fs::read(e.path()).expect("read original");
            let b = std::fs::read(copy.join(&name))
                .unwrap_or_else(|_| panic!("{name:?} missing from tests/golden/shared"));
            assert_eq!(a, b, "{name:?} differs from ../shared/golden");
            n += 1;
        }
        println!("{n} golden files match");
    } else {
        println!("../shared/golden not present here: the committed copy is used");
    }
    assert!(std::fs::read_dir(&copy).expect("copy").count() >= 6);
}

#[test]
fn every_golden_file_parses_with_its_options() {
    let files = deltarule_tests::golden_files();
    assert!(
        files.len() >= 6,
        "expected at least 6 golden files, found {}",
        files.len()
    );
    for f in files {
        let c = read_case(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(c.expected.o.is_some(), "{} has expected_o", c.name);
        assert!(
            c.metadata.contains_key("source"),
            "{}: unknown keys are kept",
            c.name
        );
        if c.name == "gdn_decode_pool_example" {
            assert_eq!(c.problem.mode, Mode::Decode);
            assert_eq!(c.problem.initial, InitialState::Pool { rows: 5 });
            assert_eq!(c.problem.gate, Gate::Softplus);
            assert_eq!(c.problem.beta, BetaMode::Logit);
            assert!(c.problem.l2norm);
            assert_eq!(c.problem.scale, 0.125);
        }
        if c.name == "kda_checkpoints_example" {
            assert_eq!(c.problem.checkpoint_every, Some(64));
        }
    }
}

#[test]
fn write_then_read_is_exact_and_keeps_unknown_metadata() {
    let mut c = sample();
    c.metadata
        .insert("provenance_note".into(), "kept verbatim".into());
    let bytes = case_bytes(&c).expect("serialise");
    let back = parse_case(&c.name, &bytes).expect("parse");
    assert_eq!(back.inputs, c.inputs, "tensors round-trip bit for bit");
    assert_eq!(back.expected, c.expected);
    assert_eq!(back.problem.gate, c.problem.gate);
    assert_eq!(back.problem.beta, c.problem.beta);
    assert_eq!(back.problem.layout, c.problem.layout);
    assert_eq!(back.problem.checkpoint_every, c.problem.checkpoint_every);
    assert_eq!(back.problem.offsets_dtype, DType::I32);
    assert_eq!(back.problem.index_dtype, DType::I32);
    assert_eq!(back.problem.state_in_dtype, DType::BF16);
    assert_eq!(back.problem.scale, c.problem.scale);
    assert_eq!(
        back.metadata.get("provenance_note").map(String::as_str),
        Some("kept verbatim")
    );
    // rewriting again keeps everything (the header's key order may differ)
    let again = parse_case(&c.name, &case_bytes(&back).expect("serialise")).expect("parse");
    assert_eq!(again, back);
}

fn expect_invalid(bytes: &[u8], field_part: &str) {
    match parse_case("bad", bytes) {
        Err(Error::InvalidArgument { field, .. }) => {
            assert!(
                field.contains(field_part),
                "field `{field}` should name `{field_part}`"
            )
        }
        Err(other) => panic!("expected an invalid `{field_part}`, got {other}"),
        Ok(_) => panic!("accepted a case with a bad `{field_part}`"),
    }
}

#[test]
fn unknown_metadata_values_are_named() {
    for (key, value) in [
        ("gate", "relu"),
        ("beta", "tanh"),
        ("use_qk_l2norm", "yes"),
        ("state_layout", "kvk"),
        ("mode", "train"),
        ("op", "mamba"),
        ("scale", "big"),
        ("checkpoint_every", "0"),
    ] {
        let mut c = sample();
        c.metadata.insert(key.into(), value.into());
        // case_bytes writes the problem's options over the metadata; patch the bytes instead
        let mut good = case_bytes(&c).expect("serialise");
        let header_len = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
        let header = String::from_utf8(good[8..8 + header_len].to_vec()).expect("utf8");
        let mut json: serde_json::Value = serde_json::from_str(&header).expect("json");
        json["__metadata__"][key] = serde_json::Value::String(value.into());
        let mut new_header = serde_json::to_string(&json).expect("json");
        while new_header.len() < header_len {
            new_header.push(' ');
        }
        let mut bytes = (new_header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(new_header.as_bytes());
        bytes.extend_from_slice(&good.split_off(8 + header_len));
        expect_invalid(&bytes, key);
    }
}

#[test]
fn truncated_and_corrupted_files_are_input_errors() {
    let c = sample();
    let bytes = case_bytes(&c).expect("serialise");
    for cut in [0usize, 4, 8, 20, bytes.len() / 2, bytes.len() - 1] {
        match parse_case("cut", &bytes[..cut]) {
            Err(Error::Input { reason, .. }) => assert!(!reason.is_empty()),
            Err(other) => panic!("truncated at {cut}: expected an input error, got {other}"),
            Ok(_) => panic!("truncated at {cut}: accepted"),
        }
    }
    let mut corrupt = bytes.clone();
    corrupt[9] = b'#';
    assert!(matches!(
        parse_case("corrupt", &corrupt),
        Err(Error::Input { .. })
    ));
    let missing = read_case(std::path::Path::new("/nonexistent/case.safetensors"));
    assert!(matches!(missing, Err(Error::Input { .. })));
}
