// policy.cpp — the exact (grow the run downward) and hotness (promote hot pages) policies.
#include "activekv/policy.hpp"

#include <algorithm>
#include <limits>

#include "activekv/assert.hpp"

namespace activekv {

namespace {

bool staged(std::span<const PageRange> ranges, std::uint32_t logical) noexcept {
  for (const PageRange& r : ranges) {
    if (logical >= r.first && logical < r.first + r.count) return true;
  }
  return false;
}

}  // namespace

std::uint32_t ExactPolicy::choose_promotions(const PromotionQuery& query, std::span<const PageRange> staged_ranges,
                                             std::span<std::uint32_t> out) noexcept {
  const std::uint32_t limit = std::min<std::uint32_t>(static_cast<std::uint32_t>(out.size()), query.pages_grantable);
  std::uint32_t n = 0;
  // The run grows down only while the page just below it was staged this step (so its bytes are in a tile).
  for (std::uint32_t logical = query.run_first; n < limit && logical > 1;) {
    --logical;
    if (!staged(staged_ranges, logical)) break;
    out[n++] = logical;
  }
  return n;
}

HotnessPolicy::HotnessPolicy(float threshold, std::uint32_t candidates_max)
    : threshold_(threshold), candidates_(std::max(1u, candidates_max)) {}

void HotnessPolicy::observe(std::span<const PageScore> scores) noexcept {
  const auto capacity = static_cast<std::uint32_t>(candidates_.size());
  for (const PageScore& s : scores) {
    if (!(s.score >= threshold_)) continue;
    bool known = false;
    for (std::uint32_t i = 0; i < count_ && !known; ++i) {
      const PageScore& c = candidates_[(head_ + i) % capacity];
      known = c.slot == s.slot && c.layer == s.layer && c.logical == s.logical;
    }
    if (known) continue;
    if (count_ == capacity) {  // drop the oldest candidate
      head_ = (head_ + 1) % capacity;
      --count_;
    }
    candidates_[(head_ + count_) % capacity] = s;
    ++count_;
  }
}

std::uint32_t HotnessPolicy::choose_promotions(const PromotionQuery& query, std::span<const PageRange> staged_ranges,
                                               std::span<std::uint32_t> out) noexcept {
  if (count_ == 0) return 0;
  const auto capacity = static_cast<std::uint32_t>(candidates_.size());
  const std::uint32_t limit =
      std::min({static_cast<std::uint32_t>(out.size()), query.pages_grantable, query.promoted_room});
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < count_ && n < limit; ++i) {
    PageScore& c = candidates_[(head_ + i) % capacity];
    if (c.slot != query.slot || c.layer != query.layer) continue;
    // Pages adjacent to the run would merge with it; the planner handles run_first − 1 as a run extension.
    if (!staged(staged_ranges, c.logical)) continue;
    out[n++] = c.logical;
    c.slot = std::numeric_limits<std::uint32_t>::max();  // consumed
  }
  if (n == 0) return 0;
  // Compact consumed candidates out, keeping order.
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < count_; ++i) {
    const PageScore c = candidates_[(head_ + i) % capacity];
    if (c.slot == std::numeric_limits<std::uint32_t>::max()) continue;
    candidates_[(head_ + kept) % capacity] = c;
    ++kept;
  }
  count_ = kept;
  // The planner extends the run with run_first − 1, run_first − 2, ... in that order: sort descending so
  // adjacent pages come first and the rest fall to the promoted set.
  std::sort(out.begin(), out.begin() + n, [](std::uint32_t a, std::uint32_t b) { return a > b; });
  return n;
}

void HotnessPolicy::forget(std::uint32_t slot) noexcept {
  const auto capacity = static_cast<std::uint32_t>(candidates_.size());
  std::uint32_t kept = 0;
  for (std::uint32_t i = 0; i < count_; ++i) {
    const PageScore c = candidates_[(head_ + i) % capacity];
    if (c.slot == slot) continue;
    candidates_[(head_ + kept) % capacity] = c;
    ++kept;
  }
  count_ = kept;
}

}  // namespace activekv
