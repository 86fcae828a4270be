// model_test.cpp — a model loads only when the forward pass can run it:
// missing files, files that are not GGUF, other architectures, missing or
// misshapen tensors and unsupported types are errors that name the cause.
#include "engine/model.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <limits>

#include "gguf/gguf_builder.hpp"

namespace activekv::engine {
namespace {

using gguf::testing::Builder;

constexpr std::uint32_t kEmbedding = 64, kHeads = 2, kKvHeads = 1, kFfn = 96, kVocab = 40, kLayers = 2;

std::vector<std::byte> f32_bytes(std::size_t n, float value = 0.01f) {
  std::vector<std::byte> out(n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) std::memcpy(out.data() + i * sizeof(float), &value, sizeof value);
  return out;
}

// Writes one metadata key in place of the valid value (returns true), or leaves it (false).
using Edit = std::function<bool(Builder&, const std::string& key)>;

// A tiny, valid Llama model with F32 weights; `edit` may replace any metadata value.
Builder tiny_llama(const std::string& arch = "llama", GgmlType matrix_type = GgmlType::f32, std::uint64_t q_rows = kEmbedding,
                   const Edit& edit = nullptr) {
  Builder b;
  b.string("general.architecture", arch);
  auto u32 = [&](const std::string& key, std::uint32_t v) {
    if (!edit || !edit(b, key)) b.u32(key, v);
  };
  auto f32 = [&](const std::string& key, float v) {
    if (!edit || !edit(b, key)) b.f32(key, v);
  };
  u32(arch + ".block_count", kLayers);
  u32(arch + ".embedding_length", kEmbedding);
  u32(arch + ".feed_forward_length", kFfn);
  u32(arch + ".attention.head_count", kHeads);
  u32(arch + ".attention.head_count_kv", kKvHeads);
  u32(arch + ".context_length", 128);
  f32(arch + ".rope.freq_base", 10000.0f);
  f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  auto matrix = [&](const std::string& name, std::uint64_t cols, std::uint64_t rows, GgmlType type) {
    b.tensor(name, {cols, rows}, type, std::vector<std::byte>(quant_row_bytes(type, cols) * rows));
  };
  matrix("token_embd.weight", kEmbedding, kVocab, GgmlType::f32);
  b.tensor("output_norm.weight", {kEmbedding}, GgmlType::f32, f32_bytes(kEmbedding, 1.0f));
  const std::uint32_t head_dim = kEmbedding / kHeads;
  for (std::uint32_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    b.tensor(p + "attn_norm.weight", {kEmbedding}, GgmlType::f32, f32_bytes(kEmbedding, 1.0f));
    b.tensor(p + "ffn_norm.weight", {kEmbedding}, GgmlType::f32, f32_bytes(kEmbedding, 1.0f));
    matrix(p + "attn_q.weight", kEmbedding, l == 1 ? q_rows : kEmbedding, matrix_type);
    matrix(p + "attn_k.weight", kEmbedding, kKvHeads * head_dim, matrix_type);
    matrix(p + "attn_v.weight", kEmbedding, kKvHeads * head_dim, matrix_type);
    matrix(p + "attn_output.weight", kEmbedding, kEmbedding, matrix_type);
    matrix(p + "ffn_gate.weight", kEmbedding, kFfn, matrix_type);
    matrix(p + "ffn_up.weight", kEmbedding, kFfn, matrix_type);
    matrix(p + "ffn_down.weight", kFfn, kEmbedding, matrix_type);
  }
  return b;
}

Result<std::unique_ptr<Model>> load_bytes(const std::vector<std::byte>& bytes) {
  Result<gguf::File> file = gguf::File::parse(bytes, "tiny.gguf");
  if (!file) return file.error();
  return Model::from_file(std::move(file).value());
}

TEST(Model, TinyLlamaLoadsWithItsGeometry) {
  const std::vector<std::byte> bytes = tiny_llama().build();
  Result<std::unique_ptr<Model>> model = load_bytes(bytes);
  ASSERT_TRUE(model.ok()) << model.error().describe();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.layers, kLayers);
  EXPECT_EQ(c.head_dim, kEmbedding / kHeads);
  EXPECT_EQ(c.vocab, kVocab);
  EXPECT_TRUE(c.tied_output);
  const Geometry g = (*model)->geometry();
  EXPECT_EQ(g.dense_layers, kLayers);
  EXPECT_EQ(g.kv_heads, kKvHeads);
  EXPECT_EQ(g.row_bytes(), 2u * kKvHeads * (kEmbedding / kHeads) * 2u);
  EXPECT_TRUE(g.validate().ok());
}

// One key replaced by `write`; the model must be refused naming the key and `value_text`.
void expect_refused(const std::string& key, const std::function<void(Builder&, const std::string&)>& write,
                    const std::string& value_text) {
  const Edit edit = [&](Builder& b, const std::string& k) {
    if (k != key) return false;
    write(b, k);
    return true;
  };
  Result<std::unique_ptr<Model>> model = load_bytes(tiny_llama("llama", GgmlType::f32, kEmbedding, edit).build());
  ASSERT_FALSE(model.ok()) << key << " = " << value_text << " was accepted";
  EXPECT_EQ(model.error().setting, "tiny.gguf");
  EXPECT_NE(model.error().message.find(key), std::string::npos) << model.error().describe();
  EXPECT_NE(model.error().message.find(value_text), std::string::npos) << model.error().describe();
}

TEST(Model, HyperParametersPastTheirLimitsAreRefusedBeforeAnythingIsSized) {
  const auto u32 = [](std::uint32_t v) { return [v](Builder& b, const std::string& k) { b.u32(k, v); }; };
  const auto f32 = [](float v) { return [v](Builder& b, const std::string& k) { b.f32(k, v); }; };
  expect_refused("llama.block_count", u32(UINT32_MAX), "4294967295");  // the layer table is never sized by it
  expect_refused("llama.block_count", u32(3), "blk.2.attn_q.weight");   // more layers than the tensors hold
  expect_refused("llama.context_length", u32(UINT32_MAX), "4294967295");
  expect_refused("llama.context_length", u32(context_tokens_max + 1), "1048577");
  expect_refused("llama.embedding_length", u32(embedding_max + 1), "65537");
  expect_refused("llama.feed_forward_length", u32(0), "is 0");
  expect_refused("llama.attention.head_count", u32(heads_max + 1), "1025");
  expect_refused("llama.attention.head_count_kv", u32(UINT32_MAX), "4294967295");
  expect_refused("llama.rope.freq_base", f32(std::numeric_limits<float>::quiet_NaN()), "nan");
  expect_refused("llama.rope.freq_base", f32(std::numeric_limits<float>::infinity()), "inf");
  expect_refused("llama.rope.freq_base", f32(-10000.0f), "-10000");
  expect_refused("llama.attention.layer_norm_rms_epsilon", f32(-1e-5f), "-1e-05");
  expect_refused("llama.attention.layer_norm_rms_epsilon", f32(0.0f), "is 0");
}

// A tiny file of `arch` (llama's tensors) with `extra` keys added; it must be refused naming every
// string in `named`.
void expect_hparams_refused(const std::string& arch, const std::function<void(Builder&)>& extra,
                            const std::vector<std::string>& named) {
  Builder b = tiny_llama(arch);
  extra(b);
  Result<std::unique_ptr<Model>> model = load_bytes(b.build());
  ASSERT_FALSE(model.ok()) << named[0] << " was accepted";
  for (const std::string& n : named)
    EXPECT_NE(model.error().message.find(n), std::string::npos) << "wanted '" << n << "' in: " << model.error().describe();
}

TEST(Model, WindowAndRopeKeysAreCheckedNamingTheKey) {
  const std::string w = "gemma3.attention.sliding_window";
  expect_hparams_refused("gemma3", [](Builder&) {}, {w});  // Gemma 3 needs its window
  expect_hparams_refused("gemma3", [&](Builder& b) { b.u32(w, 0); }, {w, "is 0"});
  expect_hparams_refused("gemma3", [&](Builder& b) { b.u32(w, 129); }, {w, "129", "context_length"});
  expect_hparams_refused("llama", [](Builder& b) { b.u32("llama.attention.sliding_window", 4096); },
                         {"llama.attention.sliding_window", "4096"});
  expect_hparams_refused("gemma3",
                         [&](Builder& b) {
                           b.u32(w, 64);
                           b.array<std::uint8_t>("gemma3.attention.sliding_window_pattern", gguf::ValueType::boolean, {1, 0, 1});
                         },
                         {"gemma3.attention.sliding_window_pattern", "3 entries", "block_count"});
  expect_hparams_refused("gemma3",
                         [&](Builder& b) {
                           b.u32(w, 64);
                           b.u32("gemma3.attention.sliding_window_pattern", 0);
                         },
                         {"gemma3.attention.sliding_window_pattern", "is 0"});
  expect_hparams_refused("llama", [](Builder& b) { b.string("llama.rope.scaling.type", "yarn"); },
                         {"llama.rope.scaling.type", "yarn"});
  expect_hparams_refused("llama", [](Builder& b) { b.f32("llama.rope.scaling.factor", -4.0f); b.string("llama.rope.scaling.type", "linear"); },
                         {"llama.rope.scaling.factor", "-4"});
}

TEST(Model, HeadCountsThatContradictTheTensorsNameBoth) {
  // head_count 2 × key_length 16 = 32 rows, but attn_q has 64.
  expect_hparams_refused("llama", [](Builder& b) { b.u32("llama.attention.key_length", 16); },
                         {"llama.attention.head_count", "blk.0.attn_q.weight", "64 rows"});
}

TEST(Model, WindowLayersFollowThePattern) {
  Builder b = tiny_llama("llama");
  b.u32("llama.attention.sliding_window", 32);
  Result<std::unique_ptr<Model>> model = load_bytes(b.build());
  ASSERT_TRUE(model.ok()) << model.error().describe();
  EXPECT_EQ((*model)->config().window_layers(), kLayers);  // Mistral-style: every layer
  EXPECT_EQ((*model)->config().window, 32u);
}

TEST(Model, VocabularyMustMatchTokenEmbdRows) {
  Result<std::unique_ptr<Model>> model = load_bytes(tiny_llama().build());
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE(check_vocabulary(**model, kVocab).ok());
  for (const std::uint64_t tokens : {std::uint64_t{kVocab - 1}, std::uint64_t{kVocab + 1}}) {
    Status s = check_vocabulary(**model, tokens);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message.find("tokenizer.ggml.tokens"), std::string::npos);
    EXPECT_NE(s.error().message.find("token_embd.weight"), std::string::npos);
  }
}

