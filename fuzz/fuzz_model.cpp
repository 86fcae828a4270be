// fuzz_model.cpp — the model loader's semantic checks, on top of the GGUF parser.
//
// The input is not a file but a recipe: it steers a builder that writes a tiny
// Llama GGUF (2 layers, embedding 32, heads 2/1, FFN 64, 259 tokens, F32
// weights) and, for each metadata key and each tensor, chooses from the input
// whether to write it as a valid model would, drop it, or write a hostile value
// (0, 2^32-1, a random integer, NaN, infinity, a negative float, a string
// where a number belongs; a tensor's shape, type or count changed). Metadata
// and tensor table are so mutated together, and every input reaches the
// semantic checks instead of dying in the parser. An empty input is the valid
// model (fuzz/corpus/model/ holds it and a few mutations as seeds).
//
// The loader's promise: Model::from_file, Tokenizer::from_gguf and
// check_vocabulary either refuse with an Error, or return a model whose every
// hyper-parameter is within the stated limits (engine/model.hpp), whose
// vocabulary agrees with token_embd, and whose every weight view lies inside
// the file — never a crash, an allocation sized from an unchecked value, an
// out-of-bounds read (ASan) or undefined behaviour (UBSan).
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/model.hpp"
#include "gguf/gguf_builder.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

using activekv::gguf::GgmlType;
using activekv::gguf::ValueType;
using activekv::gguf::testing::Builder;

constexpr std::uint32_t kLayers = 2, kEmbed = 32, kHeads = 2, kKvHeads = 1, kFfn = 64, kContext = 256;
constexpr std::uint32_t kHeadDim = kEmbed / kHeads;

std::string byte_token(unsigned b) {
  // GPT-2's byte-to-unicode mapping, as UTF-8.
  unsigned cp;
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
    cp = b;
  } else {
    unsigned n = 0;
    for (unsigned c = 0; c < b; ++c)
      if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// A u32 metadata value: the valid one, or a hostile one chosen by the input.
void u32_key(Builder& b, FuzzedDataProvider& in, const char* key, std::uint32_t valid) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 1: return;  // dropped
    case 2: b.u32(key, 0); return;
    case 3: b.u32(key, std::numeric_limits<std::uint32_t>::max()); return;
    case 4: b.u32(key, in.ConsumeIntegral<std::uint32_t>()); return;
    case 5: b.u32(key, valid + in.ConsumeIntegralInRange<std::uint32_t>(1, 4)); return;
    case 6: b.scalar<std::uint64_t>(key, ValueType::uint64, in.ConsumeIntegral<std::uint64_t>()); return;
    case 7: b.scalar<std::int32_t>(key, ValueType::int32, in.ConsumeIntegral<std::int32_t>()); return;
    case 8: b.string(key, "two"); return;
    case 9: b.f32(key, static_cast<float>(valid)); return;
    default: b.u32(key, valid); return;
  }
}

void f32_key(Builder& b, FuzzedDataProvider& in, const char* key, float valid) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 1: return;
    case 2: b.f32(key, std::numeric_limits<float>::quiet_NaN()); return;
    case 3: b.f32(key, std::numeric_limits<float>::infinity()); return;
    case 4: b.f32(key, -valid); return;
    case 5: b.f32(key, 0.0f); return;
    case 6: b.f32(key, in.ConsumeFloatingPoint<float>()); return;
    case 7: b.scalar<double>(key, ValueType::float64, in.ConsumeFloatingPoint<double>()); return;
    case 8: b.u32(key, 7); return;
    default: b.f32(key, valid); return;
  }
}

std::vector<std::byte> random_data(FuzzedDataProvider& in, std::size_t bytes) {
  std::vector<std::byte> data(bytes);
  const std::uint32_t seed = in.ConsumeIntegral<std::uint32_t>();
  std::uint32_t x = seed | 1;
  for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    const float v = (static_cast<float>(x % 2001) - 1000.0f) * 1e-4f;
    std::memcpy(data.data() + i, &v, 4);
  }
  return data;
}

// A tensor [cols, rows] (rows 0: a vector of cols): valid, dropped, reshaped, retyped or short of data.
void tensor(Builder& b, FuzzedDataProvider& in, const std::string& name, std::uint64_t cols, std::uint64_t rows) {
  std::vector<std::uint64_t> ne = rows == 0 ? std::vector<std::uint64_t>{cols} : std::vector<std::uint64_t>{cols, rows};
  GgmlType type = GgmlType::f32;
  bool short_data = false;
  switch (in.ConsumeIntegralInRange<int>(0, 23)) {
    case 1: return;  // dropped
    case 2: ne[0] = in.ConsumeIntegralInRange<std::uint64_t>(0, 512); break;
    case 3: if (ne.size() == 2) ne[1] = in.ConsumeIntegralInRange<std::uint64_t>(0, 512); break;
    case 4: ne.push_back(1); break;
    case 5: ne.pop_back(); if (ne.empty()) ne.push_back(cols); break;
    case 6: type = GgmlType::f16; break;
    case 7: short_data = true; break;
    case 8: b.tensor(name, ne, type, {}); return;  // declared, no data behind it (the parser's case)
    default: break;
  }
  std::uint64_t elements = 1;
  for (std::uint64_t d : ne) elements *= d;
  const std::uint64_t bytes = elements * (type == GgmlType::f16 ? 2 : 4);
  if (bytes > (1u << 20)) return;  // keep inputs small: a huge shape is the parser's case (fuzz_gguf)
  b.tensor(name, ne, type, random_data(in, short_data && bytes > 0 ? bytes - 1 : bytes));
}

