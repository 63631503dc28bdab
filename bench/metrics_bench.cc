// Recording overhead of pdserve's metric sets (what a step / token / request
// pays), serialising a full registry (what a scrape costs the process), and
// the copy probe's measured bandwidth as a function of threads.
//   build/bench/metrics_bench [--benchmark_filter=...]
#include <memory>

#include "benchmark/benchmark.h"
#include "common/metrics/bandwidth_probe.h"
#include "common/metrics/engine_metrics.h"
#include "common/metrics/frontend_metrics.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/scheduler_metrics.h"

namespace pdserve::metrics {
namespace {

void BM_EngineRecordStep(benchmark::State& state) {
  auto engine = EngineMetrics::Create(
      NewRegistry(), {.peak_bandwidth_bytes_per_second = 1e11});
  StepStats step;
  step.kind = StepKind::kDecode;
  step.duration_seconds = 0.01;
  step.decode_tokens = 16;
  step.batch_size = 16;
  step.weight_bytes_read = 100'000'000;
  step.kv_bytes_read = 5'000'000;
  step.kv_bytes_written = 100'000;
  step.flops = 4e9;
  for (auto _ : state) {
    benchmark::DoNotOptimize((*engine)->RecordStep(step));
  }
}
BENCHMARK(BM_EngineRecordStep);

void BM_EngineRecordPool(benchmark::State& state) {
  auto engine = EngineMetrics::Create(NewRegistry(), {});
  PoolStats pool;
  pool.capacity_tokens = 65536;
  pool.used_tokens = 1000;
  pool.page_size_tokens = 16;
  pool.total_pages = 4096;
  pool.used_pages = 70;
  for (auto _ : state) {
    benchmark::DoNotOptimize((*engine)->RecordPool(pool));
  }
}
BENCHMARK(BM_EngineRecordPool);

void BM_FrontendInterToken(benchmark::State& state) {
  auto fe = FrontendMetrics::Create(NewRegistry());
  for (auto _ : state) (*fe)->ObserveInterTokenLatency(0.012);
}
BENCHMARK(BM_FrontendInterToken)->Threads(1)->Threads(2);

void BM_FrontendRecordRequest(benchmark::State& state) {
  auto fe = FrontendMetrics::Create(NewRegistry());
  RequestStats r;
  r.ttft_seconds = 0.1;
  r.e2e_seconds = 1.0;
  r.queue_seconds = 0.01;
  r.prefill_seconds = 0.09;
  r.decode_seconds = 0.9;
  r.prompt_tokens = 100;
  r.generated_tokens = 64;
  r.finish_reason = "stop";
  for (auto _ : state) {
    (*fe)->RecordRequestStart();
    benchmark::DoNotOptimize((*fe)->RecordRequest(r));
  }
}
BENCHMARK(BM_FrontendRecordRequest);

// What one scrape of a process holding all three sets costs to serialise.
void BM_SerializeAllSets(benchmark::State& state) {
  auto registry = NewRegistry();
  RegisterProcessMetrics(*registry, "serve");
  auto e = EngineMetrics::Create(registry, {.vllm_compat = true});
  auto s = SchedulerMetrics::Create(registry, {.vllm_compat = true});
  auto f = FrontendMetrics::Create(registry);
  size_t bytes = 0;
  for (auto _ : state) {
    bytes = SerializeText(*registry).size();
    benchmark::DoNotOptimize(bytes);
  }
  state.counters["page_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_SerializeAllSets)->Unit(benchmark::kMicrosecond);

// The start-up probe itself: reports the measured GB/s per thread count.
void BM_CopyProbe(benchmark::State& state) {
  double best = 0.0;
  for (auto _ : state) {
    auto r =
        MeasureHostCopyBandwidth({.buffer_bytes = 0,
                                  .reps = 3,
                                  .threads = static_cast<int>(state.range(0))});
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    best = r->bytes_per_second;
  }
  state.counters["GB_per_s"] = best / 1e9;
}
BENCHMARK(BM_CopyProbe)
    ->Arg(1)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pdserve::metrics
