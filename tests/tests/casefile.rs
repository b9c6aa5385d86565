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

/// A file from a raw JSON header and data.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("deltarule-casefile-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d.join(name)
}

fn input_reason(r: deltarule_core::Result<deltarule_tests::casefile::Case>) -> String {
    match r {
        Err(Error::Input { reason, .. }) => reason,
        Err(other) => panic!("expected an input error, got {other}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn non_regular_files_are_refused_without_reading_them() {
    let dir = scratch("a-directory");
    std::fs::create_dir_all(&dir).expect("dir");
    for p in [std::path::Path::new("/dev/zero"), dir.as_path()] {
        let reason = input_reason(read_case(p));
        assert!(
            reason.contains("not a regular file"),
            "{}: {reason}",
            p.display()
        );
    }
    let fifo = scratch("fifo.safetensors");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        // opening a FIFO without a writer blocks: the reader must refuse it before opening
        let reason = input_reason(read_case(&fifo));
        assert!(reason.contains("not a regular file"), "{reason}");
    }
}

#[test]
fn a_sparse_file_with_an_empty_header_is_refused_before_its_data_is_read() {
    let path = scratch("sparse.safetensors");
    std::fs::write(&path, raw_file("{}", b"")).expect("write");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(2_000_000_000).expect("sparse length");
    let t0 = std::time::Instant::now();
    let reason = input_reason(read_case(&path));
    assert!(reason.contains("declares 0 bytes"), "{reason}");
    assert!(t0.elapsed().as_secs_f64() < 1.0, "{:?}", t0.elapsed());
    let _ = std::fs::remove_file(&path);
    let reason = input_reason(parse_case("huge", &raw_file("{}", b"")[..5]));
    assert!(reason.contains("8-byte header length"), "{reason}");
    let mut lying = 1u64.to_le_bytes().to_vec();
    lying[7] = 0x7f;
    let reason = input_reason(parse_case("lying", &lying));
    assert!(reason.contains("header of"), "{reason}");
}

#[test]
fn duplicate_metadata_keys_and_tensor_names_are_named() {
    let good = case_bytes(&sample()).expect("serialise");
    let n = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
    let header = String::from_utf8(good[8..8 + n].to_vec()).expect("utf8");
    let data = &good[8 + n..];
    let dup_meta = header.replacen(
        "\"__metadata__\":{",
        "\"__metadata__\":{\"gate\":\"softplus\",",
        1,
    );
    assert_ne!(dup_meta, header, "the header has metadata");
    match parse_case("dup", &raw_file(&dup_meta, data)) {
        Err(Error::InvalidArgument { field, got, .. }) => {
            assert_eq!(field, "metadata `gate`");
            assert!(got.contains("duplicate"), "{got}");
        }
        other => panic!("expected a duplicate-key error, got {other:?}"),
    }
    let json: serde_json::Value = serde_json::from_str(&header).expect("json");
    let q = json["q"].to_string();
    let dup_tensor = header.replacen('{', &format!("{{\"q\":{q},"), 1);
    match parse_case("dupq", &raw_file(&dup_tensor, data)) {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "tensor `q`"),
        other => panic!("expected a duplicate-tensor error, got {other:?}"),
    }
}

#[test]
fn a_tensor_whose_offsets_do_not_match_its_shape_is_named() {
    let header = r#"{"__metadata__":{"op":"gdn"},"q":{"dtype":"F32","shape":[2,1,16],"data_offsets":[0,64]}}"#;
    match parse_case("short", &raw_file(header, &[0u8; 64])) {
        Err(Error::InvalidArgument {
            field, expected, ..
        }) => {
            assert_eq!(field, "tensor `q`");
            assert!(expected.contains("128 bytes"), "{expected}");
        }
        other => panic!("expected a shape error naming q, got {other:?}"),
    }
}

