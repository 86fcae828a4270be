// engine_step_engine.cpp — the model, the KV runtime and the backend behind StepEngine.
#include "serve/engine_step_engine.hpp"
#include "tier/redis_tier.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/memory_plan.hpp"
#include "engine/engine.hpp"
#include "engine/runtime_kv.hpp"
#include "engine/model.hpp"
#include "engine/sampler.hpp"
#include "engine/forward.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::serve {

namespace {

activekv::ContextHandle to_runtime(serve::ContextHandle c) { return activekv::ContextHandle{c.index, c.generation}; }
serve::ContextHandle to_serve(activekv::ContextHandle c) { return serve::ContextHandle{c.slot, c.generation}; }

// Why the runtime queued the scheduler's head (queue_not_empty cannot happen:
// the head is the only request ever submitted while one waits).
AdmitOutcome outcome_of(Reason reason) {
  return reason == Reason::no_free_history ? AdmitOutcome::no_free_history : AdmitOutcome::floor_does_not_fit;
}

}  // namespace

struct EngineStepEngine::Parts {
  std::unique_ptr<tier::RedisTier> tier;     // the shared KV tier (null: none); outlives the runtime
  std::unique_ptr<Backend> backend;          // destroyed last but the tier
  std::unique_ptr<KvRuntime> runtime;
  std::unique_ptr<engine::Engine> engine;    // destroyed first
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  EnginePlan plan;
  std::string model_name;
  std::string backend_name;
  std::uint64_t next_request_id = 1;
  std::uint64_t pending_request_id = 0;      // queued inside the runtime; 0: none
  std::vector<AdmitResult> admitted_scratch; // take_admitted() buffer, sized at warm-up
  std::vector<engine::StepInput> inputs;     // step scratch, sized at warm-up
  std::vector<engine::Sampler> samplers;     // one per history slot (concurrency + retained), built at warm-up
  // Per slot: the tokens whose rows the context holds, in order (what a finished history is
  // retained under). Sized at warm-up: slots × max context.
  std::vector<std::int32_t> slot_tokens;
  std::vector<std::uint32_t> slot_length;
  // Per slot: its prompt's pages were offered to the host prefix cache (at its first token).
  std::vector<std::uint8_t> slot_offered;
  std::uint32_t max_context = 0;
  void record(std::uint32_t slot, std::span<const std::int32_t> tokens) {
    std::int32_t* at = slot_tokens.data() + std::size_t{slot} * max_context + slot_length[slot];
    AK_ASSERT(slot_length[slot] + tokens.size() <= max_context, "EngineStepEngine: a context past max context");
    std::copy(tokens.begin(), tokens.end(), at);
    slot_length[slot] += static_cast<std::uint32_t>(tokens.size());
  }
  std::uint64_t device_allocations_at_warmup = 0;
};

