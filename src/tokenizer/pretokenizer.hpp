// pretokenizer.hpp — splits text into the pieces BPE merges within.
//
// BPE never merges across a piece boundary, so the pieces decide much of the
// result. Two splitters run in sequence, exactly as the reference tokenizer
// (`tokenizers`: Sequence[Digits(individual_digits=True), ByteLevel(use_regex)])
// composes them:
//
//   1. digits (the "smollm" pre-tokenizer only): every \p{N} code point becomes a
//      piece of its own; the text between them forms the other pieces;
//   2. the GPT-2 pattern, applied within each piece from step 1 — its look-ahead
//      (?!\S) sees only that piece:
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// The pattern is matched by hand (first alternative that matches at the cursor
// wins, each greedy), not by a regex engine: it needs only the four classes of
// unicode_class.hpp and one step of backtracking for \s+(?!\S). Pieces are byte
// ranges of the input; their concatenation is always the input (the invariant
// the round trip rests on).
//
// Nothing is allocated once the scratch vectors have grown to the text's size.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "tokenizer/unicode_class.hpp"

namespace activekv::tokenizer {

enum class PreTokenizerKind {
  gpt2,    // the GPT-2 pattern alone
  smollm,  // individual digits, then the GPT-2 pattern (tokenizer.ggml.pre = "smollm")
};

struct Piece {
  std::size_t begin;  // byte offset in the text
  std::size_t end;    // one past the last byte
};

struct PreTokenizerScratch {
  struct Char {
    std::size_t begin;   // byte offset of the code point
    char32_t code_point; // U+FFFD for bytes that are not well-formed UTF-8
    CharClass cls;
  };
  std::vector<Char> chars;
};

// Appends the pieces of `text` to `pieces` (byte ranges, in order, covering text).
void pretokenize(PreTokenizerKind kind, std::string_view text, PreTokenizerScratch& scratch,
                 std::vector<Piece>& pieces);

}  // namespace activekv::tokenizer
