// fuzz_tokenizer.cpp — tokenizers built from fuzzed vocabularies, on fuzzed text.
//
// The input chooses the model (SentencePiece or byte-level BPE), the
// pre-tokenizer name (accepted and refused ones), tokens drawn from a small
// alphabet so merges happen (with "▁", "<0xNN>", special-looking texts and
// ill-formed UTF-8), their scores and types, the BOS and space-prefix keys, and
// the text. Loading may refuse; a tokenizer that loads must keep every promise
// of check_round_trip (invariants.hpp) on the text — the fuzzer traps when it
// does not. The chat template recogniser runs on fuzzed template text and renders.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "gguf/gguf_builder.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/invariants.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

const char* const kPieces[] = {"a", "b", "\xE2\x96\x81", " ", "\n", "<0x41>", "<s>", "<|x|>", "\xE4\xB8\xAD", "\xFF", "\xC3", "'s", "1", "\xC4\xA0"};
const char* const kPre[] = {"smollm", "gpt-2", "llama-bpe", "qwen2", "refact", "falcon", "default", ""};

std::string draw(FuzzedDataProvider& in, std::size_t parts_max) {
  std::string s;
  const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(1, parts_max);
  for (std::size_t i = 0; i < n; ++i) s += kPieces[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kPieces) - 1)];
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace activekv;
  FuzzedDataProvider in(data, size);
  const bool spm = in.ConsumeBool();
  gguf::testing::Builder b;
  b.string("tokenizer.ggml.model", spm ? "llama" : "gpt2");
  if (!spm || in.ConsumeBool()) {
    const char* pre = kPre[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kPre) - 1)];
    if (*pre != '\0') b.string("tokenizer.ggml.pre", pre);
  }
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<std::int32_t> types;
  const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(1, 64);
  for (std::size_t i = 0; i < count; ++i) {
    tokens.push_back(draw(in, 3));
    scores.push_back(static_cast<float>(in.ConsumeIntegralInRange<int>(-20, 0)));
    types.push_back(in.ConsumeIntegralInRange<std::int32_t>(1, 6));
  }
  std::vector<std::string> merges;
  if (!spm) {
    for (std::size_t i = 0; i < 8 && in.ConsumeBool(); ++i) merges.push_back(draw(in, 1) + " " + draw(in, 1));
  }
  b.string_array("tokenizer.ggml.tokens", tokens);
  b.array<float>("tokenizer.ggml.scores", gguf::ValueType::float32, scores);
  b.array<std::int32_t>("tokenizer.ggml.token_type", gguf::ValueType::int32, types);
  if (!spm) b.string_array("tokenizer.ggml.merges", merges);
  if (in.ConsumeBool()) b.u32("tokenizer.ggml.unknown_token_id", in.ConsumeIntegralInRange<std::uint32_t>(0, 70));
  if (in.ConsumeBool()) b.boolean("tokenizer.ggml.add_space_prefix", in.ConsumeBool());
  if (in.ConsumeBool()) b.u32("tokenizer.ggml.bos_token_id", in.ConsumeIntegralInRange<std::uint32_t>(0, 70));
  const std::string jinja = in.ConsumeRandomLengthString(200);
  b.string("tokenizer.chat_template", jinja);
  const std::string text = in.ConsumeRemainingBytesAsString();

  const std::vector<std::byte> bytes = b.build();
  Result<gguf::File> file = gguf::File::parse(bytes, "fuzz.gguf");
  if (!file) return 0;
  Result<tokenizer::ChatTemplate> chat = tokenizer::ChatTemplate::recognise(*file);
  if (chat) {
    const tokenizer::ChatMessage m[] = {{"system", text}, {"user", text}, {"assistant", "x"}};
    (void)chat->accepts(m);
    (void)chat->render(m, true);
  }
  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(*file);
  if (!tok) return 0;
  const Status s = tokenizer::check_round_trip(*tok, text);
  if (!s) {
    std::fprintf(stderr, "broken promise: %s\n", s.error().message.c_str());
    __builtin_trap();
  }
  return 0;
}
