//! Writes the SPIR-V of the cooperative-matrix stages (as `Gpu` builds it) for `spirv-val`:
//! `cargo run -p deltarule-wgpu --example coop_spv -- DIR`.
use deltarule_wgpu::coop::build;
use deltarule_wgpu::shaders::Shader;

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| ".".into());
    for s in Shader::ALL.into_iter().filter(|s| s.coop()) {
        for (k, v) in [(64.0, 64.0), (128.0, 128.0)] {
            match build(s, &[("HEAD_K", k), ("HEAD_V", v)], false) {
                Ok(m) => {
                    let bytes: Vec<u8> = m.words.iter().flat_map(|w| w.to_le_bytes()).collect();
                    let path = format!("{dir}/{}-{k}x{v}.spv", s.file_name());
                    if let Err(e) = std::fs::write(&path, bytes) {
                        eprintln!("{path}: {e}");
                        std::process::exit(1);
                    }
                    println!("{path}");
                }
                Err(e) => {
                    eprintln!("{}: {e}", s.file_name());
                    std::process::exit(1);
                }
            }
        }
    }
}
