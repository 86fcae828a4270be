// kv_runtime_prefix_cache.cpp — the KV runtime's side of the host prefix cache (docs/PREFIX.md,
// "The host prefix cache"; the cache itself: prefix_cache.hpp; the class: kv_runtime_impl.hpp).
//
// Three levels answer "which rows of this prompt are already computed", in order:
//   1. the retained histories (prefix_index.hpp): adopted in place or copied, with their device pages;
//   2. the host prefix cache: the prompt's next full pages, copied host to host into the history;
//   3. the shared KV tier (kv_runtime_tier.cpp): whole blocks past what the host holds.
// Each starts where the one before stopped, so a local miss asks the tier only for what neither
// host level holds, and a page evicted from the cache is still found in the tier.
//
// Invariants:
//   - the cache's store is the host pool's last part (plan.host.prefix_cache_offset), written only
//     here, between steps, by the host thread: no copy ticket or DMA ever touches it;
//   - a finished history is offered only when its rows are final and sound (not quarantined, not
//     faulted), under the same conditions as retention;
//   - adoption copies rows below the context's length before the context's first step, into a
//     history no copy is in flight on (it was just admitted), so nothing reads them meanwhile;
//   - the rows copied are the bytes a finished context wrote for the same tokens: a row depends
//     only on the tokens before it (docs/PREFIX.md, "Exactness"), so outputs do not change;
//   - window layers (a host ring each, memory_plan.hpp): a page is cached with its window rows only
//     while the offering history's rings still hold them; an adoption ending at page E needs the
//     window rows of every page a query at E·P reads, [first_page_seen(E·P), E), and is cut back to
//     the longest E the cache covers (counted, logged, explained). Those pages' rows go into the new
//     history's ring slots (token t at t mod ring_tokens); older pages are neither copied nor read;
//   - recurrent state (hybrid models): an offered history's state checkpoints at page boundaries go
//     into the cache's state slots beside their pages; an adoption is cut back to the last page with
//     a cached state (counted, logged, explained), and that state becomes the new history's newest
//     checkpoint, from which open_context's restore_state fills the context's recurrent slot.
#include "runtime/kv_runtime_impl.hpp"

#include <cstring>

namespace activekv::runtime_impl {

Status KvRuntimeImpl::create_prefix_cache() {
  // A hybrid model without state checkpoints (none planned) could adopt nothing from it.
  if (prefix_ == nullptr || plan_.host.prefix_cache_pages == 0) return Status::success();
  if (plan_.state.enabled() && plan_.host.prefix_cache_states == 0) return Status::success();
  const runtime::PrefixIndexConfig& index = prefix_->config();
  const runtime::PrefixCacheConfig config{plan_.host.prefix_cache_pages, plan_.arena.page_tokens, plan_.geometry.dense_layers,
                                          plan_.host.row_bytes, index.pages_per_history, index.model_identity,
                                          plan_.host.prefix_cache_states, plan_.host.prefix_cache_state_bytes};
  const std::span<std::byte> store =
      backend_.host_pool().subspan(plan_.host.prefix_cache_offset, runtime::PrefixCache::store_bytes(config));
  Result<runtime::PrefixCache> cache = runtime::PrefixCache::create(config, store);
  if (!cache.ok()) return cache.error();
  cache_ = std::make_unique<runtime::PrefixCache>(std::move(cache).value());
  counters_.prefix_cache_pages_total = cache_->pages_total();
  return Status::success();
}

void KvRuntimeImpl::sync_cache_counters() noexcept {
  counters_.prefix_cache_pages = cache_->pages_used();
  counters_.prefix_cache_bytes = cache_->bytes_used();
  counters_.prefix_cache_evictions = cache_->evictions();
  counters_.prefix_cache_states = cache_->states_used();
  counters_.prefix_cache_state_evictions = cache_->state_evictions();
}

std::uint32_t KvRuntimeImpl::cache_prefix_pages(std::span<const std::int32_t> prompt) noexcept {
  const std::uint32_t P = plan_.arena.page_tokens;
  cache_matched_pages_ = 0;
  if (cache_ == nullptr || prompt.size() <= P) return 0;
  cache_matched_pages_ = cache_->match(prompt, static_cast<std::uint32_t>((prompt.size() - 1) / P));
  cache_window_pages_ = cache_ring_covered(cache_matched_pages_);
  return cache_state_covered(cache_window_pages_);
}

// Hybrid models: the longest end ≤ n whose page end has a cached state (0 when none has).
std::uint32_t KvRuntimeImpl::cache_state_covered(std::uint32_t n) const noexcept {
  if (!plan_.state.enabled()) return n;
  const std::span<const std::uint32_t> chain = cache_->chain();
  std::uint32_t end = n;
  while (end > 0 && !cache_->has_state(chain[end - 1])) --end;
  return end;
}

// The first page any window layer's query at token q reads (q itself when there are none).
std::uint32_t KvRuntimeImpl::window_first_page(std::uint32_t q) const noexcept {
  const std::uint32_t P = plan_.arena.page_tokens;
  std::uint32_t first = q / P;
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
    if (plan_.host.is_ring(l)) first = std::min(first, plan_.host.first_page_seen(l, q, P));
  }
  return first;
}

