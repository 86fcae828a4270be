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

// Length in chars of a contraction of either case ('s 'T 're 'VE ...) at i, or 0.
std::size_t contraction_any_case(const Char* c, std::size_t i, std::size_t end) noexcept {
  if (c[i].code_point != U'\'' || i + 1 >= end) return 0;
  const auto lower = [](char32_t x) { return (x >= U'A' && x <= U'Z') ? x + (U'a' - U'A') : x; };
  const char32_t a = lower(c[i + 1].code_point);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t b = lower(c[i + 2].code_point);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

bool is_cr_lf(char32_t x) noexcept { return x == U'\r' || x == U'\n'; }

// End (exclusive, in chars) of Llama 3's pattern's match at i, within [i, end);
// numbers_max is 3 for llama3, 1 for qwen2.
std::size_t match_llama3(const Char* c, std::size_t i, std::size_t end, std::size_t numbers_max) noexcept {
  if (const std::size_t n = contraction_any_case(c, i, end); n != 0) return i + n;
  // '[^\r\n\p{L}\p{N}]?\p{L}+'
  if (c[i].cls == CharClass::letter) return run_end(c, i, end, CharClass::letter);
  if (c[i].cls != CharClass::number && !is_cr_lf(c[i].code_point) && i + 1 < end &&
      c[i + 1].cls == CharClass::letter) {
    return run_end(c, i + 1, end, CharClass::letter);
  }
  // '\p{N}{1,numbers_max}'
  if (c[i].cls == CharClass::number) {
    std::size_t j = i + 1;
    while (j < end && j - i < numbers_max && c[j].cls == CharClass::number) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const std::size_t body = (c[i].code_point == U' ' && i + 1 < end && c[i + 1].cls == CharClass::other) ? i + 1 : i;
  if (c[body].cls == CharClass::other) {
    std::size_t j = run_end(c, body, end, CharClass::other);
    while (j < end && is_cr_lf(c[j].code_point)) ++j;
    return j;
  }
  // c[i] is white space. '\s*[\r\n]+': through the run's last CR or LF, if it has one.
  const std::size_t run = run_end(c, i, end, CharClass::space);
  for (std::size_t j = run; j > i; --j) {
    if (is_cr_lf(c[j - 1].code_point)) return j;
  }
  // '\s+(?!\S)' then '\s+', as in the GPT-2 pattern.
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
    CharClass cls = classify(cp);
    if (kind == PreTokenizerKind::qwen35 && cls == CharClass::other && is_mark(cp)) cls = CharClass::letter;
    chars.push_back(Char{at, cp, cls});
    at += n;
  }
  chars.push_back(Char{text.size(), 0, CharClass::other});  // sentinel: the end offset
  const Char* c = chars.data();
  const std::size_t count = chars.size() - 1;
  const std::size_t first_piece = pieces.size();

  if (kind == PreTokenizerKind::llama3 || kind == PreTokenizerKind::qwen2 || kind == PreTokenizerKind::qwen35) {
    const std::size_t numbers_max = kind == PreTokenizerKind::llama3 ? 3 : 1;
    for (std::size_t i = 0; i < count;) {
      const std::size_t next = match_llama3(c, i, count, numbers_max);
      pieces.push_back(Piece{c[i].begin, c[next].begin});
      i = next;
    }
  } else if (kind == PreTokenizerKind::gpt2) {
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
