// kv_runtime_step.cpp — one step: faults and fences, passes, uploads, attention, write-back (the class: kv_runtime_impl.hpp).
#include "runtime/kv_runtime_impl.hpp"

namespace activekv::runtime_impl {

// ---------------------------------------------------------------------------
// Faults and fences
// ---------------------------------------------------------------------------

void KvRuntimeImpl::note_fault(const char* what, FenceOutcome outcome, std::uint32_t layer) noexcept {
  if (fault_.what == nullptr) fault_ = Fault{what, outcome, layer};
}

void KvRuntimeImpl::note_refusal(const char* what, const Error& error, std::uint32_t layer) {
  if (fault_.what == nullptr) backend_error_ = error.describe();
  note_fault(what, FenceOutcome::failed, layer);
}

Status KvRuntimeImpl::fault_status() const {
  return make_error(ErrorCode::backend, "--backend",
                    fmt::format("step {} failed at dense layer {}: {} ({}); the step's contexts are faulted: "
                                "cancel them (their history up to the previous step is intact on the host)",
                                planner_.step(), fault_.layer == UINT32_MAX ? 0 : fault_.layer, fault_.what,
                                backend_error_.empty() ? fence_outcome_name(fault_.outcome) : backend_error_));
}

FenceOutcome KvRuntimeImpl::wait(Fence fence, const char* what, std::uint32_t layer, bool kernel) noexcept {
  if (!fence.recorded()) return FenceOutcome::signalled;  // nothing was issued
  ScopedTimer timer(kernel ? counters_.attention_ns : counters_.copy_wait_ns);
  Result<FenceOutcome> outcome = backend_.wait_host(fence, settings_.fence_timeout);
  const FenceOutcome o = outcome.ok() ? outcome.value() : FenceOutcome::unknown;
  // Work that did not resolve may still read or write the step's buffers (and the caller's
  // out) later: no further step may reuse them. The runtime refuses every later step.
  if (!outcome.ok() || o == FenceOutcome::pending) stalled_ = true;
  if (o != FenceOutcome::signalled) note_fault(what, o == FenceOutcome::pending ? FenceOutcome::unknown : o, layer);
  return o;
}

void KvRuntimeImpl::release_fence(Fence& fence) noexcept {
  if (fence.recorded()) backend_.release_fence(fence);
  fence = Fence{};
}

// ---------------------------------------------------------------------------
// One step
// ---------------------------------------------------------------------------

Status KvRuntimeImpl::begin_step(std::span<const StepEntry> entries) {
  AK_ASSERT(!step_open_, "kv runtime: begin_step() while a step is open");
  StepScope scope(counters_);
  if (tier_ != nullptr) release_tier_leases();  // histories the tier's writer finished reading
  if (stalled_) {
    return make_error(ErrorCode::backend, "--fence-timeout",
                      "an earlier step's work did not resolve within the fence timeout and may still touch the "
                      "step buffers: the runtime accepts no further step (recreate it, or raise the timeout)");
  }
  if (entries.empty()) return make_error(ErrorCode::invalid_argument, "step", "a step needs at least one context");
  if (entries.size() > sizes_.entries_max) {
    return make_error(ErrorCode::invalid_argument, "--max-batch",
                      fmt::format("{} contexts in one step; at most {} were reserved at warm-up", entries.size(),
                                  sizes_.entries_max));
  }
  std::uint32_t total = 0;
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const StepEntry& entry = entries[e];
    if (!budgets_.current(entry.context)) {
      return make_error(ErrorCode::invalid_argument, "step", fmt::format("entry {}: the context is not running", e));
    }
    if (slot_faulted_[entry.context.slot] != 0) {
      return make_error(ErrorCode::refused, "step",
                        fmt::format("entry {}: the context is faulted by an earlier step: cancel it", e));
    }
    scheduled_[e] = ScheduledContext{entry.context, entry.tokens_new};
    query_first_[e] = total;
    query_count_[e] = entry.tokens_new;
    total += entry.tokens_new;
  }
  if (total > sizes_.tokens_max) {
    return make_error(ErrorCode::invalid_argument, "--chunk-tokens",
                      fmt::format("{} new tokens in one step; at most {} were reserved at warm-up", total,
                                  sizes_.tokens_max));
  }
  // A tile whose lease is quarantined (a fence that touched it failed) is never planned into
  // again; the remaining tiles carry the staging, in more passes.
  for (std::uint32_t t = 0; t < plan_.arena.tiles; ++t) {
    if (leases_.slot_state(t) == LeaseState::quarantined && planner_.retire_tile(t)) ++counters_.tiles_retired;
  }
  const std::uint64_t plan_start = now_ns();
  const PlanOutcome outcome = planner_.plan_step({scheduled_.data(), entries.size()});
  counters_.plan_ns += now_ns() - plan_start;
  if (outcome != PlanOutcome::planned) {
    return make_error(ErrorCode::refused, "step", fmt::format("the step cannot be planned: {}", plan_outcome_text(outcome)));
  }
  const StepPlan& plan = planner_.plan();
  AK_ASSERT(plan.layers.size() == entries.size() * plan_.geometry.dense_layers,
            "kv runtime: the plan must hold one LayerPlan per context and dense layer");
  for (std::uint32_t e = 0; e < entries.size(); ++e) {
    const LayerPlan& lp = layer_plan(0, e);
    AK_ASSERT(lp.entry == e, "kv runtime: layer plans must follow the entries' order");
    AK_ASSERT(lp.length_tokens == lp.length_before + query_count_[e], "kv runtime: plan length disagrees with the entry");
    for (std::uint32_t i = 0; i < query_count_[e]; ++i) positions_[query_first_[e] + i] = lp.length_before + i;
  }
  AK_ASSERT(plan.promotions.size() <= promotion_failed_.size(), "kv runtime: more promotions than reserved");
  std::fill_n(promotion_failed_.begin(), plan.promotions.size(), std::uint8_t{0});