// The cut rule: the longest end ≤ n whose first query's window the cache holds, every page of
// [window_first_page(end · P), end) with its window rows. O(n × window pages), at admission only.
std::uint32_t KvRuntimeImpl::cache_ring_covered(std::uint32_t n) const noexcept {
  if (plan_.host.ring_tokens == 0) return n;
  const std::span<const std::uint32_t> chain = cache_->chain();
  for (std::uint32_t end = n; end > 0; --end) {
    bool held = true;
    for (std::uint32_t p = window_first_page(end * plan_.arena.page_tokens); p < end && held; ++p) {
      held = cache_->window_rows(chain[p]);
    }
    if (held) return end;
  }
  return 0;
}

std::uint32_t KvRuntimeImpl::host_prefix_tokens(std::span<const std::int32_t> prompt, runtime::PrefixMatch match) noexcept {
  return std::max(match.pages, cache_prefix_pages(prompt)) * plan_.arena.page_tokens;
}

void KvRuntimeImpl::offer_to_cache(std::uint32_t slot, std::span<const std::int32_t> tokens) noexcept {
  if (cache_ == nullptr) return;
  const std::byte* host = backend_.host_pool().data();
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t length = budgets_.context(slot).length_tokens;
  const runtime::PrefixCacheInsert done = cache_->insert(tokens, [&](std::uint32_t layer, std::uint32_t page) -> const std::byte* {
    // A window layer's ring holds the page while its first row is among the last ring_tokens written.
    if (!plan_.host.holds(layer, length, page * P)) return nullptr;
    return host + plan_.host.row_offset(slot, layer, page * P);
  });
  counters_.prefix_cache_pages_stored += done.stored;
  counters_.prefix_cache_pages_shared += done.shared;
  counters_.prefix_cache_window_less_pages += done.without_window_rows;
  if (done.evicted > 0) record_prefix(DecisionKind::evict, Reason::prefix_cache_lru, slot, done.evicted);
  if (done.stored > 0) record_prefix(DecisionKind::retain, Reason::prefix_cached, slot, done.stored);
  offer_states_to_cache(slot);
  sync_cache_counters();
}

