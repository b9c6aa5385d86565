//! Cooperative-matrix emulation for tests (`DELTARULE_WGPU_COOP_EMULATE=1`): the `coop` stages
//! rewritten into plain WGSL, so that their index math, barriers and tile assignment run on an
//! adapter without cooperative matrices (lavapipe in CI), not only on NVIDIA's driver.
//!
//! What the rewrite does to a `coop` stage's source (`Shader::coop`):
//! * the 16 x 16 matrices are spread over the 32 invocations of a subgroup as on hardware:
//!   invocation l (= tid % 32) owns the accumulator elements (2 j + l / 16, l % 16), j < 8, held
//!   as `array<f32, 8>`; its view of an A operand is the 8 rows of those elements
//!   (`array<f32, 128>`), of a B operand their column (`array<f32, 16>`);
//! * `coopLoad` / `coopLoadT` (column- / row-major, as naga reads them: the `T` forms are
//!   row-major) become a generated loader per array and role, f16 operands rounded to f16 (so
//!   the products see the values the tensor cores would);
//! * `coopMultiplyAdd(a, b, c)` becomes each invocation's 8 elements of `c + a b` in f32
//!   (products of f16 values are exact in f32; only the order of the sums differs from the
//!   hardware's): 128 multiply-adds an invocation;
//! * `coopStore` / `coopStoreT` become a generated writer per array: each invocation writes its 8
//!   elements (converted to the array's element type);
//! * f16 accumulators (`coop_mat16x16<f16, C>`, the intra stages' W product) are held
//!   in f32 like f32 ones: their loads round to f16, but the emulation does not round after each
//!   multiply-add as the hardware does (four roundings in a 64-long sum), so it matches the
//!   hardware's logic, not its last bits;
//! * `@builtin(subgroup_id) sg` becomes `sg = tid / 32` (the shaders' subgroups are 32
//!   consecutive invocations, as on NVIDIA, the only adapter that runs them for real), and the
//!   `wgpu_cooperative_matrix` directive is dropped.
//!
//! It checks logic, not the hardware: driver faults such as the wrong products next to 8-byte
//! workgroup variables show only on the real adapter, and so do naga's uniformity rules
//! for matrix operations (the plain-WGSL module has none; tests/coop.rs builds the real SPIR-V
//! of every coop stage for that). The gdn `coop` intra stage needs 48,144 bytes of workgroup
//! memory, more than lavapipe's 32 KiB, so there only the kda `coop` kernel runs (with its f32
//! step 4 intra stage, and the cooperative-matrix state pass, which gdn's kernel shares).

use crate::shaders::Shader;

/// The emulated WGSL of a `coop` stage, or what in its source the rewrite did not understand.
pub fn emulated_source(shader: Shader) -> Result<String, String> {
    emulate_wgsl(&shader.source())
}