  step_open_ = true;
  total_new_ = total;
  layers_written_ = 0;
  layers_attended_ = 0;
  passes_issued_ = 0;
  pass_issued_ = UINT32_MAX;
  write_back_ticket_count_ = 0;
  fault_ = Fault{};
  backend_error_.clear();
  for (Fence& f : write_backs_) f = Fence{};
  counters_.pages_resident_last = 0;
  counters_.pages_staged_last = 0;
  counters_.passes_last = settings_.read_in_place ? 0 : plan.passes.size();  // read in place: no tile is filled
  counters_.pages_in_place_last = 0;
  if (summaries_ != nullptr) {
    sparse_stats_.pages_read_last = 0;
    sparse_stats_.pages_context_last = 0;
    sparse_stats_.selections_last = 0;
    sparse_stats_.recall_last = 0.0;
    recall_step_sum_ = 0.0;
    recall_step_count_ = 0;
    for (std::uint32_t e = 0; e < entries.size(); ++e) {
      captured_sum_[e] = 0.0;
      captured_layers_[e] = 0;
      entry_of_slot_[entries[e].context.slot] = e;
    }
  }
  begin_sparse_staging();
  // Layer 0's first pass copies while the engine computes layer 0's K, V and q.
  issue_next_pass_of(0);
  return Status::success();
}

std::uint32_t KvRuntimeImpl::position_first(std::uint32_t entry) const {
  AK_ASSERT(step_open_, "kv runtime: position_first() outside a step");
  AK_ASSERT(entry < entries(), "kv runtime: position_first() entry out of range");
  return layer_plan(0, entry).length_before;
}

