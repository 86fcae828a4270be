// kv_runtime_sparse_staging.cpp — under a sparse selection, copy through the tiles only the pages
// the kernel reads (docs/SPARSE.md "Staging"; the class: kv_runtime_impl.hpp).
//
// The planner places every non-resident page of a step in a tile page of some pass before any
// query exists (begin_step), and the first pass of each layer is issued before that layer's query
// so that its copy overlaps the engine's work. The selection is made in attend(l). So the plan is
// kept exactly — every page keeps its tile page, its pass and therefore its kernel call — and only
// the set of pages actually copied changes:
//
//   every      every page of the pass (exact staging);
//   predicted  a pass issued before its layer's query copies the pages the context's previous
//              selection read in that layer, plus the sink and the newest pages (no previous
//              selection: every page); a pass issued after the query copies the selected pages;
//              before the kernel of a pass reads it, every selected page the pass did not copy (a
//              miss) is copied into its own tile page, under the pass's leases and new tickets,
//              and the kernel waits for that copy on the device;
//   selected   the passes wait for the query: exactly the selected pages, no miss.
//
// A promotion's source page is always copied (the d2d reads it). Why this keeps every promise:
//   - outputs: the kernel reads the same pages at the same tile offsets in the same calls and
//     order as with every page staged, and every page it reads was copied this pass (asserted:
//     stage_misses fills any that was not), so the outputs are the same bits;
//   - leases and tickets: every copy, a miss included, holds tickets on the host ranges it reads
//     and its fence joins the pass's tile leases; they are released by retire_pass only after
//     every fence signalled (a failed or unknown one quarantines them, as before);
//   - allocation: tile_fill_ and the rest are sized at warm-up; regions reuse regions_.
// Measure mode reads every page (its second kernel), so it stages every page.
#include "runtime/kv_runtime_impl.hpp"

namespace activekv::runtime_impl {

namespace {
// How a tile page was filled in the pass in flight.
enum TileFill : std::uint8_t {
  fill_none = 0,       // not copied this pass: no kernel may read it
  fill_staged = 1,     // copied with the layer's selection known (or every page staged)
  fill_predicted = 2,  // copied before the query, on the prediction
  fill_missed = 3,     // copied in attend(l): selected, not predicted
};
// stage_last_ columns, in KvCounters' order.
enum StageColumn : std::uint32_t { col_selected, col_predicted, col_missed, col_unselected, col_skipped, columns };
static_assert(columns == stage_columns, "kv runtime: a stage_last_ column per pages_stage_* counter");
}  // namespace

std::uint32_t KvRuntimeImpl::tile_position(std::uint64_t device_offset) const noexcept {
  const ArenaPlan& a = plan_.arena;
  AK_ASSERT(device_offset >= a.staging_tiles.offset_bytes, "kv runtime: a staged page outside the tiles");
  const std::uint64_t at = device_offset - a.staging_tiles.offset_bytes;
  const std::uint64_t tile = at / a.tile_bytes;
  AK_ASSERT(tile < a.tiles, "kv runtime: a staged page outside the tiles");
  return static_cast<std::uint32_t>(tile * a.tile_pages + (at % a.tile_bytes) / a.page_bytes);
}

void KvRuntimeImpl::begin_sparse_staging() noexcept {
  selection_layer_ = UINT32_MAX;
  pass_miss_ = Fence{};
  stage_tally_ = summaries_ != nullptr && settings_.sparse.enabled() && !settings_.read_in_place;
  stage_selective_ = stage_tally_ && settings_.sparse.staging != SparseStaging::every && !settings_.sparse.measure;
  defer_passes_ = false;
  if (!stage_tally_) return;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    std::fill_n(stage_last_.data() + std::size_t{scheduled_[e].context.slot} * columns, columns, 0u);
    defer_passes_ = defer_passes_ ||
                    (stage_selective_ && settings_.sparse.staging == SparseStaging::selected && query_count_[e] == 1);
  }
}

bool KvRuntimeImpl::defer_pass_of(std::uint32_t layer) const noexcept {
  return defer_passes_ && selection_layer_ != layer;
}

bool KvRuntimeImpl::page_wanted(std::uint32_t layer, std::uint32_t slot, std::uint32_t logical,
                                bool& predicted) const noexcept {
  const std::uint32_t e = entry_of_slot_[slot];
  AK_ASSERT(e != UINT32_MAX, "kv runtime: a staged page of a context not in the step");
  if (query_count_[e] != 1) return true;  // prefill reads every page
  const std::uint32_t max = sizes_.pages_per_layer_max;
  if (selection_layer_ == layer) return keep_[std::size_t{e} * max + logical] != 0;
  // Before the query: the previous selection of this context and layer, the sink and the newest.
  predicted = true;
  if (predict_generation_[slot] != scheduled_[e].context.generation + 1) return true;  // none yet: every page
  const std::size_t sl = std::size_t{slot} * plan_.geometry.dense_layers + layer;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t n = (layer_plan(layer, e).length_tokens + P - 1) / P;
  const std::uint32_t recent = std::max(1u, settings_.sparse.recent_pages);
  return logical == 0 || logical + recent >= n || logical >= pick_pages_[sl] || last_read_[sl * max + logical] != 0;
}

