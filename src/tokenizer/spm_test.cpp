// spm_test.cpp — SentencePiece ("llama") tokenizers on a small crafted vocabulary:
// merges by score not position, byte fallback, the space prefix and its key,
// BOS defaults, user-defined and control tokens, round trips over random text,
// and refusal of broken scores. llama.cpp's real vocabularies are checked in
// vocab_vectors_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "gguf/gguf_builder.hpp"
#include "tokenizer/invariants.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::tokenizer {
namespace {

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below.
struct SpmVocab {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<std::int32_t> types{2, 3, 3};
  std::vector<float> scores{0, 0, 0};
  SpmVocab() {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (unsigned b = 0; b < 256; ++b) add(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">", 0, 6);
    add("\xE2\x96\x81", -1);            // ▁
    add("a", -1);
    add("b", -1);
    add("c", -1);
    add("ab", -5);                      // leftmost, but a lower score than "bc"
    add("bc", -2);
    add("\xE2\x96\x81" "a", -3);        // ▁a
    add("<tag>", 0, 4);                 // user-defined
  }
  void add(const std::string& text, float score, std::int32_t type = 1) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(type);
  }
  gguf::testing::Builder builder() const {
    gguf::testing::Builder b;
    b.string("tokenizer.ggml.model", "llama")
        .string_array("tokenizer.ggml.tokens", tokens)
        .array<float>("tokenizer.ggml.scores", gguf::ValueType::float32, scores)
        .array<std::int32_t>("tokenizer.ggml.token_type", gguf::ValueType::int32, types)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .u32("tokenizer.ggml.unknown_token_id", 0);
    return b;
  }
};

Result<Tokenizer> load(const gguf::testing::Builder& b, std::vector<std::byte>& bytes) {
  bytes = b.build();
  auto file = gguf::File::parse(bytes, "spm.gguf");
  if (!file) return file.error();
  return Tokenizer::from_gguf(*file);
}

class SpmTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = load(SpmVocab().builder(), bytes_);
    ASSERT_TRUE(tok.ok()) << tok.error().describe();
    tok_ = std::make_unique<Tokenizer>(std::move(tok.value()));
  }
  TokenId id(std::string_view text) const { return tok_->find(text).value(); }
  std::vector<std::byte> bytes_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SpmTokenizer, ReadsTheFile) {
  EXPECT_EQ(tok_->kind(), VocabKind::spm);
  EXPECT_TRUE(tok_->add_bos());           // SentencePiece's default when the file is silent
  EXPECT_TRUE(tok_->add_space_prefix());  // likewise
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->bytes_without_token(), 0U);
  EXPECT_EQ(tok_->token_bytes(id("\xE2\x96\x81" "a")), " a");
  EXPECT_EQ(tok_->token_bytes(id("<0x0A>")), "\n");
}

TEST_F(SpmTokenizer, MergesTheHighestScoreFirstNotTheLeftmost) {
  // "▁abc": "bc" (-2) beats "▁a" (-3) and "ab" (-5); then "▁a" merges; "▁abc" is no token.
  EXPECT_EQ(tok_->encode("abc", Special::plain), (std::vector<TokenId>{id("\xE2\x96\x81" "a"), id("bc")}));
  EXPECT_EQ(tok_->decode(tok_->encode("abc", Special::plain)), " abc");
  // Spaces inside the text are "▁" too.
  EXPECT_EQ(tok_->encode("a a", Special::plain),
            (std::vector<TokenId>{id("\xE2\x96\x81" "a"), id("\xE2\x96\x81" "a")}));
}

TEST_F(SpmTokenizer, CharactersWithoutATokenFallBackToBytes) {
  EXPECT_EQ(tok_->encode("\xE4\xB8\xAD", Special::plain),  // 中
            (std::vector<TokenId>{id("\xE2\x96\x81"), id("<0xE4>"), id("<0xB8>"), id("<0xAD>")}));
  EXPECT_EQ(tok_->decode(tok_->encode("\xE4\xB8\xAD", Special::plain)), " \xE4\xB8\xAD");
}

TEST_F(SpmTokenizer, SpecialTokensAndTheSpacePrefixOfEachStretch) {
  const TokenId sp = id("\xE2\x96\x81");
  // user-defined tokens are matched unless the caller asks for plain text; the stretch after one gets a prefix.
  EXPECT_EQ(tok_->encode("a<tag>b", Special::user_defined),
            (std::vector<TokenId>{id("\xE2\x96\x81" "a"), id("<tag>"), sp, id("b")}));
  EXPECT_EQ(tok_->encode("<s>b", Special::allow), (std::vector<TokenId>{1, sp, id("b")}));
  EXPECT_EQ(tok_->encode("<s>b", Special::user_defined)[0], sp);  // control text is plain text here
  EXPECT_EQ(tok_->encode("<tag>", Special::plain)[1], id("<0x3C>"));
  EXPECT_TRUE(tok_->encode("", Special::allow).empty());
}

