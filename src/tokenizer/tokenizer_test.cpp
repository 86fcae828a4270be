// tokenizer_test.cpp — BPE on a small crafted vocabulary: merge order by rank,
// leftmost ties, special tokens, round trips over random bytes, the stream
// decoder, zero allocation when warm, and refusal of broken tokenizer metadata.
#include <gtest/gtest.h>

#include <random>

#include "gguf/gguf_builder.hpp"
#include "testing/alloc_counter.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/invariants.hpp"
#include "tokenizer/stream_decoder.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::tokenizer {
namespace {

std::string bl(std::string_view bytes) {  // byte-level text of raw bytes
  std::string out;
  for (const char c : bytes) append_byte_level(static_cast<std::uint8_t>(c), out);
  return out;
}

// ids: 0 <|im_start|>, 1 <|im_end|>, 2..257 the bytes 0..255, then merged tokens.
struct Vocab {
  std::vector<std::string> tokens{"<|im_start|>", "<|im_end|>"};
  std::vector<std::int32_t> types{3, 3};
  std::vector<std::string> merges;
  Vocab() {
    for (unsigned b = 0; b < 256; ++b) {
      tokens.push_back(bl(std::string(1, static_cast<char>(b))));
      types.push_back(1);
    }
    add_merge("a", "b");   // rank 0
    add_merge("ab", "c");  // rank 1
    add_merge("b", "c");   // rank 2
    add_merge(" ", "a");   // rank 3
    add_merge("a", "a");   // rank 4
    add_merge("\xE4\xB8", "\xAD");  // rank 5: most of 中, then the whole character
    add_merge("\xE4", "\xB8");      // rank 6
  }
  void add_merge(std::string_view left, std::string_view right) {
    merges.push_back(bl(left) + " " + bl(right));
    const std::string joined = bl(std::string(left) + std::string(right));
    if (std::find(tokens.begin(), tokens.end(), joined) == tokens.end()) {
      tokens.push_back(joined);
      types.push_back(1);
    }
  }
  gguf::testing::Builder builder() const {
    gguf::testing::Builder b;
    b.string("tokenizer.ggml.model", "gpt2")
        .string("tokenizer.ggml.pre", "smollm")
        .string_array("tokenizer.ggml.tokens", tokens)
        .array<std::int32_t>("tokenizer.ggml.token_type", gguf::ValueType::int32, types)
        .string_array("tokenizer.ggml.merges", merges)
        .u32("tokenizer.ggml.eos_token_id", 1);
    return b;
  }
};

class CraftedTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = Vocab().builder().build();
    auto file = gguf::File::parse(bytes_, "crafted.gguf");
    ASSERT_TRUE(file.ok()) << file.error().describe();
    auto tok = Tokenizer::from_gguf(*file);
    ASSERT_TRUE(tok.ok()) << tok.error().describe();
    tok_ = std::make_unique<Tokenizer>(std::move(tok.value()));
  }
  TokenId id(std::string_view raw) const { return tok_->find(bl(raw)).value(); }
  std::vector<std::byte> bytes_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(CraftedTokenizer, LoadsIdsAndTypes) {
  EXPECT_EQ(tok_->vocab_size(), 2 + 256 + 7);
  EXPECT_EQ(tok_->merge_count(), 7u);
  EXPECT_EQ(tok_->eos(), 1);
  EXPECT_FALSE(tok_->bos().has_value());
  EXPECT_TRUE(tok_->is_control(0));
  EXPECT_FALSE(tok_->is_control(2));
  EXPECT_EQ(tok_->token_bytes(2 + ' '), " ");
  EXPECT_EQ(tok_->token_text(2 + ' '), "\xC4\xA0");
  EXPECT_EQ(tok_->token_bytes(0), "<|im_start|>");
  EXPECT_EQ(tok_->find("nope"), std::nullopt);
}