bool KvRuntimeImpl::plan_pass_copies(std::uint32_t pass, std::uint32_t& regions) noexcept {
  const StepPlan& plan = planner_.plan();
  const StagePass& sp = plan.passes[pass];
  const std::uint32_t tile_pages = plan_.arena.tile_pages;
  for (std::uint32_t i = 0; i < sp.copy_count; ++i) {
    const StageCopy& c = plan.copies[sp.copy_first + i];
    std::uint8_t* fill = tile_fill_.data() + std::size_t{c.tile_slot} * tile_pages + c.tile_page;
    for (std::uint32_t j = 0; j < c.pages; ++j) {
      bool predicted = false;
      const bool want = !stage_selective_ || page_wanted(sp.layer, c.slot, c.logical_first + j, predicted);
      fill[j] = want ? (predicted ? fill_predicted : fill_staged) : fill_none;
    }
  }
  // A promotion copies its page out of the tile: that page is always filled.
  for (std::uint32_t i = 0; i < plan.promotions.size(); ++i) {
    const Promotion& p = plan.promotions[i];
    if (p.pass != pass) continue;
    std::uint8_t& fill = tile_fill_[tile_position(p.device_offset_from)];
    if (fill == fill_none) fill = fill_staged;
  }
  // One ticket per planned copy, over its whole host range (as when every page is staged: a read
  // ticket holds no writer back from a page that is not a tail page, and one ticket per copy keeps
  // the ticket table's work per pass what it was), whether or not a page of it is copied now: a
  // miss copied later in attend joins it. Then one region per run of filled pages in each copy.
  regions = 0;
  for (std::uint32_t i = 0; i < sp.copy_count; ++i) {
    const StageCopy& c = plan.copies[sp.copy_first + i];
    AK_ASSERT(pass_ticket_count_ == i, "kv runtime: a pass's tickets follow its copies");
    Ticket ticket;
    if (tickets_.open(c.host_offset, c.bytes, HostAccess::read, &ticket) != LeaseStatus::ok) {
      note_fault("a host range to stage is held by a quarantined or conflicting copy", FenceOutcome::failed, sp.layer);
      return false;
    }
    pass_tickets_[pass_ticket_count_++] = ticket;
    copy_filled_[i] = 0;
    std::uint32_t* owner = tile_copy_.data() + std::size_t{c.tile_slot} * tile_pages + c.tile_page;
    std::fill_n(owner, c.pages, i);
  }
  for (std::uint32_t i = 0; i < sp.copy_count; ++i) {
    const StageCopy& c = plan.copies[sp.copy_first + i];
    const std::uint8_t* fill = tile_fill_.data() + std::size_t{c.tile_slot} * tile_pages + c.tile_page;
    for (std::uint32_t j = 0; j < c.pages;) {
      if (fill[j] == fill_none) {
        ++j;
        continue;
      }
      std::uint32_t k = j + 1;
      while (k < c.pages && fill[k] != fill_none) ++k;
      const std::uint64_t skip = std::uint64_t{j} * plan.page_bytes, bytes = std::uint64_t{k - j} * plan.page_bytes;
      AK_ASSERT(regions < regions_.size(), "kv runtime: more copy regions in a pass than its pages");
      copy_filled_[i] = 1;
      regions_[regions++] = CopyRegion{c.host_offset + skip, c.device_offset + skip, bytes};
      counters_.h2d_bytes += bytes;
      if (adoption_[c.slot].pages > 0) counters_.h2d_bytes_adopting += bytes;  // a follow-up's history (prefix reuse)
      counters_.bytes_staged += bytes;
      j = k;
    }
  }
  return true;
}

void KvRuntimeImpl::attach_pass_leases(Fence fence, bool fills) noexcept {
  for (std::uint32_t j = 0; j < pass_lease_count_; ++j) {
    const LeaseState state = leases_.state(pass_leases_[j]);
    if (fills && (state == LeaseState::acquired || state == LeaseState::copy_issued)) {
      leases_.copy_issued(pass_leases_[j], fence);
    } else if (state != LeaseState::acquired) {  // acquired: nothing was copied in, so nothing reads it
      leases_.use(pass_leases_[j], fence);
    }
  }
}