bool KvRuntimeImpl::issue_pass(std::uint32_t pass) noexcept {
  const StepPlan& plan = planner_.plan();
  AK_ASSERT(pass == passes_issued_, "kv runtime: passes are issued in plan order");
  AK_ASSERT(pass_issued_ == UINT32_MAX, "kv runtime: a pass is issued while another holds the tiles");
  const StagePass& sp = plan.passes[pass];
  pass_issued_ = pass;
  passes_issued_ = pass + 1;
  pass_lease_count_ = 0;
  pass_ticket_count_ = 0;
  pass_copy_ = Fence{};
  pass_d2d_ = Fence{};
  pass_miss_ = Fence{};
  AK_ASSERT(sp.copy_count <= sizes_.copies_per_pass_max, "kv runtime: more copies in a pass than reserved");

  // Leases on every tile slot the pass fills (copies are grouped by tile slot order).
  for (std::uint32_t i = 0; i < sp.copy_count; ++i) {
    const StageCopy& c = plan.copies[sp.copy_first + i];
    bool leased = false;
    for (std::uint32_t j = 0; j < pass_lease_count_; ++j) leased = leased || pass_leases_[j].slot == c.tile_slot;
    if (leased) continue;
    Lease lease;
    const LeaseStatus ls = leases_.acquire_slot(c.tile_slot, &lease);
    if (ls != LeaseStatus::ok) {
      note_fault(ls == LeaseStatus::quarantined ? "a staging tile the plan uses is quarantined" : "a staging tile is still leased",
                 FenceOutcome::failed, sp.layer);
      return false;
    }
    pass_leases_[pass_lease_count_++] = lease;
  }
  // Tickets on the host ranges the copies read, then one batched h2d. Every page of the pass, or
  // under a sparse selection only those the kernel will read (kv_runtime_sparse_staging.cpp): a
  // pass may then copy nothing (its misses, if any, are copied in attend before the kernel).
  std::uint32_t regions = 0;
  if (!plan_pass_copies(pass, regions)) return false;
  if (regions > 0) {
    Result<Fence> copy = backend_.copy(CopyDirection::h2d, {regions_.data(), regions});
    if (!copy.ok()) {
      note_refusal("the staging copy was refused by the backend", copy.error(), sp.layer);
      return false;
    }
    pass_copy_ = copy.value();
    ++counters_.h2d_copies;
    attach_pass_leases(pass_copy_, true);
    for (std::uint32_t j = 0; j < pass_ticket_count_; ++j) {
      if (copy_filled_[j] != 0) tickets_.attach(pass_tickets_[j], pass_copy_);  // a copy of which pages were copied
    }
  }

  // Promotions of this pass: tile page -> pool page, after the copy, on the device.
  std::uint32_t promotions = 0;
  for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
    const Promotion& p = plan.promotions[i];
    if (p.pass != pass) continue;
    regions_[promotions++] = CopyRegion{p.device_offset_from, p.device_offset_to, plan.page_bytes};
  }
  if (promotions > 0) {
    AK_ASSERT(pass_copy_.recorded(), "kv runtime: a promotion's page is copied by its pass");
    const Fence waits[1] = {pass_copy_};
    Result<Fence> d2d = backend_.copy(CopyDirection::d2d, {regions_.data(), promotions}, waits);
    if (!d2d.ok()) {
      note_refusal("the promotion copy was refused by the backend", d2d.error(), sp.layer);
      for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) promotion_failed_[i] |= plan.promotions[i].pass == pass;
      return false;
    }
    pass_d2d_ = d2d.value();
    ++counters_.d2d_copies;
    counters_.d2d_bytes += promotions * plan.page_bytes;
    counters_.promotions += promotions;
    for (std::uint32_t j = 0; j < pass_lease_count_; ++j) leases_.use(pass_leases_[j], pass_d2d_);
  }
  return true;
}