TEST_F(CraftedTokenizer, MergesByRankNotByPosition) {
  EXPECT_EQ(tok_->encode("abc"), (std::vector<TokenId>{id("abc")}));
  EXPECT_EQ(tok_->encode("bc"), (std::vector<TokenId>{id("bc")}));
  // " a" (rank 3) is a rule, but "ab" (rank 0) and then "abc" (rank 1) win first.
  EXPECT_EQ(tok_->encode(" abc"), (std::vector<TokenId>{id(" "), id("abc")}));
  EXPECT_EQ(tok_->encode(" ab"), (std::vector<TokenId>{id(" "), id("ab")}));
  EXPECT_EQ(tok_->encode(" ac"), (std::vector<TokenId>{id(" a"), id("c")}));
  // Equal ranks: the leftmost pair merges first.
  EXPECT_EQ(tok_->encode("aaa"), (std::vector<TokenId>{id("aa"), id("a")}));
  EXPECT_EQ(tok_->encode("aaaa"), (std::vector<TokenId>{id("aa"), id("aa")}));
  // Merges never cross pieces: "1" stands alone, so "a1a" cannot use "a a".
  EXPECT_EQ(tok_->encode("a1a"), (std::vector<TokenId>{id("a"), id("1"), id("a")}));
  // 中 = E4 B8 AD: (E4,B8) rank 6 must happen before (E4B8, AD) rank 5 can.
  EXPECT_EQ(tok_->encode("\xE4\xB8\xAD"), (std::vector<TokenId>{id("\xE4\xB8\xAD")}));
  EXPECT_TRUE(tok_->encode("").empty());
}

// One scratch used with two tokenizers: the piece cache of the first never answers for the second.
TEST_F(CraftedTokenizer, ScratchCacheFollowsTheTokenizer) {
  Vocab other;
  other.merges.erase(other.merges.begin());  // no "a b": "abc" becomes a + bc
  const std::vector<std::byte> bytes = other.builder().build();
  const Tokenizer second = Tokenizer::from_gguf(gguf::File::parse(bytes).value()).value();
  EXPECT_NE(second.instance_id(), tok_->instance_id());
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  tok_->encode("abc abc", Special::plain, scratch, ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{id("abc"), id(" "), id("abc")}));
  ids.clear();
  second.encode("abc", Special::plain, scratch, ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{id("a"), id("bc")}));
  ids.clear();
  tok_->encode("abc", Special::plain, scratch, ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{id("abc")}));
}

TEST_F(CraftedTokenizer, SpecialTokensWhenAllowed) {
  EXPECT_EQ(tok_->encode("x<|im_start|>ab<|im_end|>", Special::allow),
            (std::vector<TokenId>{id("x"), 0, id("ab"), 1}));
  const std::vector<TokenId> plain = tok_->encode("<|im_end|>", Special::plain);
  EXPECT_EQ(plain.size(), 10u) << "encoded byte by byte: no merges for these characters";
  EXPECT_EQ(tok_->decode(plain), "<|im_end|>");
  EXPECT_EQ(tok_->encode("<|im_start", Special::allow).size(), 10u) << "a prefix is not the token";
  EXPECT_EQ(tok_->decode(std::vector<TokenId>{0, id("ab"), 1}, /*skip_special=*/true), "ab");
  EXPECT_EQ(tok_->decode(std::vector<TokenId>{0, id("ab"), 1}), "<|im_start|>ab<|im_end|>");
}

TEST_F(CraftedTokenizer, DecodeReplacesIllFormedBytes) {
  EXPECT_EQ(tok_->decode(std::vector<TokenId>{id("\xE4\xB8")}), "\xEF\xBF\xBD");
  EXPECT_EQ(tok_->decode(std::vector<TokenId>{id("\xE4\xB8"), id("\xAD")}), "\xE4\xB8\xAD");
  EXPECT_EQ(tok_->decode(std::vector<TokenId>{id("\xFF"), id("a")}), "\xEF\xBF\xBD" "a");
}

// Random byte strings, ill-formed UTF-8 included: the ids' bytes are the input.
TEST_F(CraftedTokenizer, EveryByteStringRoundTrips) {
  const std::string alphabet = "abc a1'\n\t";
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  for (std::uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    std::string text;
    const std::size_t length = rng() % 48;
    for (std::size_t i = 0; i < length; ++i) {
      text.push_back(rng() % 3 == 0 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()]);
    }
    if (rng() % 5 == 0) text += "<|im_end|>";
    for (const Special special : {Special::allow, Special::plain}) {
      ids.clear();
      tok_->encode(text, special, scratch, ids);
      std::string back;
      for (const TokenId i : ids) tok_->decode_token(i, false, back);
      ASSERT_EQ(back, text) << "seed " << seed;
    }
    const Status s = check_round_trip(*tok_, text);
    ASSERT_TRUE(s.ok()) << "seed " << seed << ": " << s.error().describe();
  }
}

TEST_F(CraftedTokenizer, StreamDecoderMatchesWholeDecode) {
  StreamDecoder stream(*tok_, /*skip_special=*/false);
  for (std::uint32_t seed = 0; seed < 2000; ++seed) {
    std::mt19937 rng(seed);
    std::vector<TokenId> ids(rng() % 20);
    for (TokenId& i : ids) i = static_cast<TokenId>(rng() % static_cast<std::uint32_t>(tok_->vocab_size()));
    std::string streamed;
    for (const TokenId i : ids) streamed += stream.push(i);
    streamed += stream.finish();
    ASSERT_EQ(streamed, tok_->decode(ids)) << "seed " << seed;
  }
}

