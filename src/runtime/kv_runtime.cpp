// kv_runtime.cpp — warm-up: the memory plan, the one allocation, every table sized; create() (the class: kv_runtime_impl.hpp).
#include "runtime/kv_runtime_impl.hpp"

#include "activekv/size.hpp"

namespace activekv::runtime_impl {

// ---------------------------------------------------------------------------
// Warm-up
// ---------------------------------------------------------------------------

std::unique_ptr<ResidencyPolicy> KvRuntimeImpl::make_policy(const KvRuntimeSettings& settings) {
  switch (settings.policy) {
    case ResidencyPolicyKind::exact: return std::make_unique<ExactPolicy>();
    case ResidencyPolicyKind::hotness:
      return std::make_unique<HotnessPolicy>(settings.hotness_threshold, settings.hotness_candidates);
  }
  return nullptr;
}

KvRuntimeImpl::KvRuntimeImpl(const KvRuntimeSettings& settings, const MemoryPlan& plan, Backend& backend)
    : settings_(settings),
      plan_(plan),
      sizes_(Sizes::of(settings, plan)),
      backend_(backend),
      arena_(plan.arena),
      log_(settings.decision_log_records),
      budgets_(plan_, arena_, log_),
      policy_(make_policy(settings)),
      planner_(budgets_, *policy_),
      leases_(backend, plan.arena.tiles, 8),
      tickets_(backend, sizes_.tickets_max, 4),
      schedule_(AttentionScheduleLimits{sizes_.entries_max, sizes_.pages_per_layer_max, sizes_.pages_max}) {
  const Geometry& g = plan_.geometry;
  shape_ = AttentionShape{settings.q_heads, g.kv_heads, g.head_dim, g.dtype,
                          1.0f / std::sqrt(static_cast<float>(g.head_dim))};
  scheduled_.resize(sizes_.entries_max);
  query_first_.resize(sizes_.entries_max);
  query_count_.resize(sizes_.entries_max);
  positions_.resize(sizes_.tokens_max);
  rows_.resize(std::size_t{sizes_.tokens_max} * g.row_bytes());
  state_.resize(std::size_t{sizes_.tokens_max} * settings.q_heads * (2u + g.head_dim));
  page_mass_.resize(sizes_.pages_max);
  scores_.resize(sizes_.pages_max);
  uploads_.resize(sizes_.write_backs_max);
  upload_pages_.resize(sizes_.write_backs_max);
  waits_.resize(sizes_.write_backs_max + 3);  // the uploads, a pass's copy and its misses' copy
  regions_.resize(std::max(sizes_.copies_per_pass_max, sizes_.write_backs_max));
  write_backs_.resize(g.dense_layers);
  write_back_tickets_.resize(sizes_.write_backs_max);
  pass_leases_.resize(plan_.arena.tiles);
  pass_tickets_.resize(sizes_.copies_per_pass_max);
  in_place_tickets_.resize(sizes_.entries_max);
  tile_fill_.assign(std::size_t{plan_.arena.tiles} * plan_.arena.tile_pages, 0);
  tile_copy_.assign(tile_fill_.size(), 0);
  copy_filled_.assign(sizes_.copies_per_pass_max, 0);
  schedule_.read_host_in_place(settings.read_in_place);
  promotion_failed_.resize(sizes_.promotions_max);
  slot_faulted_.resize(budgets_.slots());
  deferred_cancels_.resize(budgets_.slots());
  retained_generation_.assign(budgets_.slots(), 0);
  retained_request_.assign(budgets_.slots(), 0);
  adoption_.assign(budgets_.slots(), Adoption{});
  device_copies_.resize(budgets_.slots());
  device_copy_pages_.resize(std::size_t{budgets_.slots()} * g.dense_layers * plan_.budget.layer_pages_max);
  device_copy_regions_.resize(std::size_t{g.dense_layers} * plan_.budget.layer_pages_max);
  if (settings.sparse.enabled()) {
    const std::uint32_t slots = budgets_.slots();
    const std::uint32_t pages = sizes_.pages_per_layer_max;
    const std::size_t per_slot_layer = std::size_t{slots} * g.dense_layers;
    const runtime::SummaryShape shape{slots, g.dense_layers, pages, g.kv_heads, g.head_dim,
                                      runtime::summary_format_for(g.dtype)};
    AK_ASSERT(shape.bytes() == plan_.summaries.bytes, "kv runtime: the page summaries must be the plan's");
    summaries_ = std::make_unique<runtime::PageSummaries>(shape);
    summarized_generation_.assign(slots, 0);
    summarized_tokens_.assign(slots, 0);
    key_row_.resize(std::size_t{g.kv_heads} * g.head_dim);
    bounds_.resize(std::size_t{g.kv_heads} * pages);
    q_positive_.resize(std::size_t{settings.q_heads} * g.head_dim);
    q_negative_.resize(std::size_t{settings.q_heads} * g.head_dim);
    // Rankings: one per KV head group, or per query head of a group (per_head).
    selection_ = std::make_unique<runtime::SelectionScratch>(std::max(g.kv_heads, settings.q_heads / g.kv_heads), pages);
    AK_ASSERT(summaries_->bytes().size() == plan_.arena.summaries.size_bytes, "kv runtime: the summaries part must hold the table");
    summary_uploads_.resize(sizes_.entries_max);
    selected_.resize(pages);
    keep_.resize(std::size_t{sizes_.entries_max} * pages);
    heavy_flags_.resize(pages);
    heavy_.assign(per_slot_layer * pages, 0.0f);
    pick_rank_.assign(per_slot_layer * pages, UINT32_MAX);
    pick_bound_.assign(per_slot_layer * pages, 0.0f);
    if (backend_.capabilities().page_heads && g.kv_heads > 1 && g.kv_heads <= 32) {
      pick_group_rank_.assign(per_slot_layer * g.kv_heads * pages, UINT32_MAX);
      pick_group_bound_.assign(per_slot_layer * g.kv_heads * pages, 0.0f);
    }
    pick_per_group_.assign(slots, 0);
    all_heads_ = g.kv_heads >= 32 ? UINT32_MAX : (1u << g.kv_heads) - 1u;
    pick_pages_.assign(per_slot_layer, 0);
    pick_step_.assign(slots, 0);
    budget_pages_.assign(slots, 0.0f);
    captured_slow_.assign(slots, 1.0f);
    layer_captured_.assign(per_slot_layer, 1.0f);
    layer_captured_step_.assign(std::size_t{sizes_.entries_max} * g.dense_layers, -1.0f);
    captured_sum_.resize(sizes_.entries_max);
    captured_layers_.resize(sizes_.entries_max);
    fill_.resize(sizes_.entries_max);
    unselected_.resize(sizes_.entries_max);
    tail_count_.resize(sizes_.entries_max);
    tail_mass_.resize(sizes_.entries_max);
    moment_captured_.assign(sizes_.entries_max, 1.0f);
    pick_budget_.assign(per_slot_layer, 0);
    entry_of_slot_.assign(slots, UINT32_MAX);
    full_state_.resize(state_.size());
    last_read_.assign(per_slot_layer * pages, 0);
    predict_generation_.assign(slots, 0);
    pick_staging_.assign(per_slot_layer * pages, 0);
    stage_last_.assign(std::size_t{slots} * stage_columns, 0);
    if (Status st = prepare_scores(settings.sparse); !st) throw std::bad_alloc();
  }
  // A hybrid's blocks carry the state at their end where the history held a checkpoint (docs/TIER.md).
  // Without checkpoints (prefix reuse off) no state could land: a hybrid then keeps no tier.
  tier_ = plan_.state.enabled() && plan_.state.checkpoints == 0 ? nullptr : settings.tier;
  tier_segments_.resize(g.dense_layers);
  tier_csegments_.resize(g.dense_layers);
  tier_generation_.assign(budgets_.slots(), 0);
  tier_states_.resize(plan_.state.checkpoints);
  tier_offered_blocks_.assign(budgets_.slots(), 0);
  init_state();
  if (settings.prefix_reuse) {
    std::uint64_t identity = settings.model_identity;
    if (identity == 0) {
      identity = (std::uint64_t{g.dense_layers} << 48) ^ (std::uint64_t{g.kv_heads} << 32) ^
                 (std::uint64_t{g.head_dim} << 16) ^ static_cast<std::uint64_t>(g.dtype);
    }
    const runtime::PrefixIndexConfig config{budgets_.slots(), plan_.arena.page_tokens,
                                            plan_.host.max_context_tokens / plan_.arena.page_tokens, identity};
    Result<runtime::PrefixIndex> index = runtime::PrefixIndex::create(config);
    // A context shorter than one page has nothing to retain: reuse stays off.
    if (index.ok()) prefix_ = std::make_unique<runtime::PrefixIndex>(std::move(index).value());
  }
}

Status KvRuntimeImpl::warm_up() {
  MemoryRequest request;
  request.arena_bytes = plan_.arena.used_bytes;
  request.host_pool_bytes = plan_.host.used_bytes;
  request.pin_host_pool = true;
  request.batch_tasks_max = sizes_.entries_max;
  request.batch_pages_max = sizes_.pages_max;
  request.batch_queries_max = sizes_.tokens_max;
  request.q_heads_max = settings_.q_heads;
  request.head_dim_max = plan_.geometry.head_dim;
  request.copy_regions_max = static_cast<std::uint32_t>(std::max(regions_.size(), device_copy_regions_.size()));
  if (Status s = backend_.allocate(request); !s.ok()) return s;
  arena_.bind_allocation(request.arena_bytes);
  device_allocations_baseline_ = backend_.stats().device_allocations;
  return create_prefix_cache();
}

}  // namespace activekv::runtime_impl

