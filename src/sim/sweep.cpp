// sweep.cpp — walking N contexts through the lengths on the real core, and stock beside them.
#include "sim/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "sim/core_instance.hpp"
#include "sim/step_schedule.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::sim {

const CellResult* SweepResult::find(Variant variant, std::uint32_t concurrency,
                                    std::uint32_t context_tokens) const noexcept {
  for (const CellResult& cell : cells) {
    if (cell.variant == variant && cell.concurrency == concurrency && cell.context_tokens == context_tokens) return &cell;
  }
  return nullptr;
}

double stock_step_seconds(const Scenario& scenario, std::uint32_t concurrency, std::uint32_t context_tokens) {
  const CostModel cost = make_cost_model(scenario.card, scenario.model);
  Timeline timeline(cost, 1);
  std::vector<LayerWork> work(static_cast<std::size_t>(concurrency) * scenario.geometry.dense_layers);
  for (LayerWork& w : work) w.resident_bytes = static_cast<std::uint64_t>(context_tokens) * scenario.geometry.row_bytes();
  const StepShape shape{concurrency, scenario.geometry.dense_layers, scenario.tile_tokens, scenario.geometry.row_bytes()};
  return schedule_step(timeline, shape, work, 0.0).seconds();
}

namespace {

struct Measured {
  double seconds = 0.0;
  double h2d_bytes = 0.0, d2d_bytes = 0.0, resident_bytes = 0.0;
  double h2d_busy = 0.0, compute_busy = 0.0, stall = 0.0;
  std::uint64_t heap_allocations = 0;
  std::uint32_t steps = 0;
};

// Everything one (variant, concurrency) walk needs, sized once.
struct Walk {
  CoreInstance& core;
  Timeline timeline;
  std::vector<ScheduledContext> scheduled;
  std::vector<LayerWork> work;
  double now = 0.0;
  std::uint32_t length = 0;

  Walk(CoreInstance& instance, const CostModel& cost, std::uint32_t n)
      : core(instance), timeline(cost, instance.plan().arena.tiles), scheduled(n),
        work(static_cast<std::size_t>(n) * instance.plan().geometry.dense_layers) {}

  void plan(std::uint32_t tokens) {
    for (ScheduledContext& s : scheduled) s.tokens_appended = tokens;
    const PlanOutcome outcome = core.planner().plan_step(scheduled);
    AK_ASSERT(outcome == PlanOutcome::planned, "the sweep schedules only steps the core can plan");
    length += tokens;
  }

  void prefill_to(std::uint32_t target, std::uint32_t chunk) {
    while (length < target) {
      plan(std::min(chunk, target - length));
      core.planner().step_completed();
    }
  }

  // One decode step, planned, translated and scheduled; adds to `m` when measuring.
  void decode(Measured* m) {
    const std::uint64_t allocations_before = testing::heap_allocations();
    plan(1);
    const TranslateCounters moved = core.translate(work);
    const StepTiming t = schedule_step(timeline, core.shape(static_cast<std::uint32_t>(scheduled.size())), work, now);
    core.planner().step_completed();
    now = t.end_seconds;
    if (m == nullptr) return;
    m->heap_allocations += testing::heap_allocations() - allocations_before;
    m->seconds += t.seconds();
    m->h2d_bytes += static_cast<double>(moved.host_bytes);
    m->d2d_bytes += static_cast<double>(moved.retained_bytes);
    m->h2d_busy += t.h2d_busy_seconds;
    m->compute_busy += t.compute_busy_seconds;
    m->stall += t.stall_seconds;
    double resident = 0.0;
    for (const LayerWork& w : work) resident += static_cast<double>(w.resident_bytes);
    m->resident_bytes += resident;
    ++m->steps;
  }
};

CellResult cell_from(Variant variant, std::uint32_t n, std::uint32_t length, const Measured& m) {
  CellResult cell;
  cell.variant = variant;
  cell.concurrency = n;
  cell.context_tokens = length;
  cell.ran = true;
  const double steps = m.steps;
  cell.itl_seconds = m.seconds / steps;
  cell.h2d_bytes_per_step = m.h2d_bytes / steps;
  cell.d2d_bytes_per_step = m.d2d_bytes / steps;
  cell.resident_bytes_per_step = m.resident_bytes / steps;
  cell.h2d_busy_seconds = m.h2d_busy / steps;
  cell.compute_busy_seconds = m.compute_busy / steps;
  cell.stall_seconds = m.stall / steps;
  cell.heap_allocations = m.heap_allocations;
  return cell;
}

// Measurement points: the sweep's lengths (full measurement) and the probes (one step).
struct Point {
  std::uint32_t tokens;
  bool sweep;
};

std::vector<Point> points_for(const Scenario& s, const SweepOptions& options) {
  std::vector<Point> points;
  for (std::uint32_t length : s.context_tokens) points.push_back({length, true});
  if (options.probes) {
    const std::uint32_t step = options.probe_tokens != 0 ? options.probe_tokens : s.max_context_tokens / 32;
    for (std::uint32_t t = step; t <= s.max_context_tokens; t += step) {
      if (std::find(s.context_tokens.begin(), s.context_tokens.end(), t) == s.context_tokens.end()) {
        points.push_back({t, false});
      }
    }
  }
  std::sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.tokens < b.tokens; });
  return points;
}

