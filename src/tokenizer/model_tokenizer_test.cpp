// model_tokenizer_test.cpp — the default model's tokenizer: round trips on varied
// text, known ids (as the `tokenizers` package produces them from the same file),
// the ChatML prompt, and streaming decode of multi-byte characters.
#include <gtest/gtest.h>

#include <random>

#include "gguf/gguf.hpp"
#include "gguf/test_model.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/invariants.hpp"
#include "tokenizer/stream_decoder.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::tokenizer {
namespace {

class ModelTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = gguf::testing::find_default_model();
    if (path.empty()) return;
    auto file = gguf::File::open(path);
    ASSERT_TRUE(file.ok()) << file.error().describe();
    file_ = new gguf::File(std::move(file.value()));
    auto tok = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(tok.ok()) << tok.error().describe();
    tok_ = new Tokenizer(std::move(tok.value()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete file_;
    tok_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << "default model not installed (scripts/install-deps.sh installs it)";
  }
  static gguf::File* file_;
  static Tokenizer* tok_;
};
gguf::File* ModelTokenizer::file_ = nullptr;
Tokenizer* ModelTokenizer::tok_ = nullptr;

const std::vector<std::string>& varied_texts() {
  static const std::vector<std::string> texts = {
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog.",
      "I'm sure they'll say it's fine; we've done what you'd've done.",
      "3.14159 26535 89793 + 1,000,000 = 1000003.14159",
      "    four leading spaces, two trailing  ",
      "tabs\tand\t\tnewlines\n\n\nand\r\nCRLF",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 flags \xF0\x9F\x87\xAB\xF0\x9F\x87\xB7",
      "caf\xC3\xA9 na\xC3\xAF\x76\x65 \xC3\x9C\x62\x65rgr\xC3\xB6\xC3\x9F\x65 \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xCE\xB1\xCE\xB2\xCE\xB3",
      "int main(int argc, char** argv) {\n  return argc > 1 ? 0 : -1;  // done\n}\n",
      "def f(x):\n    return [i ** 2 for i in range(x) if i % 3 == 0]\n",
      "<|im_start|>user\nHi<|im_end|>\n",
      "\xD9\xA1\xD9\xA2\xD9\xA3 \xC2\xBD \xE2\x85\xAB x\xC2\xB2",
      "",
      " ",
      "\n",
  };
  return texts;
}

TEST_F(ModelTokenizer, ReadsTheVocabulary) {
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->merge_count(), 48900u);
  EXPECT_EQ(tok_->pre_tokenizer(), PreTokenizerKind::smollm);
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->eos(), 2);
  EXPECT_EQ(tok_->padding(), 2);
  EXPECT_EQ(tok_->unknown(), 0);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_EQ(tok_->bytes_without_token(), 21u);
  EXPECT_EQ(tok_->encode("\x04", Special::plain), (std::vector<TokenId>{0})) << "no token: the unknown token";
  EXPECT_EQ(tok_->token_text(1), "<|im_start|>");
  EXPECT_TRUE(tok_->is_control(2));
  EXPECT_EQ(tok_->find("<|im_end|>"), 2);
}

TEST_F(ModelTokenizer, VariedTextRoundTrips) {
  for (const std::string& text : varied_texts()) {
    for (const Special special : {Special::allow, Special::plain}) {
      const std::vector<TokenId> ids = tok_->encode(text, special);
      EXPECT_EQ(tok_->decode(ids), text) << text;
      if (!text.empty()) {
        EXPECT_LE(ids.size(), text.size()) << "BPE never produces more tokens than bytes";
      }
    }
  }
}

TEST_F(ModelTokenizer, SpecialTokensAreWholeTokensOnlyWhenAllowed) {
  const std::vector<TokenId> allowed = tok_->encode("<|im_start|>user\nHi<|im_end|>\n", Special::allow);
  ASSERT_GE(allowed.size(), 4u);
  EXPECT_EQ(allowed.front(), 1);
  EXPECT_EQ(allowed[allowed.size() - 2], 2);
  const std::vector<TokenId> plain = tok_->encode("<|im_start|>", Special::plain);
  EXPECT_GT(plain.size(), 1u);
  for (const TokenId id : plain) EXPECT_FALSE(tok_->is_control(id));
}

TEST_F(ModelTokenizer, ChatPromptFollowsTheModelsTemplate) {
  const ChatTemplate chat = ChatTemplate::from_gguf(*file_).value();
  EXPECT_EQ(chat.default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const std::string prompt = chat.render_prompt("What is the capital of France?");
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<TokenId> ids = tok_->encode(prompt, Special::allow);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
  EXPECT_EQ(tok_->decode(ids), prompt);
}

TEST_F(ModelTokenizer, StreamingNeverPrintsAPartialCharacter) {
  for (const std::string& text : varied_texts()) {
    const std::vector<TokenId> ids = tok_->encode(text, Special::plain);
    StreamDecoder stream(*tok_);
    std::string streamed;
    for (const TokenId id : ids) {
      const std::string_view piece = stream.push(id);
      EXPECT_EQ(tok_->decode(tok_->encode(piece, Special::plain)), piece) << "a piece must be whole UTF-8";
      streamed += piece;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, text);
  }
}

// Random byte strings — ill-formed UTF-8 and the 21 tokenless bytes included —
// keep every promise of invariants.hpp.
TEST_F(ModelTokenizer, RandomBytesKeepTheInvariants) {
  const std::vector<std::string> alphabet = {"a", "the", " ", "  ", "\n", "7", "'s", "!", "\xC3\xA9", "\xE4\xB8\xAD",
                                             "\xF0\x9F\x98\x80", "<|im_end|>", "<|im_", "\x04", "\xFF", "\xC0",
                                             "\xE4\xB8", "\x80"};
  for (std::uint32_t seed = 0; seed < 500; ++seed) {
    std::mt19937 rng(seed);
    std::string text;
    const std::size_t length = rng() % 30;
    for (std::size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
    const Status s = check_round_trip(*tok_, text);
    ASSERT_TRUE(s.ok()) << "seed " << seed << ": " << s.error().describe();
  }
}

}  // namespace
}  // namespace activekv::tokenizer