// The history's state checkpoints at page boundaries the chain just stored reaches go beside their
// pages (roughly deepest first: the longest adoptions). Every position in checkpoint_pos_ names bytes that
// arrived (kv_runtime_state.cpp), and nothing writes them between steps.
void KvRuntimeImpl::offer_states_to_cache(std::uint32_t slot) noexcept {
  if (!plan_.state.enabled() || cache_->config().states == 0) return;
  const StatePlan& sp = plan_.state;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t pages = static_cast<std::uint32_t>(cache_->chain().size());
  const std::byte* host = backend_.host_pool().data();
  const std::uint64_t evicted_before = cache_->state_evictions();
  std::uint32_t stored = 0;
  // The newest and the prompt's first, then every K pages from the deepest: one pass, O(checkpoints).
  for (std::uint32_t n = 0; n < sp.checkpoints; ++n) {
    const std::uint32_t index = n < StatePlan::every_first ? n : sp.checkpoints - 1 - (n - StatePlan::every_first);
    const std::uint32_t p = checkpoint_pos_[std::size_t{slot} * sp.checkpoints + index];
    if (p == UINT32_MAX || p == 0 || p > pages * P) continue;
    const bool had = cache_->has_state(cache_->chain()[p / P - 1]);
    if (!cache_->put_state(p / P - 1, host + sp.checkpoint_offset(slot, index))) break;
    stored += had ? 0u : 1u;
  }
  const auto evicted = static_cast<std::uint32_t>(cache_->state_evictions() - evicted_before);
  counters_.prefix_cache_states_stored += stored;
  if (evicted > 0) record_prefix(DecisionKind::evict, Reason::prefix_cache_state_lru, slot, evicted);
  if (stored > 0) record_prefix(DecisionKind::retain, Reason::prefix_cache_state_kept, slot, stored);
}

void KvRuntimeImpl::offer_prefix(ContextId context, std::span<const std::int32_t> tokens) {
  AK_ASSERT(!step_open_, "kv runtime: offer_prefix() during a step");
  AK_ASSERT(budgets_.current(context), "kv runtime: offer_prefix() of a context that is not running");
  const std::uint32_t slot = context.slot;
  if (cache_ == nullptr || history_quarantined(slot) || slot_faulted_[slot] != 0) return;
  // Rows below the length are final on the host once the step that wrote them ended.
  const std::size_t usable = std::min<std::size_t>(tokens.size(), budgets_.context(slot).length_tokens);
  if (usable < plan_.arena.page_tokens) return;
  offer_to_cache(slot, tokens.first(usable));
}

