// page_pool.cpp — page states, generations and the intrusive free list (see page_pool.hpp).
#include "activekv/page_pool.hpp"

namespace activekv {

const char* page_state_name(PageState state) noexcept {
  switch (state) {
    case PageState::free: return "free";
    case PageState::owned: return "owned";
    case PageState::staging: return "staging";
    case PageState::quarantined: return "quarantined";
  }
  return "?";
}

PagePool::PagePool(std::uint32_t pages) : records_(pages) {
  AK_ASSERT(pages < page_none, "a pool page index must fit below page_none");
  counters_.heap_allocations = 1;
  for (std::uint32_t i = 0; i < pages; ++i) push_tail(i);
  count_[static_cast<int>(PageState::free)] = pages;
  assert_conserved();
}

void PagePool::unlink(std::uint32_t index) noexcept {
  Record& r = records_[index];
  if (r.prev != page_none) records_[r.prev].next = r.next; else head_ = r.next;
  if (r.next != page_none) records_[r.next].prev = r.prev; else tail_ = r.prev;
  r.prev = r.next = page_none;
}

void PagePool::push_tail(std::uint32_t index) noexcept {
  Record& r = records_[index];
  r.prev = tail_;
  r.next = page_none;
  if (tail_ != page_none) records_[tail_].next = index; else head_ = index;
  tail_ = index;
}

void PagePool::move(std::uint32_t index, PageState to) noexcept {
  Record& r = records_[index];
  AK_ASSERT(count_[static_cast<int>(r.state)] > 0, "page state count underflow");
  --count_[static_cast<int>(r.state)];
  ++count_[static_cast<int>(to)];
  r.state = to;
  assert_conserved();
}

PageId PagePool::allocate(PageOwner owner, PageState state) noexcept {
  AK_ASSERT(state == PageState::owned || state == PageState::staging, "a page is allocated as owned or staging");
  if (head_ == page_none) return PageId{};
  const std::uint32_t index = head_;
  unlink(index);
  Record& r = records_[index];
  AK_ASSERT(r.state == PageState::free, "the free list holds only free pages");
  ++r.generation;
  r.owner = owner;
  move(index, state);
  ++counters_.allocations;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "page pool consistent after allocate");
  return PageId{index, r.generation};
}

void PagePool::release(PageId page) noexcept {
  AK_ASSERT(page.index < records_.size(), "release of a page index outside the pool");
  Record& r = records_[page.index];
  AK_ASSERT(r.generation == page.generation, "release of a stale page handle (generation mismatch)");
  AK_ASSERT(r.state == PageState::owned || r.state == PageState::staging, "release of a page that is not owned or staging");
  r.owner = PageOwner{};
  ++r.generation;  // every handle to this use of the page is stale from now on
  move(page.index, PageState::free);
  push_tail(page.index);
  ++counters_.releases;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "page pool consistent after release");
}

PageId PagePool::reassign(PageId page, PageOwner owner) noexcept {
  AK_ASSERT(page.index < records_.size(), "reassign of a page index outside the pool");
  Record& r = records_[page.index];
  AK_ASSERT(r.generation == page.generation, "reassign of a stale page handle (generation mismatch)");
  AK_ASSERT(r.state == PageState::owned, "only an owned page is reassigned");
  r.generation += 2;  // as release then allocate: both uses' handles differ from the new one
  r.owner = owner;
  ++counters_.reassignments;
  return PageId{page.index, r.generation};
}

void PagePool::land(PageId page) noexcept {
  AK_ASSERT(page.index < records_.size(), "land of a page index outside the pool");
  Record& r = records_[page.index];
  AK_ASSERT(r.generation == page.generation, "land of a stale page handle (generation mismatch)");
  if (r.state == PageState::quarantined) return;  // its copy failed: it stays out of use
  AK_ASSERT(r.state == PageState::staging, "land of a page that is not staging");
  move(page.index, PageState::owned);
  ++counters_.landings;
}

void PagePool::quarantine_page(PageId page) noexcept {
  AK_ASSERT(page.index < records_.size(), "quarantine of a page index outside the pool");
  Record& r = records_[page.index];
  AK_ASSERT(r.generation == page.generation, "quarantine of a stale page handle (generation mismatch)");
  AK_ASSERT(r.state == PageState::owned || r.state == PageState::staging, "quarantine of a page that is not in use");
  move(page.index, PageState::quarantined);
  ++counters_.quarantines;
}

const char* PagePool::check() const noexcept {
  std::uint32_t seen[4] = {0, 0, 0, 0};
  for (const Record& r : records_) ++seen[static_cast<int>(r.state)];
  for (int s = 0; s < 4; ++s) {
    if (seen[s] != count_[s]) return "a page state count differs from the records";
  }
  if (seen[0] + seen[1] + seen[2] + seen[3] != records_.size()) return "invariant 1: pages not conserved";
  std::uint32_t walked = 0;
  std::uint32_t prev = page_none;
  for (std::uint32_t i = head_; i != page_none; i = records_[i].next) {
    if (records_[i].state != PageState::free) return "the free list holds a page that is not free";
    if (records_[i].prev != prev) return "a free-list back link is broken";
    prev = i;
    if (++walked > records_.size()) return "the free list has a cycle";
  }
  if (prev != tail_) return "the free list's tail is wrong";
  if (walked != count_[0]) return "the free list's length differs from the free count";
  return nullptr;
}

void PagePool::validate() const noexcept {
  const char* broken = check();
  AK_ASSERT(broken == nullptr, broken);
}

}  // namespace activekv
