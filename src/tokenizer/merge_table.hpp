// merge_table.hpp — the BPE merge rules as an open-addressing hash table.
//
// A merge rule says: the adjacent pair (left, right) becomes token `result`, with
// priority `rank` (its line number in tokenizer.ggml.merges; lower merges first).
// BPE asks "is there a rule for this pair?" once per adjacent pair it sees, so
// the lookup is a linear probe over a power-of-two table of 16-byte slots keyed
// by the pair packed into 64 bits, sized at load to at most half full, and never
// grown after. A later rule for the same pair replaces an earlier one, as in the
// reference implementation (whose map is built by inserting rules in order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace activekv::tokenizer {

struct MergeRule {
  std::uint32_t rank;
  std::int32_t result;
};

class MergeTable {
 public:
  // Sizes the table for `rules` insertions; the only allocation it makes.
  explicit MergeTable(std::size_t rules = 0);

  void insert(std::int32_t left, std::int32_t right, MergeRule rule);
  // The rule for (left, right), or nullptr.
  const MergeRule* find(std::int32_t left, std::int32_t right) const noexcept {
    const std::uint64_t key = pack(left, right);
    for (std::size_t slot = hash(key) & mask_;; slot = (slot + 1) & mask_) {
      const Slot& s = slots_[slot];
      if (s.key == key) return &s.rule;
      if (s.key == kEmpty) return nullptr;
    }
  }
  std::size_t size() const noexcept { return size_; }

 private:
  struct Slot {
    std::uint64_t key;
    MergeRule rule;
  };
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};  // (-1, -1): never a real pair

  static std::uint64_t pack(std::int32_t left, std::int32_t right) noexcept {
    return (std::uint64_t{static_cast<std::uint32_t>(left)} << 32) | static_cast<std::uint32_t>(right);
  }
  static std::size_t hash(std::uint64_t key) noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 29);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;  // insertions the table was sized for
};

}  // namespace activekv::tokenizer