TEST_F(CraftedTokenizer, StreamDecoderHoldsBackPartialCharacters) {
  StreamDecoder stream(*tok_);
  EXPECT_EQ(stream.push(id("\xE4")), "");
  EXPECT_EQ(stream.push(id("\xB8")), "");
  EXPECT_EQ(stream.push(id("\xAD")), "\xE4\xB8\xAD");
  EXPECT_EQ(stream.push(id("\xE4\xB8")), "");
  EXPECT_EQ(stream.push(id("a")), "\xEF\xBF\xBD" "a") << "the character can no longer complete";
  EXPECT_EQ(stream.push(1), "") << "control tokens are skipped by default";
  EXPECT_EQ(stream.push(id("\xE4")), "");
  EXPECT_EQ(stream.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.finish(), "");
}

TEST_F(CraftedTokenizer, NoAllocationOnceWarm) {
  ASSERT_TRUE(activekv::testing::heap_counter_linked());
  EncodeScratch scratch;
  std::vector<TokenId> ids;
  const std::string text = "abc aaa<|im_end|> \xE4\xB8\xAD 123 it's\n\n  x";
  tok_->encode(text, Special::allow, scratch, ids);  // warm-up
  StreamDecoder stream(*tok_);
  const auto before = activekv::testing::heap_allocations();
  for (int round = 0; round < 100; ++round) {
    ids.clear();
    tok_->encode(text, Special::allow, scratch, ids);
    for (const TokenId i : ids) (void)stream.push(i);
    (void)stream.finish();
  }
  EXPECT_EQ(activekv::testing::heap_allocations(), before);
}

// A byte without a token becomes the unknown token if the file names one, else vanishes.
TEST(TokenizerLoad, BytesWithoutTokens) {
  Vocab v;
  v.tokens[2 + 4] = "\x01unused";  // byte 4 loses its token
  std::vector<std::byte> bytes = v.builder().build();
  Tokenizer dropped = Tokenizer::from_gguf(gguf::File::parse(bytes).value()).value();
  EXPECT_EQ(dropped.bytes_without_token(), 1u);
  EXPECT_EQ(dropped.encode("a\x04" "b").size(), 2u);
  bytes = v.builder().u32("tokenizer.ggml.unknown_token_id", 1).build();
  Tokenizer unknown = Tokenizer::from_gguf(gguf::File::parse(bytes).value()).value();
  const std::vector<TokenId> ids = unknown.encode("a\x04" "b", Special::plain);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], 1);
}

// A special token whose bytes have no single-byte token (the fuzz finding
// fuzz/corpus/tokenizer/round-trip-1: a control token " " in a vocabulary without
// one for the space) stands for its text where the mode matches it and vanishes
// where plain encoding drops the byte; check_round_trip expects each per mode.
TEST(TokenizerLoad, SpecialTokenOverTokenlessBytesRoundTrips) {
  Vocab v;
  v.tokens[2 + 4] = "\x01unused";  // byte 4 loses its token
  v.tokens.push_back("\x04");       // and a control token is that byte
  v.types.push_back(3);
  const TokenId control = static_cast<TokenId>(v.tokens.size() - 1);
  const std::vector<std::byte> bytes = v.builder().build();
  const Tokenizer tok = Tokenizer::from_gguf(gguf::File::parse(bytes).value()).value();
  ASSERT_EQ(tok.bytes_without_token(), 1u);
  const std::string text = "a\x04" "b";
  const std::vector<TokenId> allowed = tok.encode(text, Special::allow);
  ASSERT_EQ(allowed.size(), 3u);
  EXPECT_EQ(allowed[1], control);
  EXPECT_EQ(tok.decode(allowed), text);
  EXPECT_EQ(tok.decode(tok.encode(text, Special::plain)), "ab");
  for (const std::string& t : {text, std::string("\x04"), std::string("\x04\x04 a\x04")}) {
    const Status s = check_round_trip(tok, t);
    EXPECT_TRUE(s.ok()) << s.error().describe();
  }
}

// ---- refusal of broken metadata -------------------------------------------------

std::string load_error(const gguf::testing::Builder& b) {
  const std::vector<std::byte> bytes = b.build();
  const auto file = gguf::File::parse(bytes, "broken.gguf");
  if (!file) return "parse: " + file.error().describe();
  const auto tok = Tokenizer::from_gguf(*file);
  if (tok) return "";
  EXPECT_EQ(tok.error().setting, "broken.gguf");
  return tok.error().message;
}

