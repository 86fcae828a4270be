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
//     only on the tokens before it (docs/PREFIX.md, "Exactness"), so outputs do not change.
#include "runtime/kv_runtime_impl.hpp"

#include <cstring>

namespace activekv::runtime_impl {

Status KvRuntimeImpl::create_prefix_cache() {
  // A hybrid model's cached pages would come without a state checkpoint, so no prompt could adopt
  // them: the cache's part of the host pool stays unused (docs/RUNTIME.md "Recurrent state").
  if (prefix_ == nullptr || plan_.host.prefix_cache_pages == 0 || plan_.state.enabled()) return Status::success();
  const runtime::PrefixIndexConfig& index = prefix_->config();
  const runtime::PrefixCacheConfig config{plan_.host.prefix_cache_pages, plan_.arena.page_tokens, plan_.geometry.dense_layers,
                                          plan_.host.row_bytes, index.pages_per_history, index.model_identity};
  const std::span<std::byte> store = backend_.host_pool().subspan(
      plan_.host.prefix_cache_offset, std::uint64_t{plan_.host.prefix_cache_pages} * plan_.host.prefix_cache_page_bytes);
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
}

std::uint32_t KvRuntimeImpl::cache_prefix_pages(std::span<const std::int32_t> prompt) noexcept {
  const std::uint32_t P = plan_.arena.page_tokens;
  if (cache_ == nullptr || prompt.size() <= P) return 0;
  return cache_->match(prompt, static_cast<std::uint32_t>((prompt.size() - 1) / P));
}

std::uint32_t KvRuntimeImpl::host_prefix_tokens(std::span<const std::int32_t> prompt, runtime::PrefixMatch match) noexcept {
  return std::max(match.pages, cache_prefix_pages(prompt)) * plan_.arena.page_tokens;
}

void KvRuntimeImpl::offer_to_cache(std::uint32_t slot, std::span<const std::int32_t> tokens) noexcept {
  if (cache_ == nullptr) return;
  const std::byte* host = backend_.host_pool().data();
  const std::uint32_t P = plan_.arena.page_tokens;
  const runtime::PrefixCacheInsert done = cache_->insert(tokens, [&](std::uint32_t layer, std::uint32_t page) {
    return host + plan_.host.row_offset(slot, layer, page * P);
  });
  counters_.prefix_cache_pages_stored += done.stored;
  counters_.prefix_cache_pages_shared += done.shared;
  if (done.evicted > 0) record_prefix(DecisionKind::evict, Reason::prefix_cache_lru, slot, done.evicted);
  if (done.stored > 0) record_prefix(DecisionKind::retain, Reason::prefix_cached, slot, done.stored);
  sync_cache_counters();
}

std::uint32_t KvRuntimeImpl::restore_from_cache(std::uint32_t slot, std::span<const std::int32_t> prompt,
                                                std::uint32_t reused) noexcept {
  if (cache_ == nullptr || prompt.size() <= plan_.arena.page_tokens) return reused;
  ++counters_.prefix_cache_lookups;
  const std::uint32_t P = plan_.arena.page_tokens;
  const std::uint32_t first = reused / P;
  const std::uint32_t end = cache_prefix_pages(prompt);
  // Pages still landing by a device-to-device copy end the run at the local prefix and cannot be
  // given up before their fence: the cache's rows are not used this time (the rest prefills).
  if (end <= first || adoption_[slot].device_copied > 0) return reused;
  const std::span<std::byte> host = backend_.host_pool();
  const std::span<const std::uint32_t> chain = cache_->chain();
  for (std::uint32_t l = 0; l < plan_.geometry.dense_layers; ++l) {
    for (std::uint32_t p = first; p < end; ++p) {
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
