//! Time per iteration of the MLP workload, every style at every study size, on the CPU, in a
//! process set up as a trial's worker is (allocator, freed memory kept, subnormals flushed).
//! Compare with `bench/torch_mlp.py STYLE SIZE` on the same machine.
//!
//! `cargo bench --bench mlp` (all), `cargo bench --bench mlp -- small` (a filter). The
//! throughput criterion prints as "elem/s" is FLOP/s (`flops_per_iteration`).

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use edgebench::workloads::mlp::{flops_per_iteration, Mlp, MlpSize, Style, LEARNING_RATE};
use std::time::Duration;

#[global_allocator]
static ALLOC: edgebench::train::HugePageAlloc = edgebench::train::HugePageAlloc;

fn mlp_steps(c: &mut Criterion) {
    edgebench::train::prepare_training_process();
    for name in ["small", "medium", "large"] {
        let size = MlpSize::parse(name).expect("a study size");
        let mut group = c.benchmark_group(format!("mlp/{name}"));
        // A large step is most of a second: few samples, each one iteration or a few.
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5))
            .throughput(Throughput::Elements(flops_per_iteration(&size)));
        for style in Style::ALL {
            group.bench_function(BenchmarkId::from_parameter(style), |b| {
                let mut mlp = Mlp::new(style, &size, 0, LEARNING_RATE, &candle_core::Device::Cpu)
                    .expect("the model fits in memory");
                b.iter(|| mlp.step().expect("an iteration"));
            });
        }
        group.finish();
    }
}

criterion_group!(benches, mlp_steps);
criterion_main!(benches);