std::uint32_t KvRuntimeImpl::restore_from_cache(std::uint32_t slot, std::span<const std::int32_t> prompt,
                                                std::uint32_t reused) noexcept {
  if (cache_ == nullptr || prompt.size() <= plan_.arena.page_tokens) return reused;
  ++counters_.prefix_cache_lookups;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t first = reused / P;
  const std::uint32_t end = cache_prefix_pages(prompt);
  if (cache_matched_pages_ > std::max(cache_window_pages_, first)) {
    // The cache matched further, but a window layer's rows the query there needs were not cached.
    const std::uint32_t cut = cache_matched_pages_ - std::max(cache_window_pages_, first);
    ++counters_.prefix_cache_ring_cuts;
    counters_.prefix_cache_ring_cut_pages += cut;
    adoption_[slot].cache_ring_cut = cut;
    record_prefix(DecisionKind::adopt, Reason::prefix_cache_ring_cut, slot, cut);
  }
  if (cache_window_pages_ > std::max(end, first)) {
    // The cache holds the rows further, but the recurrent state only at an earlier page boundary.
    const std::uint32_t cut = cache_window_pages_ - std::max(end, first);
    ++counters_.prefix_cache_state_cuts;
    counters_.prefix_cache_state_cut_pages += cut;
    adoption_[slot].cache_state_cut = cut;
    record_prefix(DecisionKind::adopt, Reason::prefix_cache_state_cut, slot, cut);
  }
  // Pages still landing by a device-to-device copy end the run at the local prefix and cannot be
  // given up before their fence: the cache's rows are not used this time (the rest prefills).
  if (end <= first || adoption_[slot].device_copied > 0) return reused;
  const std::span<std::byte> host = backend_.host_pool();
  const std::span<const std::uint32_t> chain = cache_->chain();
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
    // A window layer takes only the pages the first query's window reads (all cached: the cut rule),
    // into its ring's slots; the pages below them would be overwritten before anything read them.
    const std::uint32_t from = plan_.host.is_ring(l) ? plan_.host.first_page_seen(l, end * P, P) : first;
    for (std::uint32_t p = from; p < end; ++p) {
      AK_ASSERT(!plan_.host.is_ring(l) || cache_->window_rows(chain[p]), "kv runtime: a window page the cut rule let through");
      std::memcpy(host.data() + plan_.host.row_offset(slot, l, p * P), cache_->rows(chain[p], l), P * plan_.host.row_bytes);
    }
  }
  cache_->touch_chain(end);
  // Device pages handed over in place end at the local prefix; the history now ends past them and
  // a run is contiguous up to its tail: the run's pages give way (logged), the sink and promoted stay.
  if (adoption_[slot].device_pages > 0) {
    const std::uint32_t given_up = budgets_.release_runs(slot, Reason::run_behind_cache);
    adoption_[slot].device_pages -= std::min(adoption_[slot].device_pages, given_up);
  }
  budgets_.context(slot).length_tokens = end * P;
  if (plan_.state.enabled()) {
    // The cached state at the adopted end becomes the history's only checkpoint (older ones belong
    // to the history's previous prefix, or lie below it): restore_state reads it into the slot.
    drop_checkpoints(slot, 0);
    std::memcpy(host.data() + plan_.state.checkpoint_offset(slot, StatePlan::latest), cache_->state(chain[end - 1]),
                plan_.state.state_bytes);
    checkpoint_pos_[std::size_t{slot} * plan_.state.checkpoints + StatePlan::latest] = end * P;
  }
  adoption_[slot].cache_pages_first = first;
  adoption_[slot].cache_pages_end = end;
  adoption_[slot].cache_shared = cache_->prefixes_through(chain[first]);
  if (reused == 0) ++counters_.prefix_adoptions;
  ++counters_.prefix_cache_hits;
  counters_.prefix_cache_hit_tokens += (end - first) * P;
  counters_.prefix_reused_tokens += (end - first) * P;
  record_prefix(DecisionKind::adopt, Reason::prefix_cache_adopted, slot, end - first);
  return end * P;
}

}  // namespace activekv::runtime_impl

