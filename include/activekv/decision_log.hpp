// decision_log.hpp — every residency decision, with its reason, in a fixed ring.
//
// A Decision is a fixed-size record: what was decided (kind), why (reason),
// for whom (request id and slot), where (layer, logical page, pool page) and
// how much (pages). Reasons are enum values with static text, so recording a
// decision on the step path builds no string and allocates nothing; the ring
// is sized at warm-up and overwrites its oldest records. explain() reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace activekv {

enum class DecisionKind : std::uint8_t { admit, queue, grow, borrow, reclaim, promote, evict, refuse, finish, cancel, retire,
                                        retain, adopt, drop_retained };

enum class Reason : std::uint8_t {
  floor_fits,            // admit: a history is free and the floor fits in the pool
  floor_fits_after_reclaim,  // admit: the floor fits once borrowed/above-floor pages are reclaimed
  no_free_history,       // queue: every host history is in use
  floor_does_not_fit,    // queue: the pool cannot hold another floor even after reclamation
  queue_not_empty,       // queue: earlier requests wait (FIFO)
  queue_full,            // refuse: --queue-max requests already wait
  context_too_long,      // refuse: longer than --max-context
  budget_invalid,        // refuse: floor/target/burst out of order or below the minimum floor
  to_target,             // grow: held below target, taken by right
  to_burst,              // borrow: above target, from free pages only
  borrowed_first,        // reclaim: a borrowed page (above target), least-recently-active context first
  toward_floor,          // reclaim: below target, toward the floor, for another context's floor
  new_tail,              // grow/evict: the step's new tokens need a tail page
  extend_run,            // promote: a staged page just below the newest run joins it (exact policy)
  hot_page,              // promote: a staged page whose score crossed the threshold (hotness policy)
  run_slides,            // evict: the layer is at its page cap; the run's oldest page gives way
  finished,              // finish: every page and the history returned
  cancelled,             // cancel: same, before completion
  host_range_quarantined,  // retire: a failed copy touched the history's host range: it is never reused
  no_usable_history,     // refuse: every host history is retired
  prefix_retained,       // retain: a finished context's full pages stay indexed as a retained prefix
  prefix_adopted,        // adopt: the prompt starts with a retained prefix: its history is taken in place
  prefix_copied,         // adopt: the prompt starts with a prefix held by a running context: rows copied
  retained_lru,          // drop_retained: admission needed a history; the least-recently-used retained one gave way
  retained_cancelled,    // drop_retained: the context holding the prefix was cancelled or its history retired
  retained_on_device,    // retain: a finished context's full device pages stay, borrowed by its retained history
  retained_first,        // reclaim: a retained history's device pages, before any running context's pages
  device_pages_adopted,  // adopt: a retained history's device pages change owner to the context adopting it
  device_pages_copied,   // adopt: a prefix's device-resident pages copied device to device into the adopting context
  retained_shutdown,     // reclaim: shutdown returns the retained histories' device pages to the pool
  run_behind_tier,       // evict: a tier restore moved the history's end past the adopted run: its pages give way
  prefix_cached,         // retain: a finished history's full pages stored in the host prefix cache (new pages only)
  prefix_cache_adopted,  // adopt: the prompt's next full pages copied from the host prefix cache into the history
  prefix_cache_lru,      // evict: the prefix cache's least recently used leaf pages gave way to new ones
  run_behind_cache,      // evict: a prefix cache adoption moved the history's end past the adopted run: its pages give way
  prefix_cache_partial,  // adopt: the first rows of the prompt's partial last page copied from a cached page (host and device)
  ring_not_covering,     // drop_retained: a match whose window layers' rings no longer hold its window is recomputed
  prefix_cache_ring_cut, // adopt: the cache's match cut back to the longest prefix whose window rows the cache holds
  prefix_cache_state_cut,  // adopt: the cache's match cut back to the last page boundary with a cached state checkpoint
  prefix_cache_state_kept,  // retain: a finished history's state checkpoints stored beside its cached pages
  prefix_cache_state_lru,   // evict: the cache's least recently used state checkpoints gave way to new ones (rows stay)
  tier_ring_cut,         // adopt: the tier's run cut back to the longest prefix whose window rows its blocks carry
  tier_state_cut,        // adopt: the tier's run cut back to the last block carrying the recurrent state at its end
};

const char* decision_kind_name(DecisionKind kind) noexcept;
const char* reason_text(Reason reason) noexcept;   // one short sentence
const char* reason_name(Reason reason) noexcept;   // snake_case, for JSON

struct Decision {
  std::uint64_t step = 0;          // the planner's step number (0 before the first step)
  std::uint64_t request_id = 0;    // the caller's id for the context
  std::uint32_t slot = UINT32_MAX; // the context's slot (its host history), or none when queued/refused
  std::uint32_t layer = UINT32_MAX;
  std::uint32_t logical_page = UINT32_MAX;
  std::uint32_t pool_page = UINT32_MAX;
  std::uint32_t pages = 0;         // how many pages the decision moved
  std::uint32_t other_slot = UINT32_MAX;  // reclaim: the context that received the pages
  DecisionKind kind = DecisionKind::admit;
  Reason reason = Reason::floor_fits;
};

static_assert(sizeof(Decision) == 48, "a decision is a fixed 48-byte record");

class DecisionLog {
 public:
  explicit DecisionLog(std::uint32_t capacity);

  // Inline: the planner records a decision for every page a run slides by.
  void record(const Decision& decision) noexcept {
    ring_[next_] = decision;
    if (++next_ == ring_.size()) next_ = 0;  // no division on the hot path
    ++recorded_;
  }
  std::uint64_t recorded() const noexcept { return recorded_; }  // ever, including overwritten
  std::uint32_t size() const noexcept;                           // held now
  // i = 0 is the oldest held record.
  const Decision& at(std::uint32_t i) const noexcept;
  // Copies the held records with step == `step` and (slot == `slot` or slot == UINT32_MAX)
  // into out; returns how many matched (may exceed out.size()).
  std::uint32_t select(std::uint64_t step, std::uint32_t slot, std::span<Decision> out) const noexcept;

 private:
  std::vector<Decision> ring_;
  std::uint64_t recorded_ = 0;
  std::size_t next_ = 0;  // where the next record goes: recorded_ % ring_.size()
};

}  // namespace activekv
