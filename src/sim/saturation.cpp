// saturation.cpp — both servers under an endless queue, step by step, counted per window.
#include "sim/saturation.hpp"

#include <algorithm>
#include <memory>

#include "sim/core_instance.hpp"
#include "sim/naive_admission.hpp"
#include "sim/step_schedule.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::sim {

namespace {

// One context the ActiveKV server is running, by slot.
struct Live {
  ContextHandle handle;
  std::uint32_t prompt_left = 0;
  std::uint32_t generated = 0;
  bool active = false;
};

class ActiveKvServer {
 public:
  ActiveKvServer(CoreInstance& core, const Scenario& scenario, const SaturationSettings& settings)
      : core_(core), scenario_(scenario), settings_(settings),
        timeline_(make_cost_model(scenario.card, scenario.model), core.plan().arena.tiles),
        live_(core.budgets().slots()), scheduled_(core.budgets().slots()), admitted_(core.budgets().slots()),
        work_(static_cast<std::size_t>(core.budgets().slots()) * core.plan().geometry.dense_layers) {
    const std::uint64_t page_bytes = core.plan().arena.page_bytes;
    workspace_pages_ = static_cast<std::uint32_t>((settings.prefill_workspace_bytes + page_bytes - 1) / page_bytes);
  }

  // One step; returns decoded tokens and adds evictions (a running context whose handle went
  // stale before it finished) to `evictions`.
  std::uint64_t step(SaturationTotals& totals, std::uint32_t& evictions, std::uint32_t& running) {
    feed(totals);
    std::uint32_t entries = 0;
    std::uint32_t tokens = 0;
    bool prefill = false;
    for (const Live& l : live_) {
      if (!l.active) continue;
      const std::uint32_t t = l.prompt_left > 0 ? std::min(scenario_.chunk_tokens, l.prompt_left) : 1u;
      scheduled_[entries++] = ScheduledContext{l.handle, t};
      tokens += t;
      prefill = prefill || l.prompt_left > 0;
    }
    running = entries;
    apply_pressure(prefill);
    if (entries == 0) return 0;
    const PlanOutcome outcome = core_.planner().plan_step(std::span<const ScheduledContext>(scheduled_.data(), entries));
    AK_ASSERT(outcome == PlanOutcome::planned, "the saturating workload schedules only steps the core can plan");
    const std::span<LayerWork> work(work_.data(), static_cast<std::size_t>(entries) * core_.plan().geometry.dense_layers);
    core_.translate(work);
    StepShape shape = core_.shape(entries);
    shape.tokens = tokens;
    const StepTiming t = schedule_step(timeline_, shape, work, now_);
    core_.planner().step_completed();
    totals.seconds += t.seconds();
    now_ = t.end_seconds;
    return advance(entries, totals, evictions);
  }

 private:
  // Keeps `slots` requests waiting in the core's FIFO: the workload saturates.
  void feed(SaturationTotals& totals) {
    while (core_.budgets().queued() < core_.budgets().slots()) {
      const AdmitResult r = core_.budgets().submit(next_id_++, settings_.prompt_tokens + settings_.output_tokens);
      AK_ASSERT(r.outcome != AdmitOutcome::refused, "the saturating workload's requests are valid");
      if (r.outcome == AdmitOutcome::admitted) start(r.handle, totals);
      else ++queued_;
    }
  }

  void start(ContextHandle handle, SaturationTotals& totals) {
    Live& l = live_[handle.slot];
    AK_ASSERT(!l.active, "a slot the core admits into is free");
    l = Live{handle, settings_.prompt_tokens, 0, true};
    ++totals.admitted;
  }

  void apply_pressure(bool prefill) {
    RetainedHistory* retained = core_.retained();
    if (retained == nullptr || workspace_pages_ == 0) return;
    if (prefill && !taken_) {
      retained->take_back_headroom(workspace_pages_);
      taken_ = true;
    } else if (!prefill && taken_) {
      retained->restore_headroom(workspace_pages_);
      taken_ = false;
    }
  }

  std::uint64_t advance(std::uint32_t entries, SaturationTotals& totals, std::uint32_t& evictions) {
    std::uint64_t decoded = 0;
    for (std::uint32_t e = 0; e < entries; ++e) {
      Live& l = live_[scheduled_[e].context.slot];
      if (l.prompt_left > 0) {
        l.prompt_left -= scheduled_[e].tokens_appended;
        continue;
      }
      ++l.generated;
      ++decoded;
      if (l.generated < settings_.output_tokens) continue;
      // Retained pages belong to this context's rows: they go before the slot is reused.
      if (core_.retained() != nullptr) core_.retained()->release_context(l.handle.slot);
      core_.budgets().finish(l.handle);
      l.active = false;
      ++totals.finished;
    }
    const std::uint32_t n = core_.budgets().take_admitted(admitted_);
    for (std::uint32_t i = 0; i < n; ++i) start(admitted_[i].handle, totals);
    for (const Live& l : live_) {
      if (l.active && !core_.budgets().current(l.handle)) ++evictions;
    }
    totals.decoded_tokens += decoded;
    return decoded;
  }

 public:
  std::uint64_t queued() const noexcept { return queued_; }

