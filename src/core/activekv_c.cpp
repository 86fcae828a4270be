// activekv_c.cpp — the C API (activekv.h) over the C++ core: one object owning the plan, the
// arena's accounting, the decision log, the budgets and an exact-mode planner.
#include "activekv/activekv.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "activekv/explain.hpp"
#include "activekv/planner.hpp"

struct activekv_core {
  explicit activekv_core(const activekv::MemoryPlan& p)
      : plan(p), arena(plan.arena), log(4096), budgets(plan, arena, log), planner(budgets, policy) {}
  activekv::MemoryPlan plan;
  activekv::Arena arena;
  activekv::DecisionLog log;
  activekv::BudgetManager budgets;
  activekv::ExactPolicy policy;
  activekv::ResidencyPlanner planner;
  std::unique_ptr<activekv::ScheduledContext[]> scheduled;
};

namespace {

char* copy_string(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out != nullptr) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

void write_error(char* error, size_t size, const std::string& text) {
  if (error == nullptr || size == 0) return;
  const size_t n = text.size() < size - 1 ? text.size() : size - 1;
  std::memcpy(error, text.data(), n);
  error[n] = '\0';
}

activekv::ContextHandle handle(activekv_context c) { return activekv::ContextHandle{c.slot, c.generation}; }

}  // namespace

extern "C" {

void activekv_settings_default(activekv_settings* s) {
  *s = activekv_settings{};
  s->dtype = "f16";
  s->page_tokens = activekv::page_tokens_default;
  s->tiles = activekv::tiles_default;
  s->chunk_tokens = activekv::chunk_tokens_default;
  s->max_seqs = 1;
}

int activekv_settings_preset(activekv_settings* s, const char* name) {
  const activekv::Result<activekv::Preset> preset = activekv::find_preset(name != nullptr ? name : "");
  if (!preset) return 1;
  const activekv::Geometry& g = preset->geometry;
  s->dense_layers = g.dense_layers;
  s->recurrent_layers = g.recurrent_layers;
  s->kv_heads = g.kv_heads;
  s->head_dim = g.head_dim;
  s->dtype = activekv::dtype_name(g.dtype);
  s->recurrent_state_bytes = g.recurrent_state_bytes;
  s->max_context_tokens = preset->max_context_tokens;
  return 0;
}

activekv_core* activekv_create(const activekv_settings* s, char* error, size_t error_size) {
  activekv::MemorySettings m;
  const activekv::Result<activekv::DType> dtype = activekv::parse_dtype(s->dtype != nullptr ? s->dtype : "", "--dtype");
  if (!dtype) {
    write_error(error, error_size, dtype.error().describe());
    return nullptr;
  }
  m.geometry = activekv::Geometry{s->dense_layers, s->recurrent_layers, s->kv_heads, s->head_dim, *dtype,
                                  s->recurrent_state_bytes};
  m.host_pool_bytes = s->host_pool_bytes;
  m.device_pool_bytes = s->device_pool_bytes;
  m.headroom_bytes = s->headroom_bytes;
  m.page_tokens = s->page_tokens;
  m.tile_tokens = s->tile_tokens;
  m.tiles = s->tiles;
  m.max_context_tokens = s->max_context_tokens;
  m.max_seqs = s->max_seqs;
  m.chunk_tokens = s->chunk_tokens;
  m.floor_pages = s->floor_pages;
  m.target_pages = s->target_pages;
  m.burst_pages = s->burst_pages;
  const activekv::Result<activekv::MemoryPlan> plan = activekv::make_memory_plan(m);
  if (!plan) {
    write_error(error, error_size, plan.error().describe());
    return nullptr;
  }
  auto* core = new activekv_core(*plan);
  core->scheduled.reset(new activekv::ScheduledContext[core->budgets.slots()]);
  write_error(error, error_size, "");
  return core;
}

void activekv_destroy(activekv_core* core) { delete core; }

char* activekv_plan_json(const activekv_core* core) { return copy_string(activekv::memory_plan_json(core->plan)); }
char* activekv_plan_text(const activekv_core* core) { return copy_string(activekv::format_memory_plan(core->plan)); }
uint32_t activekv_concurrency(const activekv_core* core) { return core->plan.budget.concurrency; }

activekv_admit_outcome activekv_admit(activekv_core* core, uint64_t request_id, uint32_t tokens_max,
                                      activekv_context* context, const char** reason) {
  const activekv::AdmitResult r = core->budgets.submit(request_id, tokens_max);
  if (reason != nullptr) *reason = activekv::reason_text(r.reason);
  if (context != nullptr) *context = activekv_context{r.handle.slot, r.handle.generation};
  switch (r.outcome) {
    case activekv::AdmitOutcome::admitted: return ACTIVEKV_ADMITTED;
    case activekv::AdmitOutcome::queued: return ACTIVEKV_QUEUED;
    case activekv::AdmitOutcome::refused: return ACTIVEKV_REFUSED;
  }
  return ACTIVEKV_REFUSED;
}

void activekv_finish(activekv_core* core, activekv_context context) { core->budgets.finish(handle(context)); }

uint32_t activekv_take_admitted(activekv_core* core, activekv_context* contexts, uint64_t* request_ids,
                                uint32_t capacity) {
  uint32_t n = 0;
  activekv::AdmitResult one;
  while (n < capacity && core->budgets.take_admitted({&one, 1}) == 1) {
    contexts[n] = activekv_context{one.handle.slot, one.handle.generation};
    if (request_ids != nullptr) request_ids[n] = one.request_id;
    ++n;
  }
  return n;
}

int activekv_plan_step(activekv_core* core, const activekv_scheduled* scheduled, uint32_t count,
                       activekv_step_counters* counters) {
  if (count > core->budgets.slots()) return static_cast<int>(activekv::PlanOutcome::too_many_contexts);
  for (uint32_t i = 0; i < count; ++i) {
    core->scheduled[i] = activekv::ScheduledContext{handle(scheduled[i].context), scheduled[i].tokens_appended};
  }
  const activekv::PlanOutcome outcome = core->planner.plan_step({core->scheduled.get(), count});
  if (outcome == activekv::PlanOutcome::planned && counters != nullptr) {
    const activekv::StepCounters& c = core->planner.plan().counters;
    *counters = activekv_step_counters{c.bytes_staged, c.bytes_promoted, c.bytes_written_back, c.pages_resident,
                                       c.pages_staged, c.copies,       c.passes,         c.promotions};
  }
  return static_cast<int>(outcome);
}

const char* activekv_plan_outcome_text(int outcome) {
  return activekv::plan_outcome_text(static_cast<activekv::PlanOutcome>(outcome));
}

void activekv_step_completed(activekv_core* core) { core->planner.step_completed(); }

char* activekv_explain_json(const activekv_core* core, activekv_context context) {
  return copy_string(activekv::explanation_json(activekv::explain(core->budgets, handle(context), core->planner.step())));
}

void activekv_free_string(char* text) { std::free(text); }

}  // extern "C"
