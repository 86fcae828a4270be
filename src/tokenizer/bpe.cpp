// bpe.cpp — the merge loop (see bpe.hpp).
#include "tokenizer/bpe.hpp"

#include <algorithm>

#include "activekv/assert.hpp"

namespace activekv::tokenizer {
namespace {

using Candidate = BpeScratch::Candidate;
using Symbol = BpeScratch::Symbol;

// std::push_heap builds a max-heap; "greater" puts the lowest (rank, left) on top.
bool after(const Candidate& a, const Candidate& b) noexcept {
  return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
}

void push_candidate(const MergeTable& merges, const std::vector<Symbol>& symbols, std::int32_t left,
                    std::vector<Candidate>& heap) {
  if (left < 0) return;
  const std::int32_t right = symbols[static_cast<std::size_t>(left)].next;
  if (right < 0) return;
  const std::int32_t left_id = symbols[static_cast<std::size_t>(left)].id;
  const std::int32_t right_id = symbols[static_cast<std::size_t>(right)].id;
  const MergeRule* rule = merges.find(left_id, right_id);
  if (rule == nullptr) return;
  heap.push_back(Candidate{rule->rank, left, left_id, right_id, rule->result});
  std::push_heap(heap.begin(), heap.end(), after);
}

}  // namespace

void bpe_merge(const MergeTable& merges, std::span<const std::int32_t> ids, BpeScratch& scratch,
               std::vector<std::int32_t>& out) {
  if (ids.size() <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  symbols.clear();
  heap.clear();
  const auto n = static_cast<std::int32_t>(ids.size());
  for (std::int32_t i = 0; i < n; ++i) {
    symbols.push_back(Symbol{ids[static_cast<std::size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1});
  }
  for (std::int32_t i = 0; i + 1 < n; ++i) push_candidate(merges, symbols, i, heap);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<std::size_t>(c.left)];
    if (left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    if (right.id != c.right_id) continue;
    // Merge: the left symbol takes the result; the right one leaves the list.
    left.id = c.result;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = c.left;
    push_candidate(merges, symbols, left.prev, heap);
    push_candidate(merges, symbols, c.left, heap);
  }
  for (std::int32_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    AK_DEBUG_ASSERT(symbols[static_cast<std::size_t>(i)].id >= 0, "bpe_merge: a dead symbol in the list");
    out.push_back(symbols[static_cast<std::size_t>(i)].id);
  }
}

}  // namespace activekv::tokenizer
