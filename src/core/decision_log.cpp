// decision_log.cpp — the fixed ring of decisions and the static text of each reason.
#include "activekv/decision_log.hpp"

#include "activekv/assert.hpp"

namespace activekv {

const char* decision_kind_name(DecisionKind kind) noexcept {
  switch (kind) {
    case DecisionKind::admit: return "admit";
    case DecisionKind::queue: return "queue";
    case DecisionKind::grow: return "grow";
    case DecisionKind::borrow: return "borrow";
    case DecisionKind::reclaim: return "reclaim";
    case DecisionKind::promote: return "promote";
    case DecisionKind::evict: return "evict";
    case DecisionKind::refuse: return "refuse";
    case DecisionKind::finish: return "finish";
    case DecisionKind::cancel: return "cancel";
    case DecisionKind::retire: return "retire";
    case DecisionKind::retain: return "retain";
    case DecisionKind::adopt: return "adopt";
    case DecisionKind::drop_retained: return "drop_retained";
  }
  return "?";
}

const char* reason_name(Reason reason) noexcept {
  switch (reason) {
    case Reason::floor_fits: return "floor_fits";
    case Reason::floor_fits_after_reclaim: return "floor_fits_after_reclaim";
    case Reason::no_free_history: return "no_free_history";
    case Reason::floor_does_not_fit: return "floor_does_not_fit";
    case Reason::queue_not_empty: return "queue_not_empty";
    case Reason::queue_full: return "queue_full";
    case Reason::context_too_long: return "context_too_long";
    case Reason::budget_invalid: return "budget_invalid";
    case Reason::to_target: return "to_target";
    case Reason::to_burst: return "to_burst";
    case Reason::borrowed_first: return "borrowed_first";
    case Reason::toward_floor: return "toward_floor";
    case Reason::new_tail: return "new_tail";
    case Reason::extend_run: return "extend_run";
    case Reason::hot_page: return "hot_page";
    case Reason::run_slides: return "run_slides";
    case Reason::finished: return "finished";
    case Reason::cancelled: return "cancelled";
    case Reason::host_range_quarantined: return "host_range_quarantined";
    case Reason::no_usable_history: return "no_usable_history";
    case Reason::prefix_retained: return "prefix_retained";
    case Reason::prefix_adopted: return "prefix_adopted";
    case Reason::prefix_copied: return "prefix_copied";
    case Reason::retained_lru: return "retained_lru";
    case Reason::retained_cancelled: return "retained_cancelled";
    case Reason::retained_on_device: return "retained_on_device";
    case Reason::retained_first: return "retained_first";
    case Reason::device_pages_adopted: return "device_pages_adopted";
    case Reason::device_pages_copied: return "device_pages_copied";
    case Reason::retained_shutdown: return "retained_shutdown";
    case Reason::run_behind_tier: return "run_behind_tier";
    case Reason::prefix_cached: return "prefix_cached";
    case Reason::prefix_cache_adopted: return "prefix_cache_adopted";
    case Reason::prefix_cache_lru: return "prefix_cache_lru";
    case Reason::run_behind_cache: return "run_behind_cache";
    case Reason::prefix_cache_partial: return "prefix_cache_partial";
    case Reason::ring_not_covering: return "ring_not_covering";
    case Reason::prefix_cache_ring_cut: return "prefix_cache_ring_cut";
    case Reason::prefix_cache_state_cut: return "prefix_cache_state_cut";
    case Reason::tier_ring_cut: return "tier_ring_cut";
    case Reason::tier_state_cut: return "tier_state_cut";
    case Reason::prefix_cache_state_kept: return "prefix_cache_state_kept";
    case Reason::prefix_cache_state_lru: return "prefix_cache_state_lru";
  }
  return "?";
}

const char* reason_text(Reason reason) noexcept {
  switch (reason) {
    case Reason::floor_fits: return "a host history is free and the floor fits in the page pool";
    case Reason::floor_fits_after_reclaim: return "the floor fits once borrowed pages are taken back";
    case Reason::no_free_history: return "every host history is in use (raise --host-pool or wait)";
    case Reason::floor_does_not_fit: return "the page pool cannot hold another floor (raise --device-pool or wait)";
    case Reason::queue_not_empty: return "earlier requests are waiting (first in, first out)";
    case Reason::queue_full: return "the queue is full (--queue-max)";
    case Reason::context_too_long: return "longer than --max-context";
    case Reason::budget_invalid: return "floor ≤ target ≤ burst does not hold, or the floor is below the minimum";
    case Reason::to_target: return "below its target: held by right";
    case Reason::to_burst: return "above its target: borrowed from free pages";
    case Reason::borrowed_first: return "a borrowed page (above target), least-recently-active context first";
    case Reason::toward_floor: return "below target toward the floor, for another context's floor";
    case Reason::new_tail: return "the step's new tokens need a tail page";
    case Reason::extend_run: return "staged just below the newest run: the run grows down (exact policy)";
    case Reason::hot_page: return "its score crossed the hotness threshold";
    case Reason::run_slides: return "the layer is at its page cap: the run's oldest page gives way";
    case Reason::finished: return "finished: every page and the history returned";
    case Reason::cancelled: return "cancelled: every page and the history returned";
    case Reason::host_range_quarantined:
      return "a copy that touched the history's host range failed: the history is retired for good";
    case Reason::no_usable_history:
      return "every host history is retired after failed copies: recreate the runtime and its device";
    case Reason::prefix_retained: return "finished: its full pages stay on the host as a retained prefix";
    case Reason::prefix_adopted: return "the prompt starts with a retained prefix: its history is adopted in place";
    case Reason::prefix_copied:
      return "the prompt starts with a prefix a running context holds: its rows are copied (copy on adopt)";
    case Reason::retained_lru:
      return "admission needed a history: the least-recently-used retained prefix gave way (retained never blocks)";
    case Reason::retained_cancelled: return "the context holding the prefix was cancelled or its history retired";
    case Reason::retained_on_device:
      return "finished: its full device pages stay, borrowed by the retained history, while pages are free";
    case Reason::retained_first: return "a retained history's device pages are reclaimed before any running context's";
    case Reason::device_pages_adopted:
      return "the retained history's device pages change owner to the adopting context: nothing is copied";
    case Reason::device_pages_copied:
      return "the prefix's pages resident on the device are copied device to device, not streamed from the host";
    case Reason::retained_shutdown: return "shutdown: the retained histories' device pages go back to the pool";
    case Reason::run_behind_tier:
      return "rows restored from the KV tier moved the history's end past the adopted run: its pages give way";
    case Reason::prefix_cached:
      return "finished: its full pages are stored in the host prefix cache (pages already there are shared, not copied)";
    case Reason::prefix_cache_adopted:
      return "the prompt's next full pages are in the host prefix cache: copied host to host into the history";
    case Reason::prefix_cache_lru:
      return "the prefix cache is full: its least recently used leaf pages give way (a shared stem outlives its branches)";
    case Reason::run_behind_cache:
      return "rows adopted from the prefix cache moved the history's end past the adopted run: its pages give way";
    case Reason::prefix_cache_partial:
      return "the prompt's last page is partial and a cached page a finished answer filled starts with its tokens: its "
             "first rows are copied to the host and the device, not prefilled";
    case Reason::ring_not_covering:
      return "the match's window no longer lies in the window layers' host rings: the prompt is prefilled instead";
    case Reason::prefix_cache_ring_cut:
      return "the prefix cache holds the prompt's pages, but not the window layers' rows the next query's window needs "
             "(gone from the finished history's rings when it was cached): the adoption is cut back to the longest "
             "prefix whose window rows the cache holds, and the rest is prefilled";
    case Reason::prefix_cache_state_cut:
      return "the prefix cache holds the recurrent state only where the finished context had checkpoints: the "
             "adoption is cut back to the last page boundary with a cached state, and the rest is prefilled";
    case Reason::tier_ring_cut:
      return "the KV tier holds the prompt's blocks, but not the window layers' rows the next query's window needs "
             "(gone from the writing history's rings, or below what the restore writes): the restore is cut back to "
             "the longest run whose window rows its blocks carry, and the rest is prefilled";
    case Reason::tier_state_cut:
      return "the KV tier holds the recurrent state only at the ends of blocks whose writer had a checkpoint there: the "
             "restore is cut back to the last block carrying its state, and the rest is prefilled";
    case Reason::prefix_cache_state_kept:
      return "finished: its recurrent-state checkpoints at page boundaries are stored beside its cached pages, so a "
             "prompt can adopt up to them";
    case Reason::prefix_cache_state_lru:
      return "the prefix cache's state checkpoints are full: the least recently used page's state gives way (its rows "
             "stay; a prompt adopts up to an earlier cached state)";
  }
  return "?";
}

DecisionLog::DecisionLog(std::uint32_t capacity) : ring_(capacity) {
  AK_ASSERT(capacity > 0, "a decision log holds at least one record");
}

std::uint32_t DecisionLog::size() const noexcept {
  return static_cast<std::uint32_t>(recorded_ < ring_.size() ? recorded_ : ring_.size());
}

const Decision& DecisionLog::at(std::uint32_t i) const noexcept {
  AK_ASSERT(i < size(), "decision index outside the held records");
  const std::uint64_t first = recorded_ - size();
  return ring_[(first + i) % ring_.size()];
}

std::uint32_t DecisionLog::select(std::uint64_t step, std::uint32_t slot, std::span<Decision> out) const noexcept {
  std::uint32_t matched = 0;
  const std::uint32_t held = size();
  for (std::uint32_t i = 0; i < held; ++i) {
    const Decision& d = at(i);
    if (d.step != step) continue;
    if (slot != UINT32_MAX && d.slot != slot && d.other_slot != slot) continue;
    if (matched < out.size()) out[matched] = d;
    ++matched;
  }
  return matched;
}

}  // namespace activekv
