// bpe.hpp — byte-pair merging of one pre-tokenized piece.
//
// Start from one symbol per byte (its single-byte token); repeatedly merge the
// adjacent pair whose rule has the lowest rank, the leftmost such pair first,
// until no adjacent pair has a rule. The symbols are a doubly linked list over a
// scratch array; candidate merges sit in a binary min-heap keyed (rank,
// position). A popped candidate is stale — and skipped — unless both of its
// symbols still hold the ids it was pushed with: a symbol's token only ever grows,
// so an unchanged id means an unchanged symbol. Each merge pushes at most two new
// candidates, so a piece of n bytes costs O(n log n).
//
// The scratch vectors grow to the longest piece seen and are then reused: no
// allocation per piece once warm.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tokenizer/merge_table.hpp"

namespace activekv::tokenizer {

struct BpeScratch {
  struct Symbol {
    std::int32_t id;    // token id; -1 once merged into its left neighbour
    std::int32_t prev;  // index of the previous live symbol, -1 at the start
    std::int32_t next;  // index of the next live symbol, -1 at the end
  };
  struct Candidate {
    std::uint32_t rank;
    std::int32_t left;      // symbol index of the pair's left side
    std::int32_t left_id;   // ids when pushed; the candidate is stale if either changed
    std::int32_t right_id;
    std::int32_t result;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// Merges `ids` (one token per byte of the piece) and appends the result to `out`.
void bpe_merge(const MergeTable& merges, std::span<const std::int32_t> ids, BpeScratch& scratch,
               std::vector<std::int32_t>& out);

}  // namespace activekv::tokenizer
