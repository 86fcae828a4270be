// page_pool.hpp — the arena's pool pages: states, generations, an intrusive free list.
//
// Every pool page is in exactly one state:
//   free         on the free list, holds nothing
//   owned        holds rows of one context's dense layer (owner says which logical page)
//   staging      assigned, but its bytes are still being copied in (a promotion whose
//                device-to-device copy has not signalled); becomes owned when it lands
//   quarantined  a fence that touched it failed or its outcome is unknown: never reused
// Invariant 1 (DESIGN.md): free + owned + staging + quarantined = pool size, always.
// It is asserted on every mutation and walked in full by validate().
//
// The free list is intrusive and doubly linked through the page records
// (vLLM's block pool): allocate and release are O(1), removal of any page is
// O(1), and nothing is allocated after the constructor. Pages leave the list
// from the head and return to the tail, so a released page is reused last
// (its bytes stay valid longest for a late reader that a bug might create).
//
// Handles carry generations: a PageId's generation is bumped every time the
// page is allocated and again when it is released, so a stale handle is detected.
#pragma once

#include <cstdint>
#include <vector>

#include "activekv/assert.hpp"

namespace activekv {

inline constexpr std::uint32_t page_none = UINT32_MAX;  // "no pool page" in page tables

enum class PageState : std::uint8_t { free, owned, staging, quarantined };
const char* page_state_name(PageState state) noexcept;

struct PageId {
  std::uint32_t index = page_none;
  std::uint32_t generation = 0;
  bool valid() const noexcept { return index != page_none; }
  friend bool operator==(PageId, PageId) = default;
};

// Which context (slot), dense layer and logical page a pool page holds.
struct PageOwner {
  std::uint32_t slot = UINT32_MAX;
  std::uint32_t layer = 0;
  std::uint32_t logical = 0;
};

struct PagePoolCounters {
  std::uint64_t allocations = 0;   // free → owned/staging
  std::uint64_t releases = 0;      // owned/staging → free
  std::uint64_t landings = 0;      // staging → owned
  std::uint64_t reassignments = 0; // owned → owned by the next logical page (a run slid)
  std::uint64_t quarantines = 0;   // → quarantined
  std::uint64_t heap_allocations = 0;  // allocations the pool made itself (constructor only)
};

class PagePool {
 public:
  explicit PagePool(std::uint32_t pages);

  // free → `state` (owned or staging). Returns an invalid id when no page is free: an
  // ordinary outcome the caller handles (reclamation), not an error.
  PageId allocate(PageOwner owner, PageState state = PageState::owned) noexcept;
  // owned/staging → free. A stale or foreign handle is a programming error.
  void release(PageId page) noexcept;
  // owned → owned by `owner` (the same context's next logical page): the page's old use ends
  // and a new one begins without visiting the free list — a run sliding by one page. The
  // generation is bumped as by release + allocate, so every handle to the old use is stale.
  PageId reassign(PageId page, PageOwner owner) noexcept;
  // staging → owned, once its copy signalled.
  void land(PageId page) noexcept;
  // owned/staging → quarantined, for good. For the backend/lease layer.
  void quarantine_page(PageId page) noexcept;

  bool current(PageId page) const noexcept {
    return page.index < records_.size() && records_[page.index].generation == page.generation &&
           records_[page.index].state != PageState::free;
  }
  PageId id(std::uint32_t index) const noexcept { return PageId{index, records_[index].generation}; }
  PageState state(std::uint32_t index) const noexcept { return records_[index].state; }
  const PageOwner& owner(std::uint32_t index) const noexcept { return records_[index].owner; }
  // A hint that the record of `index` is about to be read and written (release, reuse): a pool of
  // hundreds of thousands of pages is larger than the caches, so batched callers start the loads early.
  void prefetch(std::uint32_t index) const noexcept {
    if (index < records_.size()) __builtin_prefetch(&records_[index], 1);
  }

  std::uint32_t pages_total() const noexcept { return static_cast<std::uint32_t>(records_.size()); }
  std::uint32_t pages_free() const noexcept { return count_[static_cast<int>(PageState::free)]; }
  std::uint32_t pages_owned() const noexcept { return count_[static_cast<int>(PageState::owned)]; }
  std::uint32_t pages_staging() const noexcept { return count_[static_cast<int>(PageState::staging)]; }
  std::uint32_t pages_quarantined() const noexcept { return count_[static_cast<int>(PageState::quarantined)]; }
  const PagePoolCounters& counters() const noexcept { return counters_; }

  // Walks every record and the free list; returns nullptr when consistent, else what broke.
  const char* check() const noexcept;
  // check(), asserting.
  void validate() const noexcept;

 private:
  struct Record {
    std::uint32_t prev = page_none;  // free-list links, meaningful only while free
    std::uint32_t next = page_none;
    std::uint32_t generation = 0;
    PageState state = PageState::free;
    PageOwner owner;
  };
  void unlink(std::uint32_t index) noexcept;
  void push_tail(std::uint32_t index) noexcept;
  void move(std::uint32_t index, PageState to) noexcept;
  void assert_conserved() const noexcept {
    AK_ASSERT(count_[0] + count_[1] + count_[2] + count_[3] == records_.size(),
              "invariant 1: free + owned + staging + quarantined must equal the pool size");
  }

  std::vector<Record> records_;
  std::uint32_t head_ = page_none;
  std::uint32_t tail_ = page_none;
  std::uint32_t count_[4] = {0, 0, 0, 0};
  PagePoolCounters counters_;
};

}  // namespace activekv