void KvRuntimeImpl::retire_pass() noexcept {
  if (pass_issued_ == UINT32_MAX) return;
  const StepPlan& plan = planner_.plan();
  const std::uint32_t layer = plan.passes[pass_issued_].layer;
  wait(pass_copy_, "a staging copy (h2d) did not signal", layer);
  wait(pass_miss_, "a staging copy of missed pages (h2d) did not signal", layer);
  if (pass_d2d_.recorded()) {
    const FenceOutcome o = wait(pass_d2d_, "a promotion copy (d2d) did not signal", layer);
    if (o != FenceOutcome::signalled) {
      for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
        if (plan.promotions[i].pass == pass_issued_) promotion_failed_[i] = 1;
      }
    }
  }
  for (std::uint32_t j = 0; j < pass_ticket_count_; ++j) {
    close_ticket(pass_tickets_[j]);
  }
  for (std::uint32_t j = 0; j < pass_lease_count_; ++j) {
    LeaseStatus s = leases_.release(pass_leases_[j]);
    // Still pending only after a wait timed out (already a fault): release at the first poll
    // that sees every fence signalled, or quarantine then.
    if (s == LeaseStatus::fences_pending) s = leases_.release_when_done(pass_leases_[j]);
    AK_ASSERT(s == LeaseStatus::ok || s == LeaseStatus::quarantined, "kv runtime: a tile lease could not be released");
  }
  release_fence(pass_copy_);
  release_fence(pass_miss_);
  release_fence(pass_d2d_);
  pass_ticket_count_ = 0;
  pass_lease_count_ = 0;
  pass_issued_ = UINT32_MAX;
}

void KvRuntimeImpl::issue_next_pass_of(std::uint32_t layer) noexcept {
  const StepPlan& plan = planner_.plan();
  if (settings_.read_in_place) return;  // nothing is staged (kv_runtime_in_place.cpp)
  if (fault_.what != nullptr || pass_issued_ != UINT32_MAX || passes_issued_ >= plan.passes.size()) return;
  if (defer_pass_of(layer)) return;  // SparseStaging::selected: the layer's copies wait for its selection
  if (plan.passes[passes_issued_].layer == layer) issue_pass(passes_issued_);
}

Status KvRuntimeImpl::write_kv(std::uint32_t layer, const float* k, const float* v) {
  AK_ASSERT(step_open_, "kv runtime: write_kv() outside a step");
  AK_ASSERT(layer == layers_written_, "kv runtime: write_kv() must go layer by layer, in order");
  AK_ASSERT(layer == layers_attended_, "kv runtime: write_kv(l) must follow attend(l - 1)");
  StepScope scope(counters_);
  ++layers_written_;
  if (fault_.what != nullptr) return fault_status();
  const Geometry& g = plan_.geometry;
  const std::size_t head_elements = std::size_t{g.kv_heads} * g.head_dim;
  const std::uint64_t row_bytes = g.row_bytes();
  for (std::uint32_t i = 0; i < total_new_; ++i) {
    std::byte* row = rows_.data() + i * row_bytes;
    runtime::encode_elements(g.dtype, k + i * head_elements, head_elements, row);
    runtime::encode_elements(g.dtype, v + i * head_elements, head_elements, row + g.half_row_bytes());
  }
  summarize_rows(layer);  // sparse attention: the new keys join their pages' summaries
  // Each write-back names rows of a tail page: upload exactly those rows there.
  const StepPlan& plan = planner_.plan();
  upload_count_ = 0;
  std::uint32_t rows_total = 0;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const LayerPlan& lp = layer_plan(layer, e);
    for (std::uint32_t w = 0; w < plan.write_back_count(lp); ++w) {
      const WriteBack wb = plan.write_back(lp, w);
      const std::uint32_t token = wb.logical * plan_.arena.page_tokens + wb.row_first;
      AK_ASSERT(token >= lp.length_before && token + wb.rows <= lp.length_tokens,
                "kv runtime: a write-back names rows outside the step's new tokens");
      const std::size_t row_index = query_first_[e] + (token - lp.length_before);
      Result<Fence> up = backend_.upload(wb.device_offset, {rows_.data() + row_index * row_bytes, wb.bytes});
      if (!up.ok()) {
        note_refusal("a new-row upload was refused by the backend", up.error(), layer);
        return fault_status();
      }
      upload_pages_[upload_count_] = wb.pool_page;
      uploads_[upload_count_++] = up.value();
      rows_total += wb.rows;
      ++counters_.h2d_copies;
      counters_.h2d_bytes += wb.bytes;
      if (adoption_[lp.slot].pages > 0) counters_.h2d_bytes_adopting += wb.bytes;
    }
  }
  AK_ASSERT(rows_total == total_new_, "kv runtime: the write-backs must cover every new row exactly once");
  counters_.rows_uploaded += rows_total;
  return Status::success();
}

