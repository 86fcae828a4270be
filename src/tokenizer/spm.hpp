// spm.hpp — SentencePiece merging of one stretch of text by token scores.
//
// A GGUF vocabulary with tokenizer.ggml.model = "llama" is a SentencePiece BPE
// model: no merge list, a score per token. The text (spaces already written as
// U+2581 "▁") starts as one symbol per UTF-8 character — a lead byte says how
// many bytes, as llama.cpp reads it, so an ill-formed sequence still makes
// symbols that cover every byte. Repeatedly, of all adjacent pairs whose joined
// text is a token, the one whose token has the highest score merges, the
// leftmost on ties, until no pair joins into a token. A final symbol that is a
// token is emitted; one that is not (a character the vocabulary lacks — merged
// symbols are always tokens) falls back to one byte token per byte
// ("<0x0A>"), which the caller's byte map supplies.
//
// Symbols are a linked list over a scratch array; candidate pairs sit in a
// binary heap keyed (score, position). A candidate is stale unless both of its
// symbols still have the lengths they had when it was pushed: a symbol only
// grows, and only by absorbing its right neighbour (which then has length 0), so
// unchanged lengths mean an unchanged pair. The scratch grows to the longest
// text and is then reused.
//
// Independent segments. A merge across a symbol boundary makes a token whose text
// holds the two bytes on either side of it; where no token of the vocabulary
// holds that byte pair (Llama's has no newline inside a token, for one), no merge
// ever crosses the boundary, so the text is cut there and each segment merged on
// its own — the same ids (the order of merges within a segment is unchanged),
// with small heaps instead of one as long as the text.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/text_index.hpp"

namespace activekv::tokenizer {

// U+2581 in UTF-8: SentencePiece's space, which stands for " " in its vocabularies.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

struct SpmScratch {
  struct Symbol {
    std::uint32_t begin;  // byte offset in the text
    std::uint32_t size;   // bytes; 0 once merged into its left neighbour
    std::int32_t prev;    // previous live symbol, -1 at the start
    std::int32_t next;    // next live symbol, -1 at the end
  };
  struct Candidate {
    float score;
    std::int32_t left;   // symbol index of the pair's left side
    std::uint32_t size;  // left.size + right.size when pushed
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

// What SPM merging reads from the vocabulary.
struct SpmVocab {
  const TextIndex* index;
  std::string_view (*text_of)(const void* owner, std::int32_t id);
  const void* owner;
  const float* scores;                   // one per token; -infinity: merging never forms it (byte tokens)
  const std::array<std::int32_t, 256>* byte_token;  // each byte's fallback token, -1 when none
  const std::vector<std::uint64_t>* joinable;       // bit a*256+b: some token holds byte a then byte b
  std::int32_t find(std::string_view text) const noexcept {
    return index->find(text, [this](std::int32_t id) { return text_of(owner, id); });
  }
};

// Bytes of the UTF-8 sequence a lead byte announces, as llama.cpp counts them
// (a stray continuation byte is a sequence of one): the length of the symbol it starts.
std::uint32_t lead_length(unsigned char lead) noexcept;

// Merges `text` (escaped: spaces as "▁") and appends its ids to `out`.
void spm_merge(const SpmVocab& vocab, std::string_view text, SpmScratch& scratch, std::vector<std::int32_t>& out);

}  // namespace activekv::tokenizer