Status run_walk(const Scenario& s, Variant variant, std::uint32_t n, const std::vector<Point>& points,
                SweepResult& result, Crossover& crossover) {
  Result<std::unique_ptr<CoreInstance>> made = CoreInstance::create(s, variant);
  if (!made) return made.error();
  CoreInstance& core = *made.value();
  const CostModel cost = make_cost_model(s.card, s.model);
  Walk walk(core, cost, n);
  std::string refused;
  for (std::uint32_t i = 0; i < n; ++i) {
    const AdmitResult admitted = core.budgets().submit(i + 1, s.max_context_tokens);
    if (admitted.outcome != AdmitOutcome::admitted) {
      refused = std::string("the core did not admit context ") + std::to_string(i + 1) + ": " + reason_text(admitted.reason);
      break;
    }
    walk.scheduled[i].context = admitted.handle;
  }
  if (!refused.empty()) {
    for (std::uint32_t length : s.context_tokens) {
      CellResult cell;
      cell.variant = variant;
      cell.concurrency = n;
      cell.context_tokens = length;
      cell.note = refused;
      result.cells.push_back(cell);
    }
    return Status::success();
  }
  for (const Point& point : points) {
    const std::uint32_t decode_steps = point.sweep ? s.warmup_steps + s.measure_steps : 2;
    const std::uint32_t warm = point.sweep ? s.warmup_steps : 1;
    if (walk.length + decode_steps > point.tokens) continue;  // too close behind the previous point
    walk.prefill_to(point.tokens - decode_steps, s.chunk_tokens);
    Measured m;
    for (std::uint32_t k = 0; k < decode_steps; ++k) walk.decode(k < warm ? nullptr : &m);
    AK_ASSERT(walk.length == point.tokens, "a measurement point ends at its length");
    result.measured_steps += m.steps;
    result.heap_allocations += m.heap_allocations;
    if (point.sweep) {
      CellResult cell = cell_from(variant, n, point.tokens, m);
      if (core.retained() != nullptr) cell.retained_pages = core.retained()->pages_total();
      result.cells.push_back(cell);
    }
    ProbePoint probe;
    probe.context_tokens = point.tokens;
    probe.activekv_seconds = m.seconds / m.steps;
    if (n <= s.stock_capacity(point.tokens)) probe.stock_seconds = stock_step_seconds(s, n, point.tokens);
    crossover.probes.push_back(probe);
  }
  return Status::success();
}

void find_crossover(Crossover& c, double margin) {
  std::uint32_t previous = 0;
  for (const ProbePoint& p : c.probes) {
    if (p.stock_seconds <= 0.0) continue;
    c.stock_fits_until_tokens = p.context_tokens;
    if (c.slower_from_tokens == 0 && p.activekv_seconds > p.stock_seconds * (1.0 + margin)) {
      c.slower_from_tokens = p.context_tokens;
      c.not_slower_until_tokens = previous;
    }
    previous = p.context_tokens;
  }
}

}  // namespace

Result<SweepResult> run_sweep(const Scenario& scenario, const SweepOptions& options) {
  if (Status ok = scenario.validate(); !ok) return ok.error();
  const auto started = std::chrono::steady_clock::now();
  SweepResult result;
  result.scenario = scenario;
  Result<MemoryPlan> plan = make_memory_plan(memory_settings(scenario, Variant::activekv));
  if (!plan) return plan.error();
  result.plan = plan.value();
  Result<MemoryPlan> plan_headroom = make_memory_plan(memory_settings(scenario, Variant::activekv_headroom));
  if (!plan_headroom) return plan_headroom.error();
  result.plan_headroom = plan_headroom.value();

  for (std::uint32_t n : scenario.concurrency) {
    for (std::uint32_t length : scenario.context_tokens) {
      CellResult cell;
      cell.variant = Variant::stock;
      cell.concurrency = n;
      cell.context_tokens = length;
      const std::uint32_t capacity = scenario.stock_capacity(length);
      if (n <= capacity) {
        cell.ran = true;
        cell.itl_seconds = stock_step_seconds(scenario, n, length);
        cell.resident_bytes_per_step = static_cast<double>(n) * length * static_cast<double>(scenario.kv_bytes_per_token());
      } else {
        cell.note = "device memory holds " + std::to_string(capacity) + " contexts of this length";
      }
      result.cells.push_back(cell);
    }
  }
  const std::vector<Point> points = points_for(scenario, options);
  for (Variant variant : {Variant::activekv, Variant::activekv_headroom}) {
    for (std::uint32_t n : scenario.concurrency) {
      Crossover crossover;
      crossover.variant = variant;
      crossover.concurrency = n;
      if (Status ok = run_walk(scenario, variant, n, points, result, crossover); !ok) return ok.error();
      find_crossover(crossover, options.crossover_margin);
      result.crossovers.push_back(std::move(crossover));
    }
  }
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace activekv::sim