Status KvRuntimeImpl::attend(std::uint32_t layer, const float* q, float* out) {
  AK_ASSERT(step_open_, "kv runtime: attend() outside a step");
  AK_ASSERT(layer == layers_attended_ && layer + 1 == layers_written_, "kv runtime: attend(l) must follow write_kv(l)");
  StepScope scope(counters_);
  ++layers_attended_;
  if (fault_.what != nullptr) {
    retire_uploads(layer);
    return fault_status();
  }
  const StepPlan& plan = planner_.plan();
  const Geometry& g = plan_.geometry;
  // Sparse attention: decode entries read their selected pages only (none selected: exact).
  const bool selective = select_sparse(layer, q);
  if (summaries_ != nullptr && settings_.sparse.enabled()) selection_layer_ = layer;  // keep_ holds it
  const bool measure = selective && settings_.sparse.measure;
  schedule_.build(plan, layer, plan_.arena.page_tokens, {query_first_.data(), entries()},
                  {query_count_.data(), entries()},
                  selective ? std::span<const std::uint32_t>{keep_.data(), keep_.size()} : std::span<const std::uint32_t>{},
                  measure);
  counters_.pages_resident_last += schedule_.pages_resident();
  counters_.pages_staged_last += schedule_.pages_staged();
  counters_.pages_resident += schedule_.pages_resident();
  counters_.pages_staged += schedule_.pages_staged();
  counters_.pages_in_place_last += schedule_.pages_in_place();
  counters_.pages_in_place += schedule_.pages_in_place();
  if (selective && settings_.read_in_place) note_pages_in_place(layer);  // explain: how each read page arrived

  // Every (query, head) starts from the empty state; each call loads and stores it.
  const std::size_t state_stride = 2u + g.head_dim;
  const std::size_t states = std::size_t{total_new_} * settings_.q_heads;
  for (std::size_t i = 0; i < states; ++i) {
    float* s = state_.data() + i * state_stride;
    s[0] = -std::numeric_limits<float>::infinity();
    std::fill(s + 1, s + state_stride, 0.0f);
  }
  if (measure) std::copy_n(state_.data(), states * state_stride, full_state_.data());
  const std::size_t q_elements = std::size_t{total_new_} * settings_.q_heads * g.head_dim;
  // The hotness signal comes from decode steps (one query per context): it is what the policy
  // needs, and it keeps the kernel's per-page scratch bounded by the page table (prefill chunks
  // would multiply it by the chunk length). Adaptive sparse attention reads it too (heavy
  // hitters and the captured-mass estimate).
  const bool decode_only = total_new_ == entries();
  const bool hot = settings_.policy == ResidencyPolicyKind::hotness;
  const bool sparse_mass =
      selective && (settings_.sparse.mode == SparseMode::adaptive || settings_.sparse.layer_budget ||
                    settings_.sparse.heavy_hitters);
  const bool scored = (hot || sparse_mass) && backend_.capabilities().page_mass && decode_only;
  if (sparse_mass) {
    for (std::uint32_t e = 0; e < entries(); ++e) {
      tail_mass_[e] = 0.0f;
      tail_count_[e] = 0;
    }
  }

  Fence attention{};
  // Read in place: the layer's non-resident history is read from the host pool under read tickets.
  const bool reads_open = !settings_.read_in_place || open_in_place(layer);
  for (const AttentionCall& call : schedule_.calls()) {
    if (!reads_open) break;
    std::uint32_t wait_count = 0;
    if (!call.final()) {
      if (pass_issued_ != call.pass) {
        retire_pass();
        if (!issue_pass(call.pass)) break;
      }
      // Selected pages the pass did not copy (it was issued on a prediction) are copied now.
      if (!stage_misses(call, layer)) break;
      if (pass_copy_.recorded()) waits_[wait_count++] = pass_copy_;
      if (pass_miss_.recorded()) waits_[wait_count++] = pass_miss_;
    }
    for (std::uint32_t i = 0; i < upload_count_; ++i) waits_[wait_count++] = uploads_[i];
    FenceOutcome o = FenceOutcome::signalled;
    // Under a selection a pass may hold no selected page: it still runs (its promotions), no kernel.
    if (call.task_count > 0) {
      AttentionBatch batch;
      batch.shape = shape_;
      batch.tasks = schedule_.tasks().subspan(call.task_first, call.task_count);
      batch.pages = schedule_.pages().subspan(call.page_first, call.page_count);
      if (selective && per_group_) batch.page_heads = schedule_.heads().subspan(call.page_first, call.page_count);
      batch.query_positions = {positions_.data(), total_new_};
      batch.window_tokens = g.kinds.window_of(layer);
      batch.queries = {q, q_elements};
      batch.output = call.final() ? std::span<float>{out, q_elements} : std::span<float>{};
      batch.page_mass = scored ? std::span<float>{page_mass_.data(), call.page_count} : std::span<float>{};
      batch.state = {state_.data(), states * state_stride};
      batch.load_state = true;
      batch.store_state = !call.final() || measure;
      batch.write_output = call.final();
      Result<Fence> fence = backend_.attention(batch, {waits_.data(), wait_count});
      if (!fence.ok()) {
        note_refusal("the attention kernel was refused by the backend", fence.error(), layer);
        break;
      }
      attention = fence.value();
      ++counters_.attention_calls;
      if (settings_.read_in_place) attach_in_place(attention, layer);
      if (!call.final()) attach_pass_leases(attention, false);
      // The engine needs the output (and the next pass needs the tiles): wait for this kernel.
      o = wait(attention, "the attention kernel did not signal", layer, true);
      if (scored && o == FenceOutcome::signalled) {
        std::uint32_t n = 0;
        const auto keys = schedule_.keys().subspan(call.page_first, call.page_count);
        for (std::uint32_t i = 0; i < call.page_count; ++i) {
          if (hot && keys[i].staged) scores_[n++] = PageScore{keys[i].slot, keys[i].layer, keys[i].logical, page_mass_[i]};
        }
        if (n > 0) policy_->observe({scores_.data(), n});
        if (sparse_mass) note_page_mass(keys, {page_mass_.data(), call.page_count});
      }
    }
    // Measure mode: the same call over every page, into its own state (no output).
    if (measure && call.full_task_count > 0 && o == FenceOutcome::signalled && fault_.what == nullptr) {
      AttentionBatch batch;
      batch.shape = shape_;
      batch.tasks = schedule_.full_tasks().subspan(call.full_task_first, call.full_task_count);
      batch.pages = schedule_.full_pages().subspan(call.full_page_first, call.full_page_count);
      batch.query_positions = {positions_.data(), total_new_};
      batch.window_tokens = g.kinds.window_of(layer);
      batch.queries = {q, q_elements};
      batch.state = {full_state_.data(), states * state_stride};
      batch.load_state = true;
      batch.store_state = true;
      batch.write_output = false;
      Result<Fence> fence = backend_.attention(batch, {waits_.data(), wait_count});
      if (!fence.ok()) {
        note_refusal("the attention kernel (sparse measure) was refused by the backend", fence.error(), layer);
        break;
      }
      Fence full = fence.value();
      ++counters_.attention_calls;
      if (settings_.read_in_place) attach_in_place(full, layer);
      if (!call.final()) attach_pass_leases(full, false);
      o = wait(full, "the attention kernel (sparse measure) did not signal", layer, true);
      release_fence(full);
    }
    if (!call.final()) {
      ++counters_.passes;
      retire_pass();
      issue_next_pass_of(layer);  // the layer's next pass, if the plan has one
    }
    if (o != FenceOutcome::signalled) break;
    if (!call.final()) release_fence(attention);
  }
  if (summaries_ != nullptr && settings_.sparse.enabled() && fault_.what == nullptr) note_captured_mass(layer, measure, sparse_mass);
  if (settings_.read_in_place) close_in_place(layer);
  retire_pass();
  retire_uploads(layer);
  if (fault_.what == nullptr) write_back(layer, {&attention, 1});
  release_fence(attention);
  if (layer + 1 < g.dense_layers) issue_next_pass_of(layer + 1);  // overlaps the engine's next layer
  return fault_.what == nullptr ? Status::success() : fault_status();
}