TEST(Model, MissingFileIsNotFound) {
  Result<std::unique_ptr<Model>> model = Model::load("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::not_found);
  EXPECT_NE(model.error().describe().find("--model"), std::string::npos);
}

TEST(Model, FileThatIsNotGgufIsMalformed) {
  const std::string path = ::testing::TempDir() + "not_a_model.gguf";
  std::ofstream(path) << "this is a text file, not a GGUF model\n";
  Result<std::unique_ptr<Model>> model = Model::load(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::malformed) << model.error().describe();
}

TEST(Model, OtherArchitectureIsUnsupported) {
  Result<std::unique_ptr<Model>> model = load_bytes(tiny_llama("mamba").build());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::unsupported);
  EXPECT_NE(model.error().message.find("mamba"), std::string::npos) << model.error().describe();
}

TEST(Model, MisshapenTensorIsNamed) {
  Result<std::unique_ptr<Model>> model = load_bytes(tiny_llama("llama", GgmlType::f32, kEmbedding + 32).build());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::malformed);
  EXPECT_NE(model.error().message.find("blk.1.attn_q.weight"), std::string::npos) << model.error().describe();
}

TEST(Model, UnsupportedTensorTypeIsNamed) {
  Result<std::unique_ptr<Model>> model = load_bytes(tiny_llama("llama", GgmlType::q8_1).build());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::unsupported);
  EXPECT_NE(model.error().message.find("Q8_1"), std::string::npos) << model.error().describe();
}