bool KvRuntimeImpl::stage_misses(const AttentionCall& call, std::uint32_t layer) noexcept {
  if (!stage_tally_) return true;
  AK_ASSERT(call.pass == pass_issued_, "kv runtime: misses are copied into the pass in flight");
  AK_ASSERT(!pass_miss_.recorded(), "kv runtime: one misses' copy per pass");
  const StepPlan& plan = planner_.plan();
  const auto pages = schedule_.pages().subspan(call.page_first, call.page_count);
  const auto keys = schedule_.keys().subspan(call.page_first, call.page_count);
  const std::uint32_t P = plan_.arena.page_tokens;
  std::uint32_t n = 0;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (!keys[i].staged) continue;
    std::uint8_t& fill = tile_fill_[tile_position(pages[i].arena_offset)];
    if (fill != fill_none) continue;
    AK_ASSERT(stage_selective_, "kv runtime: staging every page leaves no page to miss");
    fill = fill_missed;
    copy_filled_[tile_copy_[tile_position(pages[i].arena_offset)]] |= 2;  // its copy's ticket takes the misses' fence
    if (adoption_[keys[i].slot].pages > 0) counters_.h2d_bytes_adopting += plan.page_bytes;
    const std::uint64_t host = plan_.host.row_offset(keys[i].slot, layer, keys[i].logical * P);
    if (n > 0 && regions_[n - 1].src_offset + regions_[n - 1].bytes == host &&
        regions_[n - 1].dst_offset + regions_[n - 1].bytes == pages[i].arena_offset) {
      regions_[n - 1].bytes += plan.page_bytes;
      continue;
    }
    AK_ASSERT(n < regions_.size(), "kv runtime: more miss regions than a pass's pages");
    regions_[n++] = CopyRegion{host, pages[i].arena_offset, plan.page_bytes};
  }
  if (n > 0) {
    for (std::uint32_t r = 0; r < n; ++r) {
      counters_.h2d_bytes += regions_[r].bytes;
      counters_.bytes_staged += regions_[r].bytes;
    }
    Result<Fence> copy = backend_.copy(CopyDirection::h2d, {regions_.data(), n});
    if (!copy.ok()) {
      note_refusal("the staging copy of the missed pages was refused by the backend", copy.error(), layer);
      return false;
    }
    pass_miss_ = copy.value();
    ++counters_.h2d_copies;
    attach_pass_leases(pass_miss_, true);
    // The tickets already over these pages (their planned copies') hold the range for this copy too.
    for (std::uint32_t j = 0; j < pass_ticket_count_; ++j) {
      if ((copy_filled_[j] & 2) != 0) tickets_.attach(pass_tickets_[j], pass_miss_);
    }
  }
  tally_pass(call.pass, layer, true);
  return true;
}

void KvRuntimeImpl::tally_pass(std::uint32_t pass, std::uint32_t layer, bool attended) noexcept {
  if (!stage_tally_) return;
  const StepPlan& plan = planner_.plan();
  const StagePass& sp = plan.passes[pass];
  const std::uint32_t max = sizes_.pages_per_layer_max;
  const std::uint32_t tile_pages = plan_.arena.tile_pages;
  AK_ASSERT(!attended || selection_layer_ == layer, "kv runtime: a pass is tallied against its layer's selection");
  for (std::uint32_t i = 0; i < sp.copy_count; ++i) {
    const StageCopy& c = plan.copies[sp.copy_first + i];
    const std::uint32_t e = entry_of_slot_[c.slot];
    const std::uint32_t* keep = keep_.data() + std::size_t{e} * max;
    const std::uint8_t* fill = tile_fill_.data() + std::size_t{c.tile_slot} * tile_pages + c.tile_page;
    std::uint32_t* last = stage_last_.data() + std::size_t{c.slot} * columns;
    std::uint8_t* how = pick_staging_.data() + (std::size_t{c.slot} * plan_.geometry.dense_layers + layer) * max;
    for (std::uint32_t j = 0; j < c.pages; ++j) {
      const std::uint32_t g = c.logical_first + j;
      if (!attended || keep[g] == 0) {
        ++last[fill[j] == fill_none ? col_skipped : col_unselected];
        continue;
      }
      AK_ASSERT(fill[j] != fill_none, "kv runtime: the kernel reads a tile page that was not copied this pass");
      switch (static_cast<TileFill>(fill[j])) {
        case fill_none:
        case fill_staged: ++last[col_selected]; how[g] = static_cast<std::uint8_t>(PickStaging::staged); break;
        case fill_predicted: ++last[col_predicted]; how[g] = static_cast<std::uint8_t>(PickStaging::predicted); break;
        case fill_missed: ++last[col_missed]; how[g] = static_cast<std::uint8_t>(PickStaging::missed); break;
      }
    }
  }
}

void KvRuntimeImpl::note_pages_in_place(std::uint32_t layer) noexcept {
  const std::uint32_t max = sizes_.pages_per_layer_max;
  for (const runtime::PageKey& k : schedule_.keys()) {
    if (!k.staged) continue;
    pick_staging_[(std::size_t{k.slot} * plan_.geometry.dense_layers + layer) * max + k.logical] =
        static_cast<std::uint8_t>(PickStaging::in_place);
  }
}

// The tallies of the step's contexts join the counters (end_step).
void KvRuntimeImpl::finish_sparse_staging() noexcept {
  if (!stage_tally_) return;
  for (std::uint32_t e = 0; e < entries(); ++e) {
    const std::uint32_t* last = stage_last_.data() + std::size_t{scheduled_[e].context.slot} * columns;
    counters_.pages_stage_selected += last[col_selected];
    counters_.pages_stage_predicted += last[col_predicted];
    counters_.pages_stage_missed += last[col_missed];
    counters_.pages_stage_unselected += last[col_unselected];
    counters_.pages_stage_skipped += last[col_skipped];
  }
}

}  // namespace activekv::runtime_impl