void KvRuntimeImpl::retire_uploads(std::uint32_t layer) noexcept {
  PagePool& pages = arena_.pages();
  for (std::uint32_t i = 0; i < upload_count_; ++i) {
    const FenceOutcome o = wait(uploads_[i], "a new-row upload (h2d) did not signal", layer);
    const std::uint32_t page = upload_pages_[i];
    if (o != FenceOutcome::signalled && pages.state(page) == PageState::owned) pages.quarantine_page(pages.id(page));
    release_fence(uploads_[i]);
  }
  upload_count_ = 0;
  for (std::uint32_t i = 0; i < summary_upload_count_; ++i) {
    wait(summary_uploads_[i], "a page-summary upload (h2d) did not signal", layer);
    release_fence(summary_uploads_[i]);
  }
  summary_upload_count_ = 0;
}

Status KvRuntimeImpl::attend_none(std::uint32_t layer) {
  AK_ASSERT(step_open_, "kv runtime: attend_none() outside a step");
  AK_ASSERT(layer == layers_attended_ && layer + 1 == layers_written_, "kv runtime: attend_none(l) must follow write_kv(l)");
  StepScope scope(counters_);
  ++layers_attended_;
  const StepPlan& plan = planner_.plan();
  // Read in place: the promotions copy from the host pool; no pass is left to run below.
  if (settings_.read_in_place) {
    if (fault_.what == nullptr) open_in_place(layer);
    close_in_place(layer);
  }
  // The layer's passes still run: their promotions read the tiles they fill.
  for (;;) {
    if (pass_issued_ != UINT32_MAX) {
      AK_ASSERT(plan.passes[pass_issued_].layer == layer, "kv runtime: a pass of another layer holds the tiles");
      tally_pass(pass_issued_, layer, false);
      ++counters_.passes;
      retire_pass();
      continue;
    }
    if (fault_.what != nullptr || passes_issued_ >= plan.passes.size() || plan.passes[passes_issued_].layer != layer) break;
    if (!issue_pass(passes_issued_)) break;
  }
  if (fault_.what == nullptr) write_back(layer, {uploads_.data(), upload_count_});
  retire_uploads(layer);
  if (layer + 1 < plan_.geometry.dense_layers) issue_next_pass_of(layer + 1);
  return fault_.what == nullptr ? Status::success() : fault_status();
}

