// merge_table.cpp — sizing and insertion (lookup is inline in the header).
#include "tokenizer/merge_table.hpp"

#include <bit>

#include "activekv/assert.hpp"

namespace activekv::tokenizer {

MergeTable::MergeTable(std::size_t rules) : capacity_(rules) {
  const std::size_t slots = std::bit_ceil(std::max<std::size_t>(16, 2 * rules));
  slots_.assign(slots, Slot{kEmpty, MergeRule{0, -1}});
  mask_ = slots - 1;
}

void MergeTable::insert(std::int32_t left, std::int32_t right, MergeRule rule) {
  AK_ASSERT(left >= 0, "MergeTable::insert: negative left id");
  AK_ASSERT(right >= 0, "MergeTable::insert: negative right id");
  const std::uint64_t key = pack(left, right);
  for (std::size_t slot = hash(key) & mask_;; slot = (slot + 1) & mask_) {
    Slot& s = slots_[slot];
    if (s.key == key) {
      s.rule = rule;
      return;
    }
    if (s.key == kEmpty) {
      AK_ASSERT(size_ < capacity_, "MergeTable::insert: more rules than the table was sized for");
      s = Slot{key, rule};
      ++size_;
      return;
    }
  }
}

}  // namespace activekv::tokenizer