 private:
  CoreInstance& core_;
  const Scenario& scenario_;
  const SaturationSettings& settings_;
  Timeline timeline_;
  std::vector<Live> live_;
  std::vector<ScheduledContext> scheduled_;
  std::vector<AdmitResult> admitted_;
  std::vector<LayerWork> work_;
  std::uint64_t next_id_ = 1;
  std::uint64_t queued_ = 0;
  std::uint32_t workspace_pages_ = 0;
  bool taken_ = false;
  double now_ = 0.0;
};

// The naive server's step in seconds: the same charges, applied to what it holds and recomputes.
double naive_step_seconds(const Scenario& s, const CostModel& cost, const NaiveStep& step) {
  const auto tokens = static_cast<std::uint32_t>(step.decoded_tokens + step.prefill_tokens + step.recompute_tokens);
  if (step.running == 0 && tokens == 0) return 0.0;
  const double attention = static_cast<double>(step.kv_tokens_resident) * static_cast<double>(s.kv_bytes_per_token()) *
                               cost.attention_seconds_per_byte +
                           static_cast<double>(step.running) * s.geometry.dense_layers * cost.attention_launch_seconds;
  return cost.non_attention_seconds(tokens) + attention;
}

}  // namespace

Result<SaturationResult> run_saturation(const Scenario& scenario, const SaturationSettings& settings) {
  if (settings.prompt_tokens + settings.output_tokens > scenario.max_context_tokens) {
    return make_error(ErrorCode::invalid_argument, "--prompt-tokens",
                      "prompt + output tokens exceed the scenario's max context");
  }
  if (settings.window_steps == 0 || settings.steps < settings.window_steps) {
    return make_error(ErrorCode::invalid_argument, "--saturation-steps", "need at least one window of steps");
  }
  if (settings.variant == Variant::stock) {
    return make_error(ErrorCode::invalid_argument, "--variant", "the saturation run compares an ActiveKV variant with naive");
  }
  Result<std::unique_ptr<CoreInstance>> made = CoreInstance::create(scenario, settings.variant);
  if (!made) return made.error();
  CoreInstance& core = *made.value();

  SaturationResult result;
  result.settings = settings;
  result.activekv_concurrency = core.plan().budget.concurrency;
  const std::uint64_t page_all_layers = static_cast<std::uint64_t>(scenario.page_tokens) * scenario.kv_bytes_per_token();
  result.naive_capacity_pages = scenario.stock_kv_bytes() / page_all_layers;
  const std::uint64_t recurrent_pages = (scenario.geometry.recurrent_state_bytes + page_all_layers - 1) / page_all_layers;
  NaiveAdmission naive(NaiveSettings{result.naive_capacity_pages, scenario.page_tokens, recurrent_pages,
                                     settings.naive_max_seqs, settings.prompt_tokens, settings.output_tokens});
  const CostModel cost = make_cost_model(scenario.card, scenario.model);
  ActiveKvServer server(core, scenario, settings);

  result.windows.reserve(settings.steps / settings.window_steps + 1);
  SaturationWindow window;
  std::uint64_t takings_before = 0;
  std::uint64_t allocations_before = 0;
  for (std::uint32_t step = 0; step < settings.steps; ++step) {
    if (step == settings.window_steps) allocations_before = testing::heap_allocations();
    if (step % settings.window_steps == 0) {
      window = SaturationWindow{};
      window.first_step = step;
      window.naive_running_min = window.activekv_running_min = UINT32_MAX;
      takings_before = core.headroom() != nullptr ? core.headroom()->counters().takings : 0;
    }
    const NaiveStep n = naive.step();
    result.naive.seconds += naive_step_seconds(scenario, cost, n);
    window.naive_evictions += n.evicted;
    window.naive_decoded += n.decoded_tokens;
    window.naive_recomputed += n.recompute_tokens;
    window.naive_running_max = std::max(window.naive_running_max, n.running);
    window.naive_running_min = std::min(window.naive_running_min, n.running);

    std::uint32_t evictions = 0, running = 0;
    window.activekv_decoded += server.step(result.activekv, evictions, running);
    window.activekv_evictions += evictions;
    result.activekv.evictions += evictions;  // every step, as the naive totals count (windows may not divide the run)
    window.activekv_running_max = std::max(window.activekv_running_max, running);
    window.activekv_running_min = std::min(window.activekv_running_min, running);

    if ((step + 1) % settings.window_steps == 0) {
      window.naive_seconds = result.naive.seconds;
      window.activekv_seconds = result.activekv.seconds;
      if (core.headroom() != nullptr) window.headroom_takings = core.headroom()->counters().takings - takings_before;
      result.windows.push_back(window);
    }
  }
  if (settings.steps > settings.window_steps) result.heap_allocations = testing::heap_allocations() - allocations_before;
  const NaiveTotals& nt = naive.totals();
  result.naive.decoded_tokens = nt.decoded_tokens;
  result.naive.finished = nt.finished;
  result.naive.admitted = nt.admitted;
  result.naive.evictions = nt.evicted;
  result.naive.recompute_tokens = nt.recompute_tokens;
  result.queued_by_core = server.queued();
  result.pages_reclaimed = core.budgets().counters().pages_reclaimed;
  result.reclaim_steps = core.budgets().counters().reclaim_steps;
  if (const Headroom* h = core.headroom()) {
    result.headroom_takings = h->counters().takings;
    result.headroom_pages_taken = h->counters().pages_taken;
    result.headroom_pages_revoked = h->counters().pages_revoked;
  }
  if (RetainedHistory* r = core.retained()) result.retained_pages_dropped = r->counters().pages_dropped;
  return result;
}

}  // namespace activekv::sim