void KvRuntimeImpl::write_back(std::uint32_t layer, std::span<const Fence> waits) noexcept {
  const StepPlan& plan = planner_.plan();
  std::uint32_t n = 0;
  const std::uint32_t ticket_first = write_back_ticket_count_;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const LayerPlan& lp = layer_plan(layer, e);
    for (std::uint32_t w = 0; w < plan.write_back_count(lp); ++w) {
      const WriteBack wb = plan.write_back(lp, w);
      Ticket ticket;
      if (tickets_.open(wb.host_offset, wb.bytes, HostAccess::write, &ticket) != LeaseStatus::ok) {
        note_fault("a host range to write back is held by a quarantined or conflicting copy", FenceOutcome::failed, layer);
        return;
      }
      write_back_tickets_[write_back_ticket_count_++] = ticket;
      regions_[n++] = CopyRegion{wb.device_offset, wb.host_offset, wb.bytes};
      counters_.d2h_bytes += wb.bytes;
      counters_.bytes_written_back += wb.bytes;
    }
  }
  if (n == 0) return;
  Result<Fence> d2h = backend_.copy(CopyDirection::d2h, {regions_.data(), n}, waits);
  if (!d2h.ok()) {
    note_refusal("the tail write-back (d2h) was refused by the backend", d2h.error(), layer);
    return;
  }
  ++counters_.d2h_copies;
  write_backs_[layer] = d2h.value();
  for (std::uint32_t i = ticket_first; i < write_back_ticket_count_; ++i) {
    tickets_.attach(write_back_tickets_[i], write_backs_[layer]);
  }
}

