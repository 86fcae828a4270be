// pretokenizer_test.cpp — pieces of the digit split and the GPT-2 pattern.
// Expected pieces were checked against the `tokenizers` package
// (Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False)]).
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/pretokenizer.hpp"

namespace activekv::tokenizer {
namespace {

std::vector<std::string> pieces_of(std::string_view text, PreTokenizerKind kind = PreTokenizerKind::smollm) {
  PreTokenizerScratch scratch;
  std::vector<Piece> pieces;
  pretokenize(kind, text, scratch, pieces);
  std::vector<std::string> out;
  for (const Piece& p : pieces) out.emplace_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizer, WordsAndSpaces) {
  EXPECT_EQ(pieces_of("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces_of("Hello  world"), (V{"Hello", " ", " world"}));
  EXPECT_EQ(pieces_of("a   "), (V{"a", "   "}));
  EXPECT_EQ(pieces_of("x  \t y"), (V{"x", "  \t", " y"}));
  EXPECT_EQ(pieces_of("\n\nfoo"), (V{"\n", "\n", "foo"})) << "only an ASCII space joins the next word";
  EXPECT_EQ(pieces_of(""), V{});
  EXPECT_EQ(pieces_of(" "), V{" "});
}

TEST(PreTokenizer, Contractions) {
  EXPECT_EQ(pieces_of("I'm you're they'll it's"), (V{"I", "'m", " you", "'re", " they", "'ll", " it", "'s"}));
  EXPECT_EQ(pieces_of("I'M"), (V{"I", "'", "M"})) << "contractions are lower case only";
  EXPECT_EQ(pieces_of("?'s"), (V{"?'", "s"})) << "the punctuation run is greedy";
  EXPECT_EQ(pieces_of("'"), V{"'"});
}

TEST(PreTokenizer, DigitsStandAlone) {
  EXPECT_EQ(pieces_of("abc 123"), (V{"abc", " ", "1", "2", "3"}));
  EXPECT_EQ(pieces_of("a  1"), (V{"a", "  ", "1"})) << "the look-ahead sees only the piece before the digit";
  EXPECT_EQ(pieces_of("x\xC2\xBDy"), (V{"x", "\xC2\xBD", "y"})) << "½ is \\p{N}";
  EXPECT_EQ(pieces_of("abc 123", PreTokenizerKind::gpt2), (V{"abc", " 123"}));
}

TEST(PreTokenizer, UnicodeAndPunctuation) {
  EXPECT_EQ(pieces_of("hi\xC2\xA0\xC2\xA0there"), (V{"hi", "\xC2\xA0", "\xC2\xA0", "there"}));
  EXPECT_EQ(pieces_of("\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"), (V{"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"}));
  EXPECT_EQ(pieces_of("ok \xF0\x9F\x98\x80!!"), (V{"ok", " \xF0\x9F\x98\x80!!"}));
  EXPECT_EQ(pieces_of("f(x) = y;"), (V{"f", "(", "x", ")", " =", " y", ";"}));
  EXPECT_EQ(pieces_of("caf\x65\xCC\x81"), (V{"cafe", "\xCC\x81"})) << "a combining mark is not \\p{L}";
}

TEST(PreTokenizer, Qwen35JoinsMarksToLetters) {
  // "café" with a combining acute, a Devanagari word with vowel signs (Mc) and a virama (Mn).
  EXPECT_EQ(pieces_of("caf\x65\xCC\x81 x", PreTokenizerKind::qwen35), (V{"caf\x65\xCC\x81", " x"}));
  EXPECT_EQ(pieces_of("caf\x65\xCC\x81 x", PreTokenizerKind::qwen2), (V{"cafe", "\xCC\x81", " x"}));
  const char* hindi = "\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8\xE0\xA5\x8D\xE0\xA4\xA6\xE0\xA5\x80";  // हिन्दी
  EXPECT_EQ(pieces_of(hindi, PreTokenizerKind::qwen35), (V{hindi}));
  // A mark alone after punctuation: [^\r\n\p{L}\p{N}]? takes the punctuation, [\p{L}\p{M}]+ the mark.
  EXPECT_EQ(pieces_of("(\xCC\x81)", PreTokenizerKind::qwen35), (V{"(\xCC\x81", ")"}));
  EXPECT_EQ(pieces_of("a 12", PreTokenizerKind::qwen35), (V{"a", " ", "1", "2"}));
}

TEST(PreTokenizer, IllFormedBytesArePunctuation) {
  EXPECT_EQ(pieces_of("a\xFF\xFE b"), (V{"a", "\xFF\xFE", " b"}));
}

// Over random strings drawn from every class: pieces are non-empty, in order, and
// their concatenation is the text.
TEST(PreTokenizer, PiecesAlwaysCoverTheText) {
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\t", "\n", "1", "'", "s", "ll", "!", ".",
                                             "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xC2\xA0",
                                             "\xC2\xBD", "\xFF", "\xE4\xB8", "\xE3\x80\x80"};
  PreTokenizerScratch scratch;
  std::vector<Piece> pieces;
  for (std::uint32_t seed = 0; seed < 2000; ++seed) {
    std::mt19937 rng(seed);
    std::string text;
    const std::size_t length = rng() % 40;
    for (std::size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
    for (const PreTokenizerKind kind : {PreTokenizerKind::smollm, PreTokenizerKind::gpt2}) {
      pieces.clear();
      pretokenize(kind, text, scratch, pieces);
      std::size_t at = 0;
      for (const Piece& p : pieces) {
        ASSERT_EQ(p.begin, at) << "seed " << seed;
        ASSERT_LT(p.begin, p.end) << "seed " << seed;
        at = p.end;
      }
      ASSERT_EQ(at, text.size()) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace activekv::tokenizer
