// text_index.hpp — token text -> id, by open addressing over the vocabulary's texts.
//
// SentencePiece merging asks "is this byte string a token, and which?" for every
// adjacent pair it considers, and Llama 3's whole-word shortcut asks it once per
// piece, so the question must cost one hash and a few compares with no
// allocation. The table stores ids only; a probe compares the query against the
// id's text through the `text_of` function the caller passes, so it survives
// moves of the tokenizer that owns the texts. Capacity is a power of two at
// least twice the number of ids (half full at most), fixed at build time: a probe
// always ends at an empty slot. A duplicate text keeps its first id.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace activekv::tokenizer {

class TextIndex {
 public:
  TextIndex() = default;

  // Indexes ids 0..count-1; text_of(id) gives each id's text.
  template <typename TextOf>
  void build(std::int32_t count, TextOf text_of) {
    std::size_t capacity = 16;
    while (capacity < 2 * static_cast<std::size_t>(count)) capacity *= 2;
    slots_.assign(capacity, -1);
    mask_ = capacity - 1;
    for (std::int32_t id = 0; id < count; ++id) {
      const std::string_view text = text_of(id);
      std::size_t slot = hash(text) & mask_;
      bool duplicate = false;
      while (slots_[slot] >= 0) {
        if (text_of(slots_[slot]) == text) {
          duplicate = true;
          break;
        }
        slot = (slot + 1) & mask_;
      }
      if (!duplicate) slots_[slot] = id;
    }
  }

  // The id whose text is `text`, or -1.
  template <typename TextOf>
  std::int32_t find(std::string_view text, TextOf text_of) const noexcept {
    if (slots_.empty()) return -1;
    for (std::size_t slot = hash(text) & mask_;; slot = (slot + 1) & mask_) {
      const std::int32_t id = slots_[slot];
      if (id < 0 || text_of(id) == text) return id;
    }
  }

  bool empty() const noexcept { return slots_.empty(); }

 private:
  static std::size_t hash(std::string_view text) noexcept { return std::hash<std::string_view>{}(text); }

  std::vector<std::int32_t> slots_;  // ids; -1 = empty
  std::size_t mask_ = 0;             // capacity - 1
};

}  // namespace activekv::tokenizer