TEST(TokenizerLoad, RefusesBrokenMetadataNamingTheKey) {
  Vocab v;
  EXPECT_NE(load_error(gguf::testing::Builder().string("tokenizer.ggml.model", "gpt2").string("tokenizer.ggml.pre", "smollm")).find("tokenizer.ggml.tokens"),
            std::string::npos);
  EXPECT_NE(load_error(gguf::testing::Builder().string("tokenizer.ggml.model", "t5")).find("model 't5' is not supported"),
            std::string::npos);
  EXPECT_NE(load_error(v.builder().string("tokenizer.ggml.pre", "x")).find("appears twice"), std::string::npos);

  Vocab bad_pre;
  gguf::testing::Builder b;
  b.string("tokenizer.ggml.model", "gpt2").string("tokenizer.ggml.pre", "deepseek-llm")
      .string_array("tokenizer.ggml.tokens", bad_pre.tokens).string_array("tokenizer.ggml.merges", bad_pre.merges);
  EXPECT_NE(load_error(b).find("pre-tokenizer 'deepseek-llm' is not supported; supported values are gpt-2"),
            std::string::npos);
  gguf::testing::Builder no_pre;  // absent: llama.cpp guesses 'default'; ActiveKV refuses
  no_pre.string("tokenizer.ggml.model", "gpt2")
      .string_array("tokenizer.ggml.tokens", bad_pre.tokens).string_array("tokenizer.ggml.merges", bad_pre.merges);
  EXPECT_NE(load_error(no_pre).find("'tokenizer.ggml.pre': is absent"), std::string::npos);

  Vocab unknown_merge;
  unknown_merge.merges.push_back("zz q");
  EXPECT_NE(load_error(unknown_merge.builder()).find("merge 7 ('zz q') names 'zz'"), std::string::npos);

  Vocab one_sided;
  one_sided.merges.push_back("ab");
  EXPECT_NE(load_error(one_sided.builder()).find("not two tokens"), std::string::npos);

  Vocab short_types;
  short_types.types.pop_back();
  EXPECT_NE(load_error(short_types.builder()).find("entries for"), std::string::npos);

  EXPECT_NE(load_error(Vocab().builder().u32("tokenizer.ggml.bos_token_id", 100000)).find("bos_token_id"),
            std::string::npos);
}

// Random damage to a tokenizer's GGUF: the file or the tokenizer is refused with a
// message, or it loads and still encodes and decodes without fault. (Run under
// the asan preset, this is the memory-safety check of loading outside input.)
TEST(TokenizerLoad, RandomDamageIsRefusedOrHarmless) {
  const std::vector<std::byte> good = Vocab().builder().build();
  int loaded = 0;
  for (std::uint32_t seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> bytes = good;
    for (int i = 0; i < 3; ++i) bytes[rng() % bytes.size()] = std::byte(rng());
    const auto file = gguf::File::parse(bytes, "damaged.gguf");
    if (!file) continue;
    const auto tok = Tokenizer::from_gguf(*file);
    if (!tok) {
      EXPECT_FALSE(tok.error().message.empty());
      continue;
    }
    ++loaded;
    const std::string text = "abc <|im_end|> aaa 12 \xE4\xB8\xAD it's";
    const std::vector<TokenId> ids = tok->encode(text);
    for (const TokenId id : ids) ASSERT_TRUE(tok->valid(id)) << "seed " << seed;
    (void)tok->decode(ids);
  }
  EXPECT_GT(loaded, 0) << "damage inside token texts leaves a loadable vocabulary";
}

// ---- chat template --------------------------------------------------------------

constexpr std::string_view kSmolTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatTemplate, RendersChatMlWithTheDefaultSystemPrompt) {
  const ChatTemplate t = ChatTemplate::from_text(kSmolTemplate, "m.gguf").value();
  EXPECT_EQ(t.default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(t.render_prompt("What is 2+2?"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatMessage> with_system{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
  EXPECT_EQ(t.render(with_system, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n");
  EXPECT_EQ(t.render({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, RefusesTemplatesThatAreNotChatMl) {
  const auto r = ChatTemplate::from_text("{{ bos_token }}[INST] {{ content }} [/INST]", "m.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::unsupported);
  EXPECT_NE(r.error().message.find("tokenizer.chat_template"), std::string::npos);
  const auto plain = ChatTemplate::from_text("<|im_start|>{{ role }}\n{{ content }}<|im_end|>", "m.gguf").value();
  EXPECT_EQ(plain.default_system_prompt(), "");
  EXPECT_EQ(plain.render_prompt("x"), "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace activekv::tokenizer
