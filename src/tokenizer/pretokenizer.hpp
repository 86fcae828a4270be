// pretokenizer.hpp — splits text into the pieces BPE merges within.
//
// BPE never merges across a piece boundary, so the pieces decide much of the
// result. Each kind below is one value (or family) of tokenizer.ggml.pre.
//
// gpt2 and smollm: two splitters run in sequence, exactly as the reference tokenizer
// (`tokenizers`: Sequence[Digits(individual_digits=True), ByteLevel(use_regex)])
// composes them:
//
//   1. digits (the "smollm" pre-tokenizer only): every \p{N} code point becomes a
//      piece of its own; the text between them forms the other pieces;
//   2. the GPT-2 pattern, applied within each piece from step 1 — its look-ahead
//      (?!\S) sees only that piece:
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// llama3 (Llama 3's tokenizer.json; qwen2 is the same with \p{N} alone instead of \p{N}{1,3}):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// qwen35 (Qwen3.5's tokenizer.json) is qwen2's with [\p{L}\p{M}]+ for \p{L}+ and marks left out of
//   [^\s\p{L}\p{M}\p{N}]: exactly qwen2's pattern over text whose marks count as letters (a mark
//   that [^\r\n\p{L}\p{N}]? could take as the prefix is matched by [\p{L}\p{M}]+ to the same end).
//
// Each pattern is matched by hand (first alternative that matches at the cursor
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
  llama3,  // Llama 3's pattern, numbers in runs of up to three
  qwen2,   // Llama 3's pattern, every number on its own
  qwen35,  // qwen2's, marks (\p{M}) joined to letters
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
