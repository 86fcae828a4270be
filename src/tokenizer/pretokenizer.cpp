// pretokenizer.cpp — the digit split and the hand-matched GPT-2 pattern.
#include "tokenizer/pretokenizer.hpp"

#include "activekv/assert.hpp"

namespace activekv::tokenizer {
namespace {

using Char = PreTokenizerScratch::Char;

// Length in chars of a contraction ('s 't 're 've 'm 'll 'd, lower case only) at i, or 0.
std::size_t contraction(const Char* c, std::size_t i, std::size_t end) noexcept {
  if (c[i].code_point != U'\'' || i + 1 >= end) return 0;
  const char32_t a = c[i + 1].code_point;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t b = c[i + 2].code_point;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

// End of the run of class `cls` starting at i.
std::size_t run_end(const Char* c, std::size_t i, std::size_t end, CharClass cls) noexcept {
  while (i < end && c[i].cls == cls) ++i;
  return i;
}

// End (exclusive, in chars) of the GPT-2 pattern's match at i, within [i, end).
std::size_t match_gpt2(const Char* c, std::size_t i, std::size_t end) noexcept {
  if (const std::size_t n = contraction(c, i, end); n != 0) return i + n;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional ASCII space, then a run of one class.
  const std::size_t body = (c[i].code_point == U' ' && i + 1 < end) ? i + 1 : i;
  if (c[body].cls != CharClass::space) return run_end(c, body, end, c[body].cls);
  // '\s+(?!\S)': the whole run if it ends the piece, else all but its last char;
  // '\s+': a single white-space char followed by a non-space.
  const std::size_t run = run_end(c, i, end, CharClass::space);
  if (run == end || run - i == 1) return run;
  return run - 1;
}

}  // namespace

void pretokenize(PreTokenizerKind kind, std::string_view text, PreTokenizerScratch& scratch,
                 std::vector<Piece>& pieces) {
  std::vector<Char>& chars = scratch.chars;
  chars.clear();
  for (std::size_t at = 0; at < text.size();) {
    char32_t cp = 0;
    const std::size_t n = decode_utf8(text, at, cp);
    chars.push_back(Char{at, cp, classify(cp)});
    at += n;
  }
  chars.push_back(Char{text.size(), 0, CharClass::other});  // sentinel: the end offset
  const Char* c = chars.data();
  const std::size_t count = chars.size() - 1;
  const std::size_t first_piece = pieces.size();

  if (kind == PreTokenizerKind::gpt2) {
    for (std::size_t i = 0; i < count;) {
      const std::size_t next = match_gpt2(c, i, count);
      pieces.push_back(Piece{c[i].begin, c[next].begin});
      i = next;
    }
  } else {
    std::size_t start = 0;  // start of the current non-number stretch
    for (std::size_t i = 0; i <= count; ++i) {
      if (i < count && c[i].cls != CharClass::number) continue;
      for (std::size_t j = start; j < i;) {  // the GPT-2 pattern within [start, i)
        const std::size_t next = match_gpt2(c, j, i);
        pieces.push_back(Piece{c[j].begin, c[next].begin});
        j = next;
      }
      if (i < count) pieces.push_back(Piece{c[i].begin, c[i + 1].begin});  // the digit alone
      start = i + 1;
    }
  }
  AK_EXPENSIVE_ASSERT(pieces.size() == first_piece || pieces[first_piece].begin == 0,
                      "pretokenize: pieces do not start at the text's start");
  AK_EXPENSIVE_ASSERT(pieces.size() == first_piece || pieces.back().end == text.size(),
                      "pretokenize: pieces do not reach the text's end");
  (void)first_piece;
}

}  // namespace activekv::tokenizer
