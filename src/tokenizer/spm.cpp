// spm.cpp — the score-driven merge loop (see spm.hpp).
#include "tokenizer/spm.hpp"

#include <algorithm>
#include <limits>

#include "activekv/assert.hpp"

namespace activekv::tokenizer {
namespace {

using Candidate = SpmScratch::Candidate;
using Symbol = SpmScratch::Symbol;

// std::push_heap builds a max-heap: the highest score, then the lowest position, on top.
bool before(const Candidate& a, const Candidate& b) noexcept {
  return a.score != b.score ? a.score < b.score : a.left > b.left;
}

void push_candidate(const SpmVocab& vocab, std::string_view text, const std::vector<Symbol>& symbols,
                    std::int32_t left, std::vector<Candidate>& heap) {
  if (left < 0) return;
  const Symbol& l = symbols[static_cast<std::size_t>(left)];
  if (l.next < 0) return;
  const Symbol& r = symbols[static_cast<std::size_t>(l.next)];
  const std::uint32_t size = l.size + r.size;
  const std::int32_t id = vocab.find(text.substr(l.begin, size));
  if (id < 0 || vocab.scores[id] == -std::numeric_limits<float>::infinity()) return;  // no token, or one merging never forms
  heap.push_back(Candidate{vocab.scores[id], left, size});
  std::push_heap(heap.begin(), heap.end(), before);
}

void emit(const SpmVocab& vocab, std::string_view piece, std::vector<std::int32_t>& out) {
  const std::int32_t id = vocab.find(piece);
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  for (const char c : piece) {
    const std::int32_t byte = (*vocab.byte_token)[static_cast<unsigned char>(c)];
    if (byte >= 0) out.push_back(byte);
  }
}

bool joinable(const SpmVocab& vocab, unsigned char a, unsigned char b) noexcept {
  const std::size_t bit = std::size_t{a} * 256 + b;
  return ((*vocab.joinable)[bit / 64] >> (bit % 64)) & 1U;
}

// Merges the symbols of one segment (first..., linked by next) and appends their ids.
void merge_segment(const SpmVocab& vocab, std::string_view text, std::int32_t first, SpmScratch& scratch,
                   std::vector<std::int32_t>& out) {
  std::vector<Symbol>& symbols = scratch.symbols;
  std::vector<Candidate>& heap = scratch.heap;
  heap.clear();
  for (std::int32_t i = first; symbols[static_cast<std::size_t>(i)].next >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    push_candidate(vocab, text, symbols, i, heap);
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), before);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[static_cast<std::size_t>(c.left)];
    if (left.size == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    if (right.size == 0 || left.size + right.size != c.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = c.left;
    push_candidate(vocab, text, symbols, left.prev, heap);
    push_candidate(vocab, text, symbols, c.left, heap);
  }
  for (std::int32_t i = first; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<std::size_t>(i)];
    AK_DEBUG_ASSERT(s.size > 0, "spm_merge: a dead symbol in the list");
    emit(vocab, text.substr(s.begin, s.size), out);
  }
}

}  // namespace

std::uint32_t lead_length(unsigned char lead) noexcept {
  static constexpr std::uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[lead >> 4];
}

void spm_merge(const SpmVocab& vocab, std::string_view text, SpmScratch& scratch, std::vector<std::int32_t>& out) {
  if (text.empty()) return;
  AK_ASSERT(text.size() < std::numeric_limits<std::uint32_t>::max(), "spm_merge: text longer than 4 GiB");
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.clear();
  // Symbols by lead byte; a boundary no token spans ends a segment (next = -1, prev = -1).
  for (std::uint32_t at = 0; at < text.size();) {
    const std::uint32_t size =
        std::min<std::uint32_t>(lead_length(static_cast<unsigned char>(text[at])), static_cast<std::uint32_t>(text.size()) - at);
    const auto index = static_cast<std::int32_t>(symbols.size());
    const bool joined = at > 0 && joinable(vocab, static_cast<unsigned char>(text[at - 1]), static_cast<unsigned char>(text[at]));
    if (at > 0 && !joined) symbols.back().next = -1;
    symbols.push_back(Symbol{at, size, joined ? index - 1 : -1, at + size < text.size() ? index + 1 : -1});
    at += size;
  }
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    if (symbols[i].prev < 0) merge_segment(vocab, text, static_cast<std::int32_t>(i), scratch, out);
  }
}

}  // namespace activekv::tokenizer