namespace activekv::runtime_impl {

// The prompt's partial last page (docs/PREFIX_CACHE.md, "The partial last page"). Full pages leave
// up to P − 1 prompt tokens to prefill, which on a repeated prompt is most of what its first step
// computes. A finished answer filled that page in the cache, and its first rows are this prompt's
// (a row depends only on the tokens before it), so they are copied too. The context then starts
// inside a page, and a partly written tail page must be resident on the device: the page is taken
// for every layer now (unreserved free pages only, like a copy on adopt) and filled by one h2d copy
// on the h2d queue, which the first step's kernels and row uploads wait behind; it lands at that
// step's end (retire_device_copies). All layers or none: without room for every layer's page the
// context keeps the page-aligned start.
std::uint32_t KvRuntimeImpl::adopt_partial_page(ContextId context, std::span<const std::int32_t> prompt,
                                                std::uint32_t reused) noexcept {
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t slot = context.slot;
  const std::uint32_t layers = plan_.geometry.dense_layers;
  if (reused == 0 || reused % P != 0 || prompt.size() <= reused + 1) return reused;
  const auto want = static_cast<std::uint32_t>(prompt.size() - 1);  // the last token is fed: its logits
  if (want - reused >= P || step_open_ || plan_.state.enabled() || settings_.sparse.mode != SparseMode::exact) return reused;
  if (adoption_[slot].device_copied > 0) return reused;  // its d2d pages are in flight: the aligned start stands
  const std::uint32_t end = reused / P;
  if (cache_prefix_pages(prompt) != end) return reused;  // the cache's chain must reach the page's parent
  const std::uint32_t rows = want - reused;
  const std::uint32_t page = cache_->match_partial(end, prompt.subspan(reused, rows));
  if (page == runtime::PrefixCache::none) return reused;
  if (!cache_->window_rows(page)) return reused;  // a window layer's rows of it left its ring before it was cached
  // Room for one page per layer, all or none; the page extends a run that ends right below it.
  ContextState& c = budgets_.context(slot);
  if (budgets_.pages_unreserved() < layers || c.pages_held() + layers > c.budget.burst_pages) return reused;
  if (device_copy_regions_.size() < layers || device_copy_pages_.size() < layers) return reused;
  for (std::uint32_t l = 0; l < layers; ++l) {
    const LayerResidency& r = budgets_.layer(slot, l);
    // The layer's own cap: a window layer's is its window's pages, below the context's layer_cap.
    if (r.pages_held() + 1 >= budgets_.layer_cap_of(slot, l)) return reused;
    if (r.run_count > 0 && r.run_first + r.run_count != end) return reused;
  }
  if (device_copy_count_ == device_copies_.size() ||
      device_copy_page_count_ + layers > device_copy_pages_.size()) {
    retire_device_copies();
  }
  const std::span<std::byte> host = backend_.host_pool();
  const std::uint64_t bytes = std::uint64_t{rows} * plan_.host.row_bytes;
  const std::uint32_t page_first = device_copy_page_count_;
  for (std::uint32_t l = 0; l < layers; ++l) {
    const std::uint64_t at = plan_.host.row_offset(slot, l, reused);
    std::memcpy(host.data() + at, cache_->rows(page, l), bytes);
    const std::uint32_t pool_page = budgets_.acquire_copy_page(slot, l, end);
    AK_ASSERT(pool_page != page_none, "kv runtime: a partial page's device page fits: the room was counted first");
    budgets_.push_run_back(slot, l, pool_page);
    device_copy_regions_[l] = CopyRegion{at, plan_.arena.page_offset(pool_page), bytes};
    device_copy_pages_[device_copy_page_count_++] = arena_.pages().id(pool_page);
  }
  // Earlier copies on adopt may have freed a page this one fills: it waits for them on the device.
  const Fence previous[1] = {device_copy_count_ > 0 ? device_copies_[device_copy_count_ - 1].fence : Fence{}};
  Result<Fence> copy = backend_.copy(CopyDirection::h2d, {device_copy_regions_.data(), layers},
                                     {previous, device_copy_count_ > 0 ? 1u : 0u});
  DeviceCopy& d = device_copies_[device_copy_count_++];
  d = DeviceCopy{Fence{}, context, page_first, layers};
  if (!copy.ok()) {
    // Refused: the pages never land; retire quarantines them and marks the context faulted (it
    // writes into them next), so it is cancelled like any context whose tail page was lost.
    retire_device_copies();
  } else {
    d.fence = copy.value();
    const Fence waits[1] = {d.fence};
    // The h2d queue runs it before the step's row uploads into the same page (one queue, in order).
    bool ordered = backend_.enqueue_wait(QueueKind::compute, waits).ok();
    if (ordered && backend_.capabilities().d2d_own_queue) ordered = backend_.enqueue_wait(QueueKind::d2d, waits).ok();
    if (!ordered) retire_device_copies();  // no device-side order: land it now, on the host
    ++counters_.h2d_copies;
    counters_.h2d_bytes += bytes * layers;
  }
  cache_->touch_below_chain(page, end);
  c.length_tokens = want;
  adoption_[slot].cache_partial_rows = rows;
  if (adoption_[slot].cache_pages_end == 0) adoption_[slot].cache_pages_first = end;  // the full pages came from elsewhere
  adoption_[slot].cache_pages_end = end;
  counters_.prefix_cache_hit_tokens += rows;
  counters_.prefix_reused_tokens += rows;
  record_prefix(DecisionKind::adopt, Reason::prefix_cache_partial, slot, rows);
  return want;
}

}  // namespace activekv::runtime_impl