void KvRuntimeImpl::close_ticket(Ticket ticket) noexcept {
  LeaseStatus s = tickets_.close(ticket);
  if (s == LeaseStatus::fences_pending) s = tickets_.close_when_done(ticket);
  AK_ASSERT(s == LeaseStatus::ok || s == LeaseStatus::quarantined, "kv runtime: a copy ticket could not close");
}

void KvRuntimeImpl::finish_promotions() noexcept {
  const StepPlan& plan = planner_.plan();
  for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
    const Promotion& p = plan.promotions[i];
    // A promotion whose pass was never issued (the step failed first) never copied: quarantine
    // its target rather than let it land holding bytes that never arrived.
    const bool issued = p.pass < passes_issued_;
    if ((promotion_failed_[i] != 0 || !issued) && arena_.pages().current(p.pool_page) &&
        arena_.pages().state(p.pool_page.index) == PageState::staging) {
      arena_.pages().quarantine_page(p.pool_page);  // counted by the pool: end_step sums the quarantines
    }
  }
  planner_.step_completed();
}

Status KvRuntimeImpl::end_step() {
  AK_ASSERT(step_open_, "kv runtime: end_step() outside a step");
  const std::uint32_t layers = plan_.geometry.dense_layers;
  AK_ASSERT(fault_.what != nullptr || layers_attended_ == layers, "kv runtime: end_step() before every layer attended");
  StepScope scope(counters_);
  retire_pass();
  retire_uploads(layers_written_ == 0 ? 0 : layers_written_ - 1);
  for (std::uint32_t l = 0; l < layers; ++l) {
    wait(write_backs_[l], "the tail write-back (d2h) did not signal", l);
    release_fence(write_backs_[l]);
  }
  for (std::uint32_t i = 0; i < write_back_ticket_count_; ++i) {
    close_ticket(write_back_tickets_[i]);
  }
  write_back_ticket_count_ = 0;
  leases_.poll();
  tickets_.poll();
  retire_device_copies();  // copies on adopt: the step's kernels waited for them on the device
  finish_sparse_staging();
  finish_sparse_step();
  finish_promotions();
  if (layers_attended_ == layers) checkpoint_states();  // the state at a page boundary → its history's checkpoint
  const bool failed = fault_.what != nullptr || layers_attended_ < layers;
  if (failed) {
    if (fault_.what == nullptr) note_fault("the step ended before every dense layer was attended", FenceOutcome::failed, layers_attended_);
    for (std::uint32_t e = 0; e < entries(); ++e) slot_faulted_[scheduled_[e].context.slot] = 1;
    ++counters_.failed_steps;
  }
  counters_.quarantines = leases_.counters().quarantined + tickets_.counters().quarantined +
                          arena_.pages().counters().quarantines;
  sync_retained_counters();
  counters_.device_allocations_after_warmup = backend_.stats().device_allocations - device_allocations_baseline_;
  ++counters_.steps;
  step_open_ = false;
  apply_deferred_cancels();
  return failed ? fault_status() : Status::success();
}

}  // namespace activekv::runtime_impl