TEST(SpmLoad, KeysOverrideTheDefaults) {
  std::vector<std::byte> bytes;
  auto b = SpmVocab().builder();
  b.boolean("tokenizer.ggml.add_space_prefix", false).boolean("tokenizer.ggml.add_bos_token", false);
  auto tok = load(b, bytes);
  ASSERT_TRUE(tok.ok()) << tok.error().describe();
  EXPECT_FALSE(tok->add_bos());
  EXPECT_FALSE(tok->add_space_prefix());
  EXPECT_EQ(tok->encode("abc", Special::plain), (std::vector<TokenId>{*tok->find("a"), *tok->find("bc")}));
  EXPECT_EQ(tok->decode(tok->encode("abc", Special::plain)), "abc");
}

TEST(SpmLoad, RefusesBrokenScoresNamingTheKey) {
  std::vector<std::byte> bytes;
  SpmVocab v;
  gguf::testing::Builder no_scores;
  no_scores.string("tokenizer.ggml.model", "llama").string_array("tokenizer.ggml.tokens", v.tokens);
  auto tok = load(no_scores, bytes);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().describe().find("tokenizer.ggml.scores"), std::string::npos) << tok.error().describe();

  SpmVocab short_scores;
  short_scores.scores.pop_back();
  tok = load(short_scores.builder(), bytes);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().describe().find("'tokenizer.ggml.scores': has"), std::string::npos) << tok.error().describe();

  SpmVocab nan_score;
  nan_score.scores[5] = std::nanf("");
  tok = load(nan_score.builder(), bytes);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.error().describe().find("not finite"), std::string::npos) << tok.error().describe();
}

TEST_F(SpmTokenizer, RandomTextRoundTrips) {
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {"a", "b", "c", " ", "  ", "<tag>", "<s>", "\xE4\xB8\xAD", "\xE2\x96\x81",
                                          "\n", "\xFF", "\xE4\xB8", "x"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += parts[rng() % parts.size()];
    const Status s = check_round_trip(*tok_, text);
    ASSERT_TRUE(s.ok()) << "'" << text << "': " << s.error().describe();
  }
}

// A vocabulary with no "▁" and no byte tokens (the fuzz findings
// fuzz/corpus/tokenizer/round-trip-2..5): the space prefix and every tokenless
// symbol fall back byte by byte to the unknown token (here typed user-defined,
// so nothing but its position tells it from a matched special token), a stray
// lead byte takes the "▁" after it into its symbol, and "▁a" still merges.
TEST(SpmTokenizerWithoutByteTokens, TokenlessSymbolsFallBackByteByByte) {
  gguf::testing::Builder b;
  b.string("tokenizer.ggml.model", "llama")
      .string_array("tokenizer.ggml.tokens", {"u<x>", "\xE2\x96\x81" "a", "b"})
      .array<float>("tokenizer.ggml.scores", gguf::ValueType::float32, {0, -1, -1})
      .array<std::int32_t>("tokenizer.ggml.token_type", gguf::ValueType::int32, {4, 1, 1})
      .u32("tokenizer.ggml.unknown_token_id", 0);
  std::vector<std::byte> bytes;
  const Result<Tokenizer> tok = load(b, bytes);
  ASSERT_TRUE(tok.ok()) << tok.error().describe();
  EXPECT_EQ(tok->bytes_without_token(), 255u);  // every byte but "b"
  // "b": the prefix "▁" (3 bytes, no token) gives three unknowns, then "b".
  EXPECT_EQ(tok->encode("b", Special::plain), (std::vector<TokenId>{0, 0, 0, 2}));
  // "a": the prefix merges into "▁a".
  EXPECT_EQ(tok->encode("a", Special::plain), (std::vector<TokenId>{1}));
  // "\xC3 b": the lead byte C3 takes the first byte of the "▁" for the space into its
  // symbol; the rest of that "▁" and the stray byte fall back one by one.
  EXPECT_EQ(tok->encode("\xC3 b", Special::plain), (std::vector<TokenId>{0, 0, 0, 0, 0, 0, 0, 2}));
  for (const std::string text : {"b", "a", "\xC3 b", "\x00\xE2\x9F\x10-\xFF", "u<x>a u<x>", "\xC3 !\xC3\xBE", ""}) {
    const Status s = check_round_trip(*tok, text);
    EXPECT_TRUE(s.ok()) << "'" << text << "': " << s.error().describe();
  }
}

}  // namespace
}  // namespace activekv::tokenizer