TEST(Model, UnreadTypeIsRefusedInOneLineNamingTensorTypeAndTheSupportedList) {
  Result<std::unique_ptr<Model>> model = load_bytes(tiny_llama("llama", GgmlType::iq4_nl).build());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.error().code, ErrorCode::unsupported);
  const std::string& m = model.error().message;
  EXPECT_NE(m.find("tensor blk.0.attn_q.weight is IQ4_NL, which ActiveKV does not read; supported: F32, F16, BF16, "
                   "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(Model, MissingTensorIsNamed) {
  // A file that declares one layer but carries none of its tensors.
  Builder c;
  c.string("general.architecture", "llama");
  c.u32("llama.block_count", 1);
  c.u32("llama.embedding_length", kEmbedding);
  c.u32("llama.feed_forward_length", kFfn);
  c.u32("llama.attention.head_count", kHeads);
  c.u32("llama.context_length", 128);
  c.tensor("token_embd.weight", {kEmbedding, kVocab}, GgmlType::f32, f32_bytes(kEmbedding * kVocab));
  c.tensor("output_norm.weight", {kEmbedding}, GgmlType::f32, f32_bytes(kEmbedding));
  Result<std::unique_ptr<Model>> model = load_bytes(c.build());
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("blk.0."), std::string::npos) << model.error().describe();
}

}  // namespace
}  // namespace activekv::engine
