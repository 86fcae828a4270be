// headroom.cpp — lending, returning, taking back and restoring headroom pages.
#include "activekv/headroom.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

#include "activekv/size.hpp"

namespace activekv {

Result<std::uint64_t> parse_headroom(std::string_view text) {
  if (text == "auto" || text == "max" || (!text.empty() && text.back() == '%')) {
    return make_error(ErrorCode::refused, "--headroom",
                      "an automatic headroom size is refused: headroom is device memory lent to retained history "
                      "and taken back under pressure, so how much to lend is a decision to state. Give a size "
                      "(for example 8GiB: what the device has free beside the arena and the weights), or 0 for none");
  }
  return parse_size(text, "--headroom", /*zero_allowed=*/true);
}

Result<Headroom> Headroom::create(std::uint64_t offset_bytes, std::uint64_t bytes, std::uint64_t page_bytes) {
  if (page_bytes == 0) {
    return make_error(ErrorCode::invalid_argument, "--page-tokens", "headroom pages need a nonzero page size");
  }
  if (bytes > std::numeric_limits<std::uint64_t>::max() - offset_bytes) {
    return make_error(ErrorCode::invalid_argument, "--headroom", "headroom region overflows the address range");
  }
  const std::uint64_t pages = bytes / page_bytes;
  if (pages > std::numeric_limits<std::uint32_t>::max() - 1) {
    return make_error(ErrorCode::invalid_argument, "--headroom",
                      "headroom holds more than 4 billion pages: raise --page-tokens or lower --headroom");
  }
  Headroom headroom;
  headroom.offset_bytes_ = offset_bytes;
  headroom.page_bytes_ = page_bytes;
  headroom.unused_bytes_ = bytes - pages * page_bytes;
  headroom.pages_.assign(pages, Page{});
  headroom.free_bits_.assign((pages + 63) / 64, 0);
  for (std::uint32_t i = 0; i < pages; ++i) headroom.mark_free(i);
  headroom.lowest_free_word_ = 0;
  headroom.validate();
  return headroom;
}

void Headroom::mark_free(std::uint32_t index) noexcept {
  pages_[index].state = State::free;
  free_bits_[index / 64] |= 1ull << (index % 64);
  if (index / 64 < lowest_free_word_) lowest_free_word_ = index / 64;
  ++free_;
}

void Headroom::mark_not_free(std::uint32_t index) noexcept {
  AK_ASSERT(pages_[index].state == State::free, "headroom page leaving the free set must be free");
  free_bits_[index / 64] &= ~(1ull << (index % 64));
  --free_;
}

HeadroomPage Headroom::lend(std::uint64_t owner) noexcept {
  if (free_ == 0) {
    ++counters_.lend_refusals;
    return HeadroomPage{};
  }
  auto word = lowest_free_word_;
  while (free_bits_[word] == 0) ++word;  // free_ > 0, so a set bit exists at or above the hint
  lowest_free_word_ = word;
  const auto index = static_cast<std::uint32_t>(word * 64 + static_cast<std::uint32_t>(std::countr_zero(free_bits_[word])));
  mark_not_free(index);
  Page& page = pages_[index];
  page.state = State::lent;
  page.owner = owner;
  ++lent_;
  ++counters_.lends;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "headroom consistent after lend");
  return HeadroomPage{index, page.generation};
}

void Headroom::give_back(HeadroomPage handle) noexcept {
  AK_ASSERT(current(handle), "headroom page given back is stale, revoked or not lent");
  Page& page = pages_[handle.index];
  ++page.generation;
  page.owner = 0;
  --lent_;
  mark_free(handle.index);
  ++counters_.returns;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "headroom consistent after give_back");
}

std::uint64_t Headroom::offset_of(HeadroomPage page) const noexcept {
  AK_ASSERT(current(page), "offset of a headroom page that is not lent under this generation");
  return offset_bytes_ + page.index * page_bytes_;
}

std::uint64_t Headroom::owner_of(HeadroomPage page) const noexcept {
  AK_ASSERT(current(page), "owner of a headroom page that is not lent under this generation");
  return pages_[page.index].owner;
}

std::uint32_t Headroom::take_back(std::uint32_t pages, std::span<Revocation> revoked,
                                  std::uint32_t* revoked_count) noexcept {
  AK_ASSERT(revoked.size() >= std::min(pages, pages_total() - taken_),
            "take_back needs room to report every page it might revoke");
  std::uint32_t taken_now = 0;
  std::uint32_t revoked_now = 0;
  while (taken_now < pages && taken_ < pages_total()) {
    const std::uint32_t index = pages_total() - taken_ - 1;
    Page& page = pages_[index];
    if (page.state == State::lent) {
      revoked[revoked_now++] = Revocation{HeadroomPage{index, page.generation}, page.owner};
      ++page.generation;
      page.owner = 0;
      --lent_;
    } else {
      mark_not_free(index);
    }
    page.state = State::taken;
    ++taken_;
    ++taken_now;
  }
  if (taken_now > 0) ++counters_.takings;
  counters_.pages_taken += taken_now;
  counters_.pages_revoked += revoked_now;
  if (revoked_count != nullptr) *revoked_count = revoked_now;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "headroom consistent after take_back");
  return taken_now;
}

std::uint32_t Headroom::restore(std::uint32_t pages) noexcept {
  std::uint32_t restored = 0;
  while (restored < pages && taken_ > 0) {
    const std::uint32_t index = pages_total() - taken_;
    AK_ASSERT(pages_[index].state == State::taken, "the lowest withdrawn page must be taken");
    --taken_;
    mark_free(index);
    ++restored;
  }
  if (restored > 0) ++counters_.restores;
  counters_.pages_restored += restored;
  AK_EXPENSIVE_ASSERT(check() == nullptr, "headroom consistent after restore");
  return restored;
}

const char* Headroom::check() const noexcept {
  if (free_ + lent_ + taken_ != pages_total()) return "free + lent + taken must equal the headroom's pages";
  std::uint32_t free_seen = 0, lent_seen = 0, taken_seen = 0;
  for (std::uint32_t i = 0; i < pages_total(); ++i) {
    const bool bit = (free_bits_[i / 64] >> (i % 64)) & 1u;
    switch (pages_[i].state) {
      case State::free:
        ++free_seen;
        if (!bit) return "a free headroom page is missing from the free bits";
        if (i / 64 < lowest_free_word_) return "a free headroom page lies below the lowest-free hint";
        break;
      case State::lent:
        ++lent_seen;
        if (bit) return "a lent headroom page is marked free";
        break;
      case State::taken:
        ++taken_seen;
        if (bit) return "a taken headroom page is marked free";
        if (i < pages_total() - taken_) return "a taken headroom page lies below the withdrawn range";
        break;
    }
  }
  if (free_seen != free_) return "free headroom page count disagrees with the pages";
  if (lent_seen != lent_) return "lent headroom page count disagrees with the pages";
  if (taken_seen != taken_) return "taken headroom page count disagrees with the pages";
  return nullptr;
}

void Headroom::validate() const noexcept {
  const char* broken = check();
  AK_ASSERT(broken == nullptr, broken);
}

}  // namespace activekv