namespace activekv {

using runtime_impl::KvRuntimeImpl;

Result<std::unique_ptr<KvRuntime>> KvRuntime::create(const KvRuntimeSettings& settings, Backend& backend) {
  const Geometry& g = settings.memory.geometry;
  if (settings.q_heads == 0 || g.kv_heads == 0 || settings.q_heads % g.kv_heads != 0) {
    return make_error(ErrorCode::invalid_argument, "--q-heads",
                      fmt::format("query heads ({}) must be a positive multiple of the KV heads ({})",
                                  settings.q_heads, g.kv_heads));
  }
  if (backend.allocated()) {
    return make_error(ErrorCode::invalid_argument, "--backend",
                      "the backend has already allocated its arena: a KV runtime needs a fresh backend");
  }
  MemorySettings memory = settings.memory;
  memory.sparse_summaries = settings.sparse.enabled();  // the plan shows (and sizes) the page summaries
  memory.state_checkpoints = settings.prefix_reuse;     // a hybrid's histories keep state checkpoints for reuse
  Result<MemoryPlan> plan = make_memory_plan(memory);
  if (!plan.ok()) return plan.error();
  if (settings.step_entries_max > plan->budget.concurrency) {
    return make_error(ErrorCode::invalid_argument, "--max-batch",
                      fmt::format("{} contexts per step, but only {} can run at once under this memory plan",
                                  settings.step_entries_max, plan->budget.concurrency));
  }
  if (settings.read_in_place && !backend.capabilities().kernel_reads_host_pool) {
    return make_error(ErrorCode::unsupported, "read_in_place",
                      fmt::format("the {} backend's kernel cannot read the host pool in place: stage the history "
                                  "through the tiles (turn read_in_place off)",
                                  backend.name()));
  }
  if (plan->state.enabled() && !backend.capabilities().host_visible_arena) {
    return make_error(ErrorCode::unsupported, "--backend",
                      fmt::format("the {} backend's arena is not host-visible, and the forward pass updates a hybrid "
                                  "model's recurrent state ({} per context) in place on the host: run it on the host "
                                  "backend (docs/RUNTIME.md \"Recurrent state\")",
                                  backend.name(), format_bytes(plan->state.state_bytes)));
  }
  if (g.window_layers() != 0 && !backend.capabilities().attention_window) {
    return make_error(ErrorCode::unsupported, "--backend",
                      fmt::format("{} of the {} dense layers attend to a sliding window of {} tokens, and the {} "
                                  "backend's attention kernel has no window: run the model on the host backend",
                                  g.window_layers(), g.dense_layers, g.kinds.window_tokens, backend.name()));
  }
  if (g.window_layers() != 0 && settings.sparse.enabled()) {
    return make_error(ErrorCode::unsupported, "--sparse-pages",
                      fmt::format("{} of the {} dense layers attend to a sliding window and keep only a ring of {} tokens "
                                  "on the host; sparse page selection covers full-history layers only: run exact "
                                  "(drop --sparse-pages)",
                                  g.window_layers(), g.dense_layers, plan->host.ring_tokens));
  }
  auto runtime = std::make_unique<KvRuntimeImpl>(settings, plan.value(), backend);
  if (Status s = runtime->warm_up(); !s.ok()) return s.error();
  return std::unique_ptr<KvRuntime>(std::move(runtime));
}

}  // namespace activekv
