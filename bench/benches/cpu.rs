//! CPU backend benches (criterion). The GPU numbers come from `deltarule bench` with device timers
//! on the GPU machine; CI only builds these (`cargo bench --no-run`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use deltarule_core::problem::{Mode, Op};
use deltarule_core::{Kernel, Problem};
use deltarule_engine::Engine;
use deltarule_tests::generate::{generate, DataStyle};

fn bench_cpu(c: &mut Criterion) {
    let engine = Engine::cpu_only();
    let Some(cpu) = engine.backend(deltarule_core::BackendKind::Cpu) else {
        return;
    };
    for op in Op::ALL {
        let p = Problem::new(op, Mode::Prefill, 2, 512, 2, 4, 64, 64);
        let case = match generate(&p, &[256, 256], 1, DataStyle::default()) {
            Ok(c) => c,
            Err(e) => panic!("generate: {e}"),
        };
        let mut g = c.benchmark_group(format!("cpu/{}/{}", op.name(), "N2-T512-H2-HV4-K64"));
        g.throughput(Throughput::Elements(512));
        g.sample_size(10);
        for kernel in [Kernel::Chunked, Kernel::Reference] {
            g.bench_function(kernel.name(), |b| {
                b.iter(|| cpu.run(kernel, &case.problem, &case.inputs))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench_cpu);
criterion_main!(benches);
