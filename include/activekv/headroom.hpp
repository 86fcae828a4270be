// headroom.hpp — revocable headroom: device memory stated explicitly, lent, and taken back.
//
// Moving history to the host frees device memory; headroom is how ActiveKV
// spends it on purpose (DESIGN.md "Spending what it frees"). The operator
// states its size (--headroom 8GiB; "auto" is refused, like the device pool);
// it is the arena's last part (ArenaPlan::headroom), cut into pages of the
// pool's page size. Its pages are lent to retained history and may be taken
// back at any time — when something else needs the device memory (a prefill's
// workspace, another tenant) — because the host copy is authoritative: taking
// headroom back loses nothing, it only makes later steps stage again.
//
//   page i  at  region.offset_bytes + i × page_bytes          (0 ≤ i < pages_total)
//   each page is exactly one of:
//     free    lendable
//     lent    held by a borrower (an owner tag the borrower chose)
//     taken   withdrawn under pressure; not lendable until restored
//   invariant: free + lent + taken = pages_total, always
//
// Pressure takes from the top of the region down, so the memory it frees is
// one contiguous range [offset + (total − taken) × page_bytes, end): the thing
// that needs the memory gets a block, not scattered pages. A lent page in that
// range is revoked: its generation is bumped (the borrower's handle goes stale
// and is refused) and the revocation is reported so the borrower can forget
// it. Lending picks the lowest free page, which keeps lent pages away from the
// top and so makes takings revoke as little as possible.
//
// Every taking is counted (calls, pages, revoked pages). Everything is
// allocated in create(); nothing afterwards.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"

namespace activekv {

struct HeadroomPage {
  std::uint32_t index = UINT32_MAX;
  std::uint32_t generation = 0;
  bool valid() const noexcept { return index != UINT32_MAX; }
  friend bool operator==(HeadroomPage, HeadroomPage) = default;
};

// A lent page taken back: which page, and the tag its borrower gave when it borrowed.
struct Revocation {
  HeadroomPage page;
  std::uint64_t owner = 0;
};

struct HeadroomCounters {
  std::uint64_t lends = 0;            // pages lent
  std::uint64_t returns = 0;          // pages given back by their borrower
  std::uint64_t takings = 0;          // take_back() calls that took at least one page
  std::uint64_t pages_taken = 0;      // pages withdrawn, over all takings
  std::uint64_t pages_revoked = 0;    // lent pages among them, revoked from their borrower
  std::uint64_t restores = 0;         // restore() calls that made pages lendable again
  std::uint64_t pages_restored = 0;
  std::uint64_t lend_refusals = 0;    // lend() found no free page
};

// Parses --headroom: an explicit size ("8GiB") or 0 for none. "auto" and percentages are
// refused with the reason: headroom is memory the operator lends and may need back, so
// its size is a decision to state, not to infer.
Result<std::uint64_t> parse_headroom(std::string_view text);

class Headroom {
 public:
  // The region [offset_bytes, offset_bytes + bytes) cut into whole pages of page_bytes; the
  // remainder (bytes % page_bytes) is unused and reported. bytes may be 0 (no headroom).
  // Refuses page_bytes == 0 and a region whose end overflows.
  static Result<Headroom> create(std::uint64_t offset_bytes, std::uint64_t bytes, std::uint64_t page_bytes);

  // The lowest free page, lent to `owner`; an invalid page when none is free (an ordinary
  // outcome: the borrower stages from the host instead).
  HeadroomPage lend(std::uint64_t owner) noexcept;
  // The borrower returns a page it holds. A stale handle (revoked, or returned before) is a
  // programming error: revocations are reported, so a borrower never holds a stale page.
  void give_back(HeadroomPage page) noexcept;
  // True while `page` is lent under this generation.
  bool current(HeadroomPage page) const noexcept {
    return page.index < pages_.size() && pages_[page.index].generation == page.generation &&
           pages_[page.index].state == State::lent;
  }
  std::uint64_t offset_of(HeadroomPage page) const noexcept;
  std::uint64_t owner_of(HeadroomPage page) const noexcept;

  // Pressure: withdraws up to `pages` more pages from the top of the lendable range down.
  // Lent pages among them are revoked and written to `revoked` (which must hold `pages`
  // entries, or as many as remain lendable). Returns the number of pages withdrawn; the count revoked is
  // counters().pages_revoked's increase, also returned through revoked_count.
  std::uint32_t take_back(std::uint32_t pages, std::span<Revocation> revoked, std::uint32_t* revoked_count) noexcept;
  // Pressure has passed: up to `pages` withdrawn pages (lowest first) become free again.
  std::uint32_t restore(std::uint32_t pages) noexcept;

  std::uint32_t pages_total() const noexcept { return static_cast<std::uint32_t>(pages_.size()); }
  std::uint32_t pages_free() const noexcept { return free_; }
  std::uint32_t pages_lent() const noexcept { return lent_; }
  std::uint32_t pages_taken() const noexcept { return taken_; }
  std::uint64_t page_bytes() const noexcept { return page_bytes_; }
  std::uint64_t offset_bytes() const noexcept { return offset_bytes_; }
  std::uint64_t bytes() const noexcept { return pages_total() * page_bytes_; }
  std::uint64_t unused_bytes() const noexcept { return unused_bytes_; }
  // The contiguous range withdrawn by pressure: [taken_offset_bytes(), offset + bytes()).
  std::uint64_t taken_offset_bytes() const noexcept { return offset_bytes_ + (pages_total() - taken_) * page_bytes_; }
  const HeadroomCounters& counters() const noexcept { return counters_; }

  // free + lent + taken = total, every page's state agrees with the counts and the taken
  // pages are exactly the top ones. nullptr when sound, else what broke.
  const char* check() const noexcept;
  void validate() const noexcept;

 private:
  enum class State : std::uint8_t { free, lent, taken };
  struct Page {
    std::uint64_t owner = 0;
    std::uint32_t generation = 1;  // a handle with generation 0 was never lent
    State state = State::free;
  };
  Headroom() = default;
  void mark_free(std::uint32_t index) noexcept;
  void mark_not_free(std::uint32_t index) noexcept;

  std::uint64_t offset_bytes_ = 0;
  std::uint64_t page_bytes_ = 0;
  std::uint64_t unused_bytes_ = 0;
  std::vector<Page> pages_;
  std::vector<std::uint64_t> free_bits_;  // bit i set: page i is free (lowest free found by scan)
  std::uint32_t free_ = 0;
  std::uint32_t lent_ = 0;
  std::uint32_t taken_ = 0;
  std::uint32_t lowest_free_word_ = 0;    // no free bit below this word
  HeadroomCounters counters_;
};

}  // namespace activekv
