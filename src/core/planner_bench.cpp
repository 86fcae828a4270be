// planner_bench.cpp — what planning one step costs, and that it does not grow with history.
//
//   decode_256x16_32k    256 contexts × 16 dense layers (hybrid-27b rows) at ~32K tokens:
//                        one decode token each (target: under 100 µs per step)
//   decode_8x30_8k       8 contexts × 30 dense layers (smollm2-135m rows) at ~8K tokens
//   decode_256x16/LEN    the first scenario swept over context lengths 1K → 32K (flatness)
//
// Each benchmark prefills its contexts (untimed), then times plan_step + step_completed for a
// fixed number of decode steps. Counters: heap allocations per step (must be 0), staging copies,
// passes, pages staged and run slides (pages evicted to make room for a new tail) per step.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "activekv/planner.hpp"
#include "activekv/size.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv {
namespace {

constexpr int decode_steps = 1000;

struct Scenario {
  MemoryPlan plan;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<DecisionLog> log;
  std::unique_ptr<BudgetManager> budgets;
  ExactPolicy policy;
  std::unique_ptr<ResidencyPlanner> planner;
  std::vector<ScheduledContext> decode;
};

std::unique_ptr<Scenario> make_scenario(const char* preset, std::uint32_t contexts, std::uint32_t max_context,
                                        std::uint64_t device_pool_bytes, std::uint32_t length) {
  auto s = std::make_unique<Scenario>();
  MemorySettings m;
  m.geometry = find_preset(preset)->geometry;
  m.max_context_tokens = max_context;
  m.max_seqs = contexts;
  m.host_pool_bytes = static_cast<std::uint64_t>(contexts) * m.geometry.dense_layers * max_context * m.geometry.row_bytes();
  m.device_pool_bytes = device_pool_bytes;
  s->plan = make_memory_plan(m).value();
  s->arena = std::make_unique<Arena>(s->plan.arena);
  s->log = std::make_unique<DecisionLog>(1u << 16);
  s->budgets = std::make_unique<BudgetManager>(s->plan, *s->arena, *s->log);
  s->planner = std::make_unique<ResidencyPlanner>(*s->budgets, s->policy);
  std::vector<ScheduledContext> prefill;
  for (std::uint32_t i = 0; i < contexts; ++i) {
    const AdmitResult a = s->budgets->submit(i + 1, max_context);
    AK_ASSERT(a.outcome == AdmitOutcome::admitted, "every benchmark context is admitted");
    s->decode.push_back(ScheduledContext{a.handle, 1});
  }
  for (std::uint32_t done = 0; done < length;) {
    const std::uint32_t chunk = std::min(s->plan.chunk_tokens, length - done);
    prefill.clear();
    for (const ScheduledContext& d : s->decode) prefill.push_back(ScheduledContext{d.context, chunk});
    AK_ASSERT(s->planner->plan_step(prefill) == PlanOutcome::planned, "prefill step planned");
    s->planner->step_completed();
    done += chunk;
  }
  return s;
}

void run_decode(benchmark::State& state, Scenario& s) {
  std::uint64_t copies = 0, passes = 0, staged = 0, resident = 0, slides = 0, steps = 0;
  const std::uint64_t allocations_before = testing::heap_allocations();
  for (auto _ : state) {
    const PlanOutcome outcome = s.planner->plan_step(s.decode);
    s.planner->step_completed();
    benchmark::DoNotOptimize(outcome);
    const StepCounters& c = s.planner->plan().counters;
    copies += c.copies;
    passes += c.passes;
    staged += c.pages_staged;
    resident += c.pages_resident;
    slides += c.pages_evicted;
    ++steps;
  }
  const double n = static_cast<double>(steps);
  state.counters["allocs_per_step"] = static_cast<double>(testing::heap_allocations() - allocations_before) / n;
  state.counters["copies_per_step"] = static_cast<double>(copies) / n;
  state.counters["passes_per_step"] = static_cast<double>(passes) / n;
  state.counters["pages_staged_per_step"] = static_cast<double>(staged) / n;
  state.counters["pages_resident_per_step"] = static_cast<double>(resident) / n;
  state.counters["slides_per_step"] = static_cast<double>(slides) / n;
}

void decode_256x16_32k(benchmark::State& state) {
  auto s = make_scenario("hybrid-27b", 256, 32768, 80 * GiB, 32768 - decode_steps - 16);
  run_decode(state, *s);
}

void decode_8x30_8k(benchmark::State& state) {
  auto s = make_scenario("smollm2-135m", 8, 8192, 1 * GiB, 8192 - decode_steps - 16);
  run_decode(state, *s);
}

void decode_256x16(benchmark::State& state) {
  const auto length = static_cast<std::uint32_t>(state.range(0));
  auto s = make_scenario("hybrid-27b", 256, 32768, 80 * GiB, std::min<std::uint32_t>(length, 32768 - decode_steps - 16));
  run_decode(state, *s);
}

BENCHMARK(decode_256x16_32k)->Iterations(decode_steps)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);
BENCHMARK(decode_8x30_8k)->Iterations(decode_steps)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);
BENCHMARK(decode_256x16)
    ->Arg(1024)->Arg(2048)->Arg(4096)->Arg(8192)->Arg(16384)->Arg(32768)
    ->Iterations(decode_steps)->Repetitions(3)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace activekv

BENCHMARK_MAIN();