/// The rewrite of any module written with 16 x 16 cooperative matrices (the stages, and the
/// probes of tests/coop.rs, which check the emulation against the hardware's semantics).
pub fn emulate_wgsl(source: &str) -> Result<String, String> {
    let src = source.replace("enable wgpu_cooperative_matrix;", "");
    let arrays = array_types(&src);
    let mut loads: Vec<String> = Vec::new();
    let mut stores: Vec<String> = Vec::new();
    let mut out = String::with_capacity(src.len() + 4096);
    let mut rest = src.as_str();
    while let Some(at) = rest.find("coop") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (name, after) = match [
            "coopLoadT<",
            "coopLoad<",
            "coopStoreT(",
            "coopStore(",
            "coopMultiplyAdd(",
        ]
        .iter()
        .find(|p| tail.starts_with(**p))
        {
            Some(p) => (*p, &tail[p.len()..]),
            None => {
                // another identifier that starts with "coop" (comments, `s_cw`-like names)
                out.push_str("coop");
                rest = &tail[4..];
                continue;
            }
        };
        match name {
            "coopLoadT<" | "coopLoad<" => {
                // coopLoad[T]<coop_mat16x16<ELEM, ROLE>>(&ARRAY[INDEX], STRIDE)
                let (targ, after) = balanced(after, '<', '>', 1)?;
                let Some(params) = targ
                    .strip_prefix("coop_mat16x16<")
                    .and_then(|t| t.strip_suffix('>'))
                else {
                    return Err(format!("matrix type `{targ}`"));
                };
                let (elem, role) = params
                    .split_once(',')
                    .map(|(e, r)| (e.trim(), r.trim()))
                    .ok_or_else(|| format!("matrix type `{targ}`"))?;
                let half = match elem {
                    "f16" => true,
                    "f32" => false,
                    _ => return Err(format!("matrix element type `{elem}`")),
                };
                let role = match role {
                    "A" => "a",
                    "B" => "b",
                    "C" => "c",
                    _ => return Err(format!("matrix role `{role}`")),
                };
                let (args, after) = call_args(after)?;
                let [ptr, stride] = two(&args, "coopLoad")?;
                let (array, index) = element_pointer(ptr)?;
                need(&arrays, array)?;
                let key = format!("{role}_{array}");
                if !loads.contains(&key) {
                    loads.push(key.clone());
                }
                let rm = name == "coopLoadT<";
                out.push_str(&format!("ce_ld{key}({index}, {stride}, {rm}, {half})"));
                rest = after;
            }
            "coopStoreT(" | "coopStore(" => {
                let (args, after) = call_args_open(after)?;
                if args.len() != 3 {
                    return Err(format!("coopStore with {} arguments", args.len()));
                }
                let (array, index) = element_pointer(&args[1])?;
                need(&arrays, array)?;
                if !stores.iter().any(|a| a == array) {
                    stores.push(array.to_string());
                }
                let rm = name == "coopStoreT(";
                out.push_str(&format!(
                    "ce_st_{array}({}, {index}, {}, {rm})",
                    args[0], args[2]
                ));
                rest = after;
            }
            _ => {
                out.push_str("ce_mad(");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    // declared matrices (`var acc: coop_mat16x16<f32, C>;`, zero like their emulation)
    let out = out
        .replace("coop_mat16x16<f32, C>", "array<f32, 8>")
        .replace("coop_mat16x16<f16, C>", "array<f32, 8>")
        .replace("coop_mat16x16<f16, A>", "array<f32, 128>")
        .replace("coop_mat16x16<f16, B>", "array<f32, 16>");
    if out.contains("coop_mat16x16<") {
        return Err("a matrix type other than f32 or f16 C, f16 A, f16 B".into());
    }
    let out = entry_point(out)?;
    let mut helpers = String::from(MAD);
    for key in &loads {
        let (role, array) = key.split_at(1);
        let array = &array[1..];
        let text = match role {
            "a" => LOAD_A,
            "b" => LOAD_B,
            _ => LOAD_C,
        };
        helpers.push_str(&text.replace("NAME", array));
    }
    for a in &stores {
        let elem = arrays
            .iter()
            .find(|(n, _)| n == a)
            .map(|(_, t)| t.as_str())
            .unwrap_or("f32");
        helpers.push_str(&STORE.replace("NAME", a).replace("ELEM", elem));
    }
    Ok(format!("{out}\n{helpers}"))
}

const MAD: &str = "
// cooperative-matrix emulation (backends/wgpu/src/emulate.rs): invocation l = tid % 32 of a
// subgroup owns the elements (2 j + l / 16, l % 16), j < 8
var<private> ce_lane: u32;

// Offset of element (r, c) of a tile at stride `stride` (row-major if `rm`).
fn ce_at(r: u32, c: u32, stride: u32, rm: bool) -> u32 {
    return select(c * stride + r, r * stride + c, rm);
}

fn ce_mad(a: array<f32, 128>, b: array<f32, 16>, c: array<f32, 8>) -> array<f32, 8> {
    var d = c;
    for (var j = 0u; j < 8u; j++) {
        var s = d[j];
        for (var k = 0u; k < 16u; k++) {
            s += a[j * 16u + k] * b[k];
        }
        d[j] = s;
    }
    return d;
}
";

// A operand: the 8 rows 2 j + l / 16 of this invocation's elements.
const LOAD_A: &str = "
fn ce_lda_NAME(off: u32, stride: u32, rm: bool, half: bool) -> array<f32, 128> {
    var m: array<f32, 128>;
    for (var e = 0u; e < 128u; e++) {
        let r = 2u * (e / 16u) + (ce_lane / 16u) % 2u;
        var x = f32(NAME[off + ce_at(r, e % 16u, stride, rm)]);
        if (half) {
            x = f32(f16(x));
        }
        m[e] = x;
    }
    return m;
}
";

// B operand: column l % 16.
const LOAD_B: &str = "
fn ce_ldb_NAME(off: u32, stride: u32, rm: bool, half: bool) -> array<f32, 16> {
    var m: array<f32, 16>;
    for (var k = 0u; k < 16u; k++) {
        var x = f32(NAME[off + ce_at(k, ce_lane % 16u, stride, rm)]);
        if (half) {
            x = f32(f16(x));
        }
        m[k] = x;
    }
    return m;
}
";

// Accumulator: this invocation's 8 elements.
const LOAD_C: &str = "
fn ce_ldc_NAME(off: u32, stride: u32, rm: bool, half: bool) -> array<f32, 8> {
    var m: array<f32, 8>;
    for (var j = 0u; j < 8u; j++) {
        let r = 2u * j + (ce_lane / 16u) % 2u;
        var x = f32(NAME[off + ce_at(r, ce_lane % 16u, stride, rm)]);
        if (half) {
            x = f32(f16(x));
        }
        m[j] = x;
    }
    return m;
}
";

const STORE: &str = "
fn ce_st_NAME(m: array<f32, 8>, off: u32, stride: u32, rm: bool) {
    for (var j = 0u; j < 8u; j++) {
        let r = 2u * j + (ce_lane / 16u) % 2u;
        NAME[off + ce_at(r, ce_lane % 16u, stride, rm)] = ELEM(m[j]);
    }
}
";

/// (name, element type) of every `var<...> NAME: array<f16|f32...` in the module.
fn array_types(src: &str) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for line in src.lines() {
        let l = line.trim_start();
        if !l.starts_with("var<") && !l.starts_with("@group") {
            continue;
        }
        let Some(var) = l.find("var<") else { continue };
        let Some(close) = l[var..].find('>') else {
            continue;
        };
        let decl = &l[var + close + 1..];
        let Some((name, ty)) = decl.split_once(':') else {
            continue;
        };
        let ty = ty.trim_start();
        for elem in ["f16", "f32"] {
            if ty.starts_with(&format!("array<{elem}")) {
                v.push((name.trim().to_string(), elem.to_string()));
            }
        }
    }
    v
}

fn need(arrays: &[(String, String)], name: &str) -> Result<(), String> {
    if arrays.iter().any(|(n, _)| n == name) {
        Ok(())
    } else {
        Err(format!("`{name}` is not an f16/f32 array of the module"))
    }
}

/// The text up to the bracket that closes `depth` open ones, and what follows it.
fn balanced(s: &str, open: char, close: char, mut depth: usize) -> Result<(&str, &str), String> {
    for (i, ch) in s.char_indices() {
        if ch == open {
            depth += 1;
        } else if ch == close {
            depth -= 1;
            if depth == 0 {
                return Ok((&s[..i], &s[i + 1..]));
            }
        }
    }
    Err(format!(
        "unbalanced `{open}` in `{}`",
        &s[..s.len().min(60)]
    ))
}

/// `(a, b, ...)` at the start of `s`: the top-level arguments and what follows the `)`.
fn call_args(s: &str) -> Result<(Vec<String>, &str), String> {
    let s = s.trim_start();
    let Some(inner) = s.strip_prefix('(') else {
        return Err(format!("no argument list at `{}`", &s[..s.len().min(40)]));
    };
    call_args_open(inner)
}

/// The arguments after an opening `(` already consumed.
fn call_args_open(s: &str) -> Result<(Vec<String>, &str), String> {
    let (inner, after) = balanced(s, '(', ')', 1)?;
    let mut args = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, ch) in inner.char_indices() {
        match ch {
            '(' | '[' | '<' => depth += 1,
            ')' | ']' | '>' => depth -= 1,
            ',' if depth == 0 => {
                args.push(inner[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = inner[start..].trim();
    if !last.is_empty() {
        args.push(last.to_string());
    }
    Ok((args, after))
}

fn two<'a>(args: &'a [String], what: &str) -> Result<[&'a str; 2], String> {
    match args {
        [a, b] => Ok([a.as_str(), b.as_str()]),
        _ => Err(format!("{what} with {} arguments", args.len())),
    }
}

/// `&NAME[INDEX]` -> (NAME, INDEX).
fn element_pointer(p: &str) -> Result<(&str, &str), String> {
    let p = p.trim();
    let q = p
        .strip_prefix('&')
        .ok_or_else(|| format!("pointer `{p}` is not `&array[index]`"))?;
    let open = q
        .find('[')
        .ok_or_else(|| format!("pointer `{p}` is not `&array[index]`"))?;
    let inner = q[open + 1..]
        .strip_suffix(']')
        .ok_or_else(|| format!("pointer `{p}` is not `&array[index]`"))?;
    Ok((q[..open].trim(), inner.trim()))
}

/// Opens the entry point with `ce_lane = tid % 32u;` (tid: its `local_invocation_index`
/// parameter) and replaces a `@builtin(subgroup_id) sg: u32` parameter by `let sg = tid / 32u;`.
fn entry_point(src: String) -> Result<String, String> {
    let lii = "@builtin(local_invocation_index)";
    let t = src.find(lii).ok_or("no local_invocation_index parameter")?;
    let tid = src[t + lii.len()..]
        .split(':')
        .next()
        .map(str::trim)
        .ok_or("local_invocation_index parameter without a name")?
        .to_string();
    let Some(b) = src.find("@builtin(subgroup_id)") else {
        let mut s = src;
        let body = s[t..].find('{').ok_or("entry point without a body")? + t;
        s.insert_str(body + 1, &format!("\n    ce_lane = {tid} % 32u;"));
        return Ok(s);
    };
    let from = b + "@builtin(subgroup_id)".len();
    let decl_end = src[from..]
        .find([',', ')'])
        .map(|i| i + from - b)
        .ok_or("subgroup_id parameter without an end")?;
    let decl = &src[b..b + decl_end];
    let name = decl["@builtin(subgroup_id)".len()..]
        .split(':')
        .next()
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or("subgroup_id parameter without a name")?
        .to_string();
    // drop the parameter (and its comma), then open the body with the derived id
    let cut_end = if src[b + decl_end..].starts_with(',') {
        b + decl_end + 1
    } else {
        b + decl_end
    };
    let mut s = format!("{}{}", &src[..b], &src[cut_end..]);
    let body = s[b..].find('{').ok_or("entry point without a body")? + b;
    s.insert_str(
        body + 1,
        &format!("\n    ce_lane = {tid} % 32u;\n    let {name} = {tid} / 32u;"),
    );
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coop_stage_rewrites_and_validates_without_cooperative_matrices() {
        for s in Shader::ALL.into_iter().filter(|s| s.coop()) {
            let src = emulated_source(s).unwrap_or_else(|e| panic!("{}: {e}", s.name()));
            for call in [
                "coop_mat16x16<",
                "coopLoad<",
                "coopLoadT<",
                "coopStore(",
                "coopStoreT(",
                "coopMultiplyAdd(",
            ] {
                assert!(!src.contains(call), "{}: `{call}` is left", s.name());
            }
            let module = naga::front::wgsl::parse_str(&src)
                .unwrap_or_else(|e| panic!("{}: {}", s.name(), e.emit_to_string(&src)));
            let caps = naga::valid::Capabilities::SHADER_FLOAT16;
            naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
                .validate(&module)
                .unwrap_or_else(|e| panic!("{}: {}", s.name(), e.emit_to_string(&src)));
        }
    }

    #[test]
    fn pointer_and_argument_parsing() {
        assert_eq!(
            element_pointer("&s_c[16u * wi + 3u]"),
            Ok(("s_c", "16u * wi + 3u"))
        );
        assert!(element_pointer("s_c[0]").is_err());
        let (a, rest) = call_args("(x, f(a, b), &y[min(i, j)]) tail").expect("parses");
        assert_eq!(a, vec!["x", "f(a, b)", "&y[min(i, j)]"]);
        assert_eq!(rest, " tail");
    }
}