/// A case of T = 0 with `heads` q/k and value heads: every tensor but cu_seqlens is empty.
fn zero_token_header(heads: usize) -> Vec<u8> {
    let e = |shape: &str, dtype: &str| {
        format!(r#"{{"dtype":"{dtype}","shape":{shape},"data_offsets":[0,0]}}"#)
    };
    let hk = format!("[0,{heads},64]");
    let hv = format!("[0,{heads}]");
    let header = format!(
        r#"{{"__metadata__":{{"op":"gdn"}},"q":{},"k":{},"v":{},"g":{},"beta":{},"cu_seqlens":{{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}}}"#,
        e(&hk, "BF16"),
        e(&hk, "BF16"),
        e(&hk, "BF16"),
        e(&hv, "F32"),
        e(&hv, "F32"),
    );
    raw_file(&header, &[0u8; 16])
}

#[test]
fn zero_token_cases_with_absurd_head_counts_are_refused_by_the_cap() {
    use deltarule_tests::casefile::parse_case_with_limit;
    use deltarule_tests::limits::{ByteCap, CapSource};
    let cap = ByteCap {
        bytes: 1 << 30,
        source: CapSource::Fallback,
    };
    let bytes = zero_token_header(1 << 20);
    assert!(bytes.len() < 1000, "a small file: {}", bytes.len());
    match parse_case_with_limit("heads", &bytes, &cap) {
        Err(Error::InvalidArgument { field, got, .. }) => {
            assert_eq!(field, "memory");
            assert!(got.contains("GiB"), "{got}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let path = scratch("heads.safetensors");
    std::fs::write(&path, &bytes).expect("write");
    let e = deltarule_tests::casefile::read_case_with_limit(&path, &cap).expect_err("refused");
    assert!(e.to_string().contains("--max-bytes"), "{e}");
    let small = parse_case_with_limit("small", &zero_token_header(2), &cap).expect("small");
    assert_eq!(small.problem.hv, 2);
}

#[test]
fn expected_tensors_of_the_wrong_shape_are_input_errors_naming_them() {
    let mut c = sample();
    let o = c.expected.o.clone().expect("expected_o");
    let mut shape = o.shape.clone();
    shape[2] += 1;
    let n: usize = shape.iter().product();
    c.expected.o = Some(deltarule_core::HostTensor::from_f64(
        DType::F32,
        shape,
        &vec![0.0; n],
    ));
    expect_invalid(&case_bytes(&c).expect("serialise"), "expected_o");
    let mut c = sample();
    let s = c.expected.final_state.clone().expect("final");
    c.expected.final_state = Some(deltarule_core::HostTensor::from_f64(
        s.dtype(),
        vec![1, 1, 1, 1],
        &[0.0],
    ));
    expect_invalid(&case_bytes(&c).expect("serialise"), "expected_final_state");
    let mut c = sample();
    c.expected.checkpoints = Some(deltarule_core::HostTensor::from_f64(
        DType::F32,
        vec![1, 2, 16, 32],
        &[0.0; 1024],
    ));
    expect_invalid(&case_bytes(&c).expect("serialise"), "expected_checkpoints");
}

#[test]
fn writes_are_atomic_and_failures_say_cannot_write() {
    use deltarule_tests::casefile::write_atomic;
    let path = scratch("atomic.bin");
    std::fs::write(&path, b"old").expect("write");
    write_atomic(&path, b"new contents").expect("write");
    assert_eq!(std::fs::read(&path).expect("read"), b"new contents");
    let dir = path.parent().expect("dir");
    let leftovers: Vec<_> = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // a folder in the way: the rename fails, the temporary file goes
    let blocked = scratch("blocked");
    std::fs::create_dir_all(blocked.join("inside")).expect("dir");
    match write_atomic(&blocked, b"x") {
        Err(e @ Error::Output { .. }) => assert!(e.to_string().starts_with("cannot write"), "{e}"),
        other => panic!("expected an output error, got {other:?}"),
    }
    assert!(!scratch(&format!(".blocked.{}.tmp", std::process::id())).exists());
    let e = write_atomic(std::path::Path::new("/no/such/dir/x.safetensors"), b"x")
        .expect_err("no folder");
    assert!(e.to_string().starts_with("cannot write"), "{e}");
}

#[test]
fn offsets_spanning_the_whole_i64_range_with_checkpoints_are_an_input_error_not_a_panic() {
    let mut p = Problem::new(Op::Gdn, Mode::Prefill, 1, 1, 1, 1, 16, 16);
    p.checkpoint_every = Some(2);
    let mut c = generate(&p, &[4, 2], 1, DataStyle::default()).expect("generate");
    c.inputs.cu_seqlens =
        deltarule_core::HostTensor::from_i64(DType::I64, vec![3], &[i64::MIN, i64::MAX, i64::MAX]);
    let bytes = case_bytes(&c).expect("serialise");
    // the reader reads the file; the offsets are refused by the input checks, naming them
    let case = parse_case("wide_offsets", &bytes).expect("a readable file");
    let e = deltarule_core::problem::validate_inputs(&case.problem, &case.inputs)
        .expect_err("offsets refused");
    assert!(e.to_string().contains("cu_seqlens"), "{e}");
}

/// `bytes` with metadata `key` set to `value` (the header rewritten, the data kept).
fn with_metadata(mut bytes: Vec<u8>, key: &str, value: &str) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("json");
    json["__metadata__"][key] = serde_json::Value::String(value.into());
    let header = serde_json::to_string(&json).expect("json");
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&bytes.split_off(8 + n));
    out
}

fn with_observed(label: &str) -> deltarule_tests::casefile::Case {
    let mut c = sample();
    let e = c.expected.clone();
    c.expected.observed = Some(deltarule_tests::casefile::Observed {
        label: label.into(),
        o: e.o.map(|o| o.cast(DType::BF16)),
        final_state: e.final_state,
        checkpoints: e.checkpoints,
    });
    c
}

#[test]
fn observed_outputs_round_trip_with_their_label() {
    let c = with_observed("fla-chunk h100");
    let bytes = case_bytes(&c).expect("serialise");
    let back = parse_case(&c.name, &bytes).expect("parse");
    assert_eq!(back.expected, c.expected);
    assert_eq!(
        back.metadata.get("observed").map(String::as_str),
        Some("fla-chunk h100")
    );
    let ob = back.expected.observed.as_ref().expect("observed");
    assert_eq!(ob.o.as_ref().map(|t| t.dtype()), Some(DType::BF16));
    assert!(!back.expected.is_empty());
    // without the metadata key the label is `observed`
    let mut json_bytes = bytes.clone();
    let n = u64::from_le_bytes(json_bytes[..8].try_into().expect("8")) as usize;
    let mut json: serde_json::Value = serde_json::from_slice(&json_bytes[8..8 + n]).expect("json");
    json["__metadata__"]
        .as_object_mut()
        .expect("metadata")
        .remove("observed");
    let header = serde_json::to_string(&json).expect("json");
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&json_bytes.split_off(8 + n));
    let back = parse_case("x", &out).expect("parse");
    assert_eq!(
        back.expected.observed.map(|o| o.label),
        Some(deltarule_tests::casefile::DEFAULT_OBSERVED_LABEL.to_string())
    );
    // a case without observed outputs writes no label
    let plain = parse_case("y", &case_bytes(&sample()).expect("serialise")).expect("parse");
    assert!(plain.expected.observed.is_none() && !plain.metadata.contains_key("observed"));
}

#[test]
fn malformed_observed_outputs_are_named() {
    // a label naming nothing
    let bytes = with_metadata(case_bytes(&sample()).expect("serialise"), "observed", "x");
    expect_invalid(&bytes, "observed");
    // labels that are not short printable text
    let good = case_bytes(&with_observed("ok")).expect("serialise");
    for label in ["", " padded", "a\u{7}bell", &"x".repeat(41)] {
        expect_invalid(&with_metadata(good.clone(), "observed", label), "observed");
    }
    // shapes and dtypes
    let mut c = with_observed("shape");
    if let Some(ob) = c.expected.observed.as_mut() {
        ob.o = Some(deltarule_core::HostTensor::from_f64(
            DType::F32,
            vec![1, 2, 3],
            &[0.0; 6],
        ));
    }
    expect_invalid(&case_bytes(&c).expect("serialise"), "observed.o");
    let mut c = with_observed("dtype");
    if let Some(ob) = c.expected.observed.as_mut() {
        let s = ob.final_state.clone().expect("final");
        ob.final_state = Some(s.cast(DType::I32));
    }
    expect_invalid(&case_bytes(&c).expect("serialise"), "observed.final_state");
    let mut c = with_observed("ckpt");
    if let Some(ob) = c.expected.observed.as_mut() {
        ob.checkpoints = Some(deltarule_core::HostTensor::from_f64(
            DType::F32,
            vec![1, 2, 16, 32],
            &[0.0; 1024],
        ));
    }
    expect_invalid(&case_bytes(&c).expect("serialise"), "observed.checkpoints");
    // writing refuses a label the reader would refuse
    assert!(case_bytes(&with_observed("tab\there")).is_err());
}