EngineStepEngine::EngineStepEngine(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
EngineStepEngine::~EngineStepEngine() {
  if (parts_ == nullptr) return;
  if (parts_->tier != nullptr) parts_->tier->drain();  // its writer reads the host pool: done before it goes
  parts_->engine.reset();  // the forward pass holds a reference into the runtime
  parts_->runtime.reset();
  parts_->backend.reset();
}

Result<std::unique_ptr<EngineStepEngine>> EngineStepEngine::create(const EngineStepEngineSettings& s) {
  auto parts = std::make_unique<Parts>();
  auto model = engine::Model::load(s.model_path);
  if (!model) return model.error();
  auto tok = tokenizer::Tokenizer::from_gguf((*model)->file());
  if (!tok) return tok.error();
  if (Status v = engine::check_vocabulary(**model, static_cast<std::uint64_t>(tok->vocab_size())); !v) return v.error();
  parts->tokenizer = std::make_unique<tokenizer::Tokenizer>(std::move(tok).value());
  const engine::ModelConfig& mc = (*model)->config();
  parts->model_name = mc.name.empty() ? s.model_path : mc.name;

  const RunConfig& c = s.config;
  MemorySettings memory;
  memory.geometry = (*model)->geometry();
  memory.host_pool_bytes = c.host_pool_bytes;
  memory.device_pool_bytes = c.device_pool_bytes;
  memory.page_tokens = c.page_tokens;
  memory.tile_tokens = c.tile_tokens;
  memory.tiles = c.tiles;
  memory.max_context_tokens = c.max_context_tokens != 0 ? c.max_context_tokens : mc.context_tokens;
  memory.max_seqs = c.max_seqs;
  memory.chunk_tokens = c.prefill_chunk_tokens;
  // Applied with or without reuse, so --no-prefix-reuse keeps the same concurrency (the extra
  // histories then stay empty).
  memory.retained_histories = c.retained_histories;
  memory.state_checkpoint_pages = c.state_checkpoint_pages;
  const bool hybrid = memory.geometry.recurrent_state_bytes != 0;
  if (hybrid && !c.kv_tier.empty()) {
    // A hybrid's tier blocks carry the recurrent state at their end, which only a checkpoint there provides
    // (docs/TIER.md): prefix reuse keeps the checkpoints, and unless the configuration spaces them itself, one
    // falls at every block's end.
    if (!c.prefix_reuse) {
      return make_error(ErrorCode::invalid_argument, "kv_tier (--kv-tier)",
                        fmt::format("{} is a hybrid model: its tier blocks carry recurrent-state checkpoints, which "
                                    "prefix reuse keeps; turn prefix reuse on or remove kv_tier",
                                    s.model_path));
    }
    if (c.state_checkpoint_pages == 0 && c.page_tokens != 0 && c.kv_tier_block_tokens % c.page_tokens == 0) {
      memory.state_checkpoint_pages = c.kv_tier_block_tokens / c.page_tokens;
    }
  }
  memory.prefix_cache_bytes = c.prefix_reuse ? c.prefix_cache_bytes : 0;  // the cache serves prefix reuse only
  if (memory.max_context_tokens > mc.context_tokens) {
    return make_error(ErrorCode::invalid_argument, "max_context",
                      fmt::format("the configuration's max_context {} exceeds the model's llama.context_length {} ({}): "
                                  "lower max_context",
                                  memory.max_context_tokens, mc.context_tokens, s.model_path));
  }
  if (c.step_tokens > engine::step_tokens_limit) {
    return make_error(ErrorCode::invalid_argument, "step_tokens (--step-tokens)",
                      fmt::format("{} tokens per step is past the engine's {}", c.step_tokens, engine::step_tokens_limit));
  }
  KvRuntimeSettings kvs;
  kvs.memory = memory;
  kvs.q_heads = mc.q_heads;
  kvs.step_entries_max = 0;  // the plan's concurrency: min(max_seqs, histories, floors that fit)
  kvs.step_tokens_max = c.step_tokens;
  kvs.prefix_reuse = c.prefix_reuse;
  kvs.prefix_reuse_device = c.prefix_reuse_device;
  kvs.sparse = c.sparse;  // docs/SPARSE.md
  // The model's identity seeds the prefix hashes: its name, vocabulary and geometry.
  std::uint64_t identity = std::hash<std::string>{}(parts->model_name) ^ (std::uint64_t{mc.vocab} << 32);
  identity ^= (std::uint64_t{memory.geometry.dense_layers} << 16) ^ memory.geometry.row_bytes();
  kvs.model_identity = identity == 0 ? 1 : identity;
  if (!c.kv_tier.empty()) {
    auto store = tier::parse_tier_url(c.kv_tier, "kv_tier (--kv-tier)");
    if (!store) return store.error();
    tier::RedisTierSettings ts;
    ts.store = std::move(store).value();
    ts.store.connect_timeout_ms = c.kv_tier_timeout_ms;
    ts.store.command_timeout_ms = c.kv_tier_timeout_ms;
    ts.block_tokens = c.kv_tier_block_tokens;
    ts.write_queue_blocks = c.kv_tier_write_queue;
    ts.lookups = c.kv_tier_lookups;
    ts.page_tokens = memory.page_tokens;
    ts.max_context_tokens = memory.max_context_tokens;
    ts.model_identity = kvs.model_identity;
    ts.geometry = memory.geometry;
    auto t = tier::RedisTier::create(ts);
    if (!t) return t.error();
    parts->tier = std::move(t).value();
    kvs.tier = parts->tier.get();
  }

  BackendOptions options;
  options.compute_threads = c.threads;  // the host backend's attention kernel threads (the engine's pool waits meanwhile)
  auto backend = make_backend(s.backend, options);
  if (!backend) return backend.error();
  parts->backend = std::move(backend).value();
  parts->backend_name = s.backend;
  engine::choose_history_reads(kvs, *parts->backend);
  auto runtime = KvRuntime::create(kvs, *parts->backend);
  if (!runtime) return runtime.error();
  parts->runtime = std::move(runtime).value();

  const std::uint32_t entries_max = std::min(c.max_seqs, parts->runtime->plan().budget.concurrency);
  engine::EngineSettings es;
  es.threads = c.threads;
  es.limits.step_tokens_max = c.step_tokens;
  es.limits.step_entries_max = entries_max;
  es.limits.context_tokens = memory.max_context_tokens;
  if (!engine::parse_activations(c.activations, &es.activations))
    return make_error(ErrorCode::invalid_argument, "activations", fmt::format("'{}' is not an activation width: {}", c.activations, activations_refusal));
  auto eng = engine::Engine::create(std::move(model).value(), std::make_unique<engine::RuntimeKv>(*parts->runtime), es);
  if (!eng) return eng.error();
  parts->engine = std::move(eng).value();

  const MemoryPlan& mp = parts->runtime->plan();
  EnginePlan& p = parts->plan;
  p.max_context_tokens = mp.host.max_context_tokens;
  p.histories = static_cast<std::uint32_t>(std::min<std::uint64_t>(mp.host.histories, UINT32_MAX));  // no wrap to 0
  p.max_seqs = mp.host.max_seqs;
  p.concurrency = std::min<std::uint32_t>(mp.host.concurrency, mp.budget.concurrency);
  p.retained_histories = mp.host.retained_histories;
  p.prefix_cache_pages = mp.host.prefix_cache_pages;
  p.prefix_cache_page_bytes = mp.host.prefix_cache_page_bytes;
  p.pool_pages = mp.arena.pages;
  p.page_tokens = mp.arena.page_tokens;
  p.host_pool_bytes = mp.host.used_bytes;
  p.device_arena_bytes = mp.arena.used_bytes;
  p.eos_token = parts->tokenizer->eos().value_or(-1);
  p.vocab = mc.vocab;
  // Admissions at once are bounded by the concurrency, not by how many histories a huge pool could hold.
  parts->admitted_scratch.resize(std::max<std::size_t>(std::min(p.histories, p.concurrency), 1) + 8);
  parts->inputs.resize(entries_max);
  parts->max_context = mp.host.max_context_tokens;
  // Per history slot (concurrency + retained_histories): a context may run in any mapped history.
  parts->slot_tokens.assign(std::size_t{mp.host.history_slots} * parts->max_context, 0);
  parts->slot_length.assign(mp.host.history_slots, 0);
  parts->slot_offered.assign(mp.host.history_slots, 0);
  parts->samplers.reserve(mp.host.history_slots);
  for (std::uint32_t i = 0; i < mp.host.history_slots; ++i) {
    parts->samplers.emplace_back(engine::SamplerSettings{}, parts->engine->config().vocab);
  }
  parts->device_allocations_at_warmup = parts->runtime->counters().device_allocations_after_warmup;
  return std::unique_ptr<EngineStepEngine>(new EngineStepEngine(std::move(parts)));
}

const EnginePlan& EngineStepEngine::plan() const { return parts_->plan; }

std::string EngineStepEngine::plan_text() const {
  return fmt::format("model {} ({} backend, {} threads)\n{}", parts_->model_name, parts_->backend_name,
                     parts_->engine->threads(), format_memory_plan(parts_->runtime->plan()));
}

std::string EngineStepEngine::plan_json() const { return memory_plan_json(parts_->runtime->plan()); }

Result<std::vector<std::int32_t>> EngineStepEngine::encode(std::string_view text) {
  return parts_->tokenizer->encode(text, tokenizer::Special::allow);
}

std::string EngineStepEngine::decode(std::span<const std::int32_t> tokens) { return parts_->tokenizer->decode(tokens); }

Admission EngineStepEngine::admit(std::span<const std::int32_t> prompt, std::uint32_t tokens_max) {
  Parts& p = *parts_;
  if (p.pending_request_id != 0) {
    const std::uint32_t n = p.runtime->take_admitted(p.admitted_scratch);
    for (std::uint32_t i = 0; i < n; ++i) {
      AK_ASSERT(p.admitted_scratch[i].request_id == p.pending_request_id,
                "EngineStepEngine::admit: the runtime admitted a request the scheduler did not submit");
      p.pending_request_id = 0;
      p.slot_length[p.admitted_scratch[i].handle.slot] = 0;  // admitted from the queue: nothing adopted
      p.slot_offered[p.admitted_scratch[i].handle.slot] = 0;
      return {AdmitOutcome::admitted, to_serve(p.admitted_scratch[i].handle), 0};
    }
    return {AdmitOutcome::floor_does_not_fit, {}, 0};
  }
  if (p.tier != nullptr) {
    // The shared tier (docs/TIER.md): its lookup runs on its own thread; the head waits here,
    // between steps, while running contexts step. A history its writer still reads is not free.
    if (!p.runtime->prepare_tier(prompt)) return {AdmitOutcome::tier_pending, {}, 0};
    if (p.runtime->histories_free() == 0 && p.runtime->release_tier_leases() > 0) {
      return {AdmitOutcome::tier_pending, {}, 0};
    }
  }
  // A free history is not enough: the concurrency (below a retained-history allowance) and the
  // arena (the floor) must have room too, or the request would queue inside the runtime and later
  // be admitted without adopting its prefix. It waits in the scheduler instead and is tried again
  // after the next step.
  if (const Reason wait = p.runtime->admission_wait(); wait != Reason::floor_fits) {
    return {wait == Reason::floor_does_not_fit ? AdmitOutcome::floor_does_not_fit : AdmitOutcome::no_free_history, {}, 0};
  }
  const std::uint64_t id = p.next_request_id++;
  std::uint32_t reused = 0;
  auto result = p.runtime->open_context(id, tokens_max, prompt, reused);
  AK_ASSERT(result.ok(), "EngineStepEngine::admit: the scheduler checks max context before admission");
  switch (result->outcome) {
    case activekv::AdmitOutcome::admitted: {
      const std::uint32_t slot = result->handle.slot;
      p.slot_length[slot] = 0;
      p.slot_offered[slot] = 0;
      p.record(slot, prompt.first(reused));
      return {AdmitOutcome::admitted, to_serve(result->handle), reused};
    }
    case activekv::AdmitOutcome::queued:
      p.pending_request_id = id;
      return {outcome_of(result->reason), {}, 0};
    case activekv::AdmitOutcome::refused: break;
  }
  AK_ASSERT(false, "EngineStepEngine::admit: the runtime refused a request that fits max context");
  return {AdmitOutcome::floor_does_not_fit, {}, 0};
}

void EngineStepEngine::wait_admission(std::uint32_t timeout_ms) { parts_->runtime->wait_tier(timeout_ms); }

bool EngineStepEngine::prefetch(std::span<const std::int32_t> prompt) { return parts_->runtime->prefetch_tier(prompt); }
void EngineStepEngine::drop_prefetch(std::span<const std::int32_t> prompt) { parts_->runtime->drop_tier(prompt); }

void EngineStepEngine::set_sampling(ContextHandle context, const SamplingSettings& sampling) {
  AK_ASSERT(context.index < parts_->samplers.size(), "EngineStepEngine::set_sampling: context index beyond the histories");
  parts_->samplers[context.index].reset(engine::SamplerSettings{sampling.seed, sampling.temperature, sampling.top_p});
}

void EngineStepEngine::finish(ContextHandle context) {
  Parts& p = *parts_;
  const std::uint32_t slot = context.index;
  p.runtime->finish_retaining(
      to_runtime(context), std::span<const std::int32_t>(p.slot_tokens).subspan(std::size_t{slot} * p.max_context, p.slot_length[slot]));
}
void EngineStepEngine::cancel(ContextHandle context) { parts_->runtime->cancel(to_runtime(context)); }

std::uint32_t EngineStepEngine::tokens_to_checkpoint(ContextHandle context) const {
  return parts_->runtime->tokens_to_checkpoint(to_runtime(context));
}

Status EngineStepEngine::step(std::span<const BatchEntry> batch, std::span<std::int32_t> tokens_out) {
  Parts& p = *parts_;
  AK_ASSERT(batch.size() <= p.inputs.size(), "EngineStepEngine::step: more entries than max_seqs");
  for (std::size_t e = 0; e < batch.size(); ++e) {
    const auto* ids = reinterpret_cast<const engine::TokenId*>(batch[e].tokens.data());
    p.inputs[e] = engine::StepInput{to_runtime(batch[e].context), {ids, batch[e].tokens.size()}, batch[e].want_token};
  }
  static_assert(sizeof(engine::TokenId) == sizeof(std::int32_t), "token ids are 32-bit");
  Status status = p.engine->step(std::span<const engine::StepInput>(p.inputs.data(), batch.size()));
  if (!status) return status;
  // The tokens each context now holds rows for (after the step: a failed step's are never retained).
  for (std::size_t e = 0; e < batch.size(); ++e) p.record(batch[e].context.index, batch[e].tokens);
  // Window-layer models with a KV tier: the blocks whose ends a context just reached are written
  // now, while the rings hold their rows (the scheduler ends chunks there: tokens_to_checkpoint).
  for (std::size_t e = 0; e < batch.size(); ++e) {
    const std::uint32_t slot = batch[e].context.index;
    p.runtime->offer_running(to_runtime(batch[e].context),
                             std::span<const std::int32_t>(p.slot_tokens).subspan(std::size_t{slot} * p.max_context, p.slot_length[slot]));
  }
  // A context's first token ends its prompt: the prompt's full pages go into the host prefix cache
  // now, so the same prompt arriving while this one decodes adopts them (docs/PREFIX_CACHE.md).
  for (std::size_t e = 0; e < batch.size(); ++e) {
    const std::uint32_t slot = batch[e].context.index;
    if (!batch[e].want_token || p.slot_offered[slot] != 0) continue;
    p.slot_offered[slot] = 1;
    p.runtime->offer_prefix(to_runtime(batch[e].context),
                            std::span<const std::int32_t>(p.slot_tokens).subspan(std::size_t{slot} * p.max_context, p.slot_length[slot]));
  }
  for (std::size_t e = 0; e < batch.size(); ++e) {
    if (!batch[e].want_token) continue;
    const std::span<const float> logits = p.engine->logits(static_cast<std::uint32_t>(e));
    engine::Sampler& sampler = p.samplers[batch[e].context.index];
    // A fresh context's sampler may still hold a previous occupant's settings: the
    // scheduler sets every admitted context's sampling before its first step.
    tokens_out[e] = static_cast<std::int32_t>(sampler.settings().temperature == 0.0f ? engine::Sampler::argmax(logits)
                                                                                      : sampler.sample(logits));
  }
  return {};
}

ContextPages EngineStepEngine::pages(ContextHandle context) const {
  // explain() builds vectors: the scheduler samples pages outside the step path.
  const Explanation x = parts_->runtime->explain(to_runtime(context));
  return ContextPages{static_cast<std::uint32_t>(x.pages_assigned + x.pages_reserved),
                      static_cast<std::uint32_t>(x.budget.floor_pages), static_cast<std::uint32_t>(x.budget.target_pages),
                      static_cast<std::uint32_t>(x.budget.burst_pages),
                      x.state_bytes, x.recurrent_slot, x.state_restored_tokens, x.state_checkpoints_held,
                      x.state_checkpoint_newest};
}

EngineCounters EngineStepEngine::counters() const {
  const Parts& p = *parts_;
  const KvCounters& k = p.runtime->counters();
  const MemoryPlan& mp = p.runtime->plan();
  EngineCounters c;
  c.bytes_h2d = k.h2d_bytes;
  c.bytes_d2h = k.d2h_bytes;
  c.bytes_d2d = k.d2d_bytes;
  c.copies_h2d = k.h2d_copies;
  c.copies_d2h = k.d2h_copies;
  c.copies_d2d = k.d2d_copies;
  c.page_reads_resident = k.pages_resident;
  c.page_reads_staged = k.pages_staged;
  c.promotions = k.promotions;
  c.reclaimed_pages = k.pages_reclaimed;
  c.reclaim_steps = k.reclaim_steps;
  c.quarantines = k.quarantines;
  c.device_allocations_after_warmup = k.device_allocations_after_warmup - p.device_allocations_at_warmup;
  c.host_bytes_in_use = (mp.host.histories - p.runtime->histories_free()) * mp.host.history_bytes;
  c.device_bytes_in_use = std::uint64_t{p.runtime->pages_total() - p.runtime->pages_free()} * mp.arena.page_bytes +
                          mp.arena.staging_tiles.size_bytes;
  const engine::PhaseTimes& t = p.engine->times();
  c.planning_ns = t.planning_ns;
  c.step_ns = t.total_ns();
  c.prefix_reused_tokens = k.prefix_reused_tokens;
  c.prefix_adoptions = k.prefix_adoptions;
  c.retained_kept = k.retained_kept;
  c.retained_dropped = k.retained_dropped;
  c.retained_histories = k.retained_histories;
  c.tier_restored_tokens = k.tier_restored_tokens;
  c.tier_ring_cuts = k.tier_ring_cuts;
  c.tier_state_cuts = k.tier_state_cuts;
  if (p.tier != nullptr) {
    const tier::TierCounters& tc = p.tier->counters();
    c.tier_hits = tc.hits.load(std::memory_order_relaxed);
    c.tier_misses = tc.misses.load(std::memory_order_relaxed);
    c.tier_errors = tc.errors.load(std::memory_order_relaxed);
    c.tier_refused = tc.refused.load(std::memory_order_relaxed);
    c.tier_bytes_read = tc.bytes_read.load(std::memory_order_relaxed);
    c.tier_bytes_written = tc.bytes_written.load(std::memory_order_relaxed);
    c.tier_dropped_writes = tc.dropped_writes.load(std::memory_order_relaxed);
    c.tier_kept_writes = tc.kept_writes.load(std::memory_order_relaxed);
  }
  c.retained_device_pages_adopted = k.retained_device_pages_adopted;
  c.retained_device_pages_reclaimed = k.retained_device_pages_reclaimed;
  c.retained_device_pages = k.retained_device_pages;
  c.prefix_device_pages_copied = k.prefix_device_pages_copied;
  c.prefix_cache_bytes = k.prefix_cache_bytes;
  c.prefix_cache_pages = k.prefix_cache_pages;
  c.prefix_cache_pages_total = k.prefix_cache_pages_total;
  c.prefix_cache_lookups = k.prefix_cache_lookups;
  c.prefix_cache_hits = k.prefix_cache_hits;
  c.prefix_cache_hit_tokens = k.prefix_cache_hit_tokens;
  c.prefix_cache_evictions = k.prefix_cache_evictions;
  c.prefix_cache_pages_shared = k.prefix_cache_pages_shared;
  c.prefix_cache_ring_cuts = k.prefix_cache_ring_cuts;
  c.prefix_cache_ring_cut_pages = k.prefix_cache_ring_cut_pages;
  c.prefix_cache_state_cuts = k.prefix_cache_state_cuts;
  c.prefix_cache_state_cut_pages = k.prefix_cache_state_cut_pages;
  c.prefix_device_pages_promoted = k.prefix_device_pages_promoted;
  c.h2d_bytes_adopting = k.h2d_bytes_adopting;
  return c;
}

// Compared with what was allocated (the plan's history slots: concurrency + retained_histories), never with
// what the pool could hold: a pool larger than max_seqs histories is no leak.
bool EngineStepEngine::all_returned() const {
  Parts& p = *parts_;
  if (p.tier != nullptr) {  // histories the tier's writer read are given back once it is done
    p.tier->drain();
    p.runtime->release_tier_leases();
  }
  return p.runtime->pages_free() == p.runtime->pages_total() && p.runtime->histories_free() == p.runtime->plan().host.history_slots &&
         p.runtime->check() == nullptr;
}

void EngineStepEngine::release_retained() { parts_->runtime->release_retained(); }

}  // namespace activekv::serve