std::vector<std::byte> build(FuzzedDataProvider& in) {
  Builder b;
  if (in.ConsumeIntegralInRange<int>(0, 7) == 1) b.alignment(64);
  b.string("general.architecture", "llama");
  b.string("general.name", "fuzz");
  u32_key(b, in, "llama.block_count", kLayers);
  u32_key(b, in, "llama.context_length", kContext);
  u32_key(b, in, "llama.embedding_length", kEmbed);
  u32_key(b, in, "llama.feed_forward_length", kFfn);
  u32_key(b, in, "llama.attention.head_count", kHeads);
  u32_key(b, in, "llama.attention.head_count_kv", kKvHeads);
  u32_key(b, in, "llama.rope.dimension_count", kHeadDim);
  f32_key(b, in, "llama.rope.freq_base", 10000.0f);
  f32_key(b, in, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.string("tokenizer.ggml.model", "gpt2");
  b.string("tokenizer.ggml.pre", "smollm");
  // The vocabulary: 256 byte tokens and 3 specials, or a count the input chooses.
  std::vector<std::string> tokens;
  for (unsigned t = 0; t < 256; ++t) tokens.push_back(byte_token(t));
  tokens.push_back("<|im_start|>");
  tokens.push_back("<|im_end|>");
  tokens.push_back("<|endoftext|>");
  const std::uint32_t vocab_valid = static_cast<std::uint32_t>(tokens.size());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 1) tokens.resize(in.ConsumeIntegralInRange<std::size_t>(1, 300), "<x>");
  b.string_array("tokenizer.ggml.tokens", tokens);
  b.string_array("tokenizer.ggml.merges", {});
  u32_key(b, in, "tokenizer.ggml.eos_token_id", vocab_valid - 1);
  b.string("tokenizer.chat_template", "<|im_start|>{{ m }}<|im_end|>");

  const std::uint32_t vocab_rows = in.ConsumeIntegralInRange<int>(0, 7) == 1
                                       ? in.ConsumeIntegralInRange<std::uint32_t>(1, 300)
                                       : vocab_valid;
  tensor(b, in, "token_embd.weight", kEmbed, vocab_rows);
  tensor(b, in, "output_norm.weight", kEmbed, 0);
  const std::uint32_t layers = in.ConsumeIntegralInRange<std::uint32_t>(0, 3) == 1 ? kLayers - 1 : kLayers;
  for (std::uint32_t l = 0; l < layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tensor(b, in, p + "attn_norm.weight", kEmbed, 0);
    tensor(b, in, p + "ffn_norm.weight", kEmbed, 0);
    tensor(b, in, p + "attn_q.weight", kEmbed, kHeads * kHeadDim);
    tensor(b, in, p + "attn_k.weight", kEmbed, kKvHeads * kHeadDim);
    tensor(b, in, p + "attn_v.weight", kEmbed, kKvHeads * kHeadDim);
    tensor(b, in, p + "attn_output.weight", kHeads * kHeadDim, kEmbed);
    tensor(b, in, p + "ffn_gate.weight", kEmbed, kFfn);
    tensor(b, in, p + "ffn_up.weight", kEmbed, kFfn);
    tensor(b, in, p + "ffn_down.weight", kFfn, kEmbed);
  }
  return b.build();
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool inside(const activekv::engine::MatrixView& m, const std::byte* begin, std::size_t size) {
  const auto* p = reinterpret_cast<const std::byte*>(m.data);
  return p >= begin && static_cast<std::size_t>(p - begin) + std::uint64_t{m.rows} * m.row_bytes <= size;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace activekv;
  FuzzedDataProvider in(data, size);
  std::vector<std::byte> bytes = build(in);
  Result<gguf::File> file = gguf::File::parse(bytes, "fuzz.gguf");
  if (!file) return 0;
  Result<std::unique_ptr<engine::Model>> model = engine::Model::from_file(std::move(file).value());
  if (!model) return 0;
  const engine::Model& m = **model;
  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(m.file());
  if (!tok) return 0;
  if (!engine::check_vocabulary(m, static_cast<std::uint64_t>(tok->vocab_size()))) return 0;
  (void)tokenizer::ChatTemplate::from_gguf(m.file());

  // Accepted: every value within its limit, every view inside the file.
  const engine::ModelConfig& c = m.config();
  check(c.layers >= 1 && c.layers <= engine::layers_max);
  check(c.context_tokens >= 1 && c.context_tokens <= engine::context_tokens_max);
  check(c.embedding >= 1 && c.embedding <= engine::embedding_max && c.ffn >= 1 && c.ffn <= engine::ffn_max);
  check(c.q_heads >= 1 && c.kv_heads >= 1 && c.q_heads % c.kv_heads == 0 && c.head_dim <= engine::head_dim_max);
  check(c.rope_dims % 2 == 0 && c.rope_dims <= c.head_dim);
  check(std::isfinite(c.rope_theta) && c.rope_theta >= 1.0f);
  check(std::isfinite(c.rms_epsilon) && c.rms_epsilon > 0.0f);
  check(static_cast<std::int64_t>(c.vocab) == tok->vocab_size());
  check(!tok->eos() || *tok->eos() < tok->vocab_size());
  check(inside(m.token_embd(), bytes.data(), bytes.size()) && inside(m.output(), bytes.data(), bytes.size()));
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const engine::LayerWeights& w = m.layer(l);
    for (const engine::MatrixView* v : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down})
      check(inside(*v, bytes.data(), bytes.size()));
  }
  return 0;
}
