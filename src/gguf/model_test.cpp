// model_test.cpp — the real default model: the values this reader finds are those
// the Python `gguf` package reads from the same file (recorded below), and every
// tensor the llama architecture needs is present with its expected shape.
#include <gtest/gtest.h>

#include <algorithm>

#include "gguf/gguf.hpp"
#include "gguf/test_model.hpp"

namespace activekv::gguf {
namespace {

class GgufModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = new std::string(testing::find_default_model());
    if (path_->empty()) return;
    auto opened = File::open(*path_);
    ASSERT_TRUE(opened.ok()) << opened.error().describe();
    file_ = new File(std::move(opened.value()));
  }
  static void TearDownTestSuite() {
    delete file_;
    delete path_;
    file_ = nullptr;
    path_ = nullptr;
  }
  void SetUp() override {
    if (file_ == nullptr) GTEST_SKIP() << "default model not installed (scripts/install-deps.sh installs it)";
  }
  static std::string* path_;
  static File* file_;
};
std::string* GgufModel::path_ = nullptr;
File* GgufModel::file_ = nullptr;

TEST_F(GgufModel, HeaderAndLlamaHyperparameters) {
  const File& f = *file_;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 33u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_string("general.basename").value(), "smollm2");
  EXPECT_EQ(f.get_u32("llama.block_count").value(), 30u);
  EXPECT_EQ(f.get_u32("llama.context_length").value(), 8192u);
  EXPECT_EQ(f.get_u32("llama.embedding_length").value(), 576u);
  EXPECT_EQ(f.get_u32("llama.feed_forward_length").value(), 1536u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count").value(), 9u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv").value(), 3u);
  EXPECT_EQ(f.get_u32("llama.rope.dimension_count").value(), 64u);
  EXPECT_EQ(f.get_u32("llama.vocab_size").value(), 49152u);
  EXPECT_EQ(f.get_f32("llama.rope.freq_base").value(), 100000.0f);
  EXPECT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon").value(), 1e-5f);
  EXPECT_EQ(f.get_u32("general.file_type").value(), 3u);
  EXPECT_EQ(f.get_u32("general.quantization_version").value(), 2u);
  EXPECT_EQ(f.get_string_array("general.languages").value(), (std::vector<std::string_view>{"en"}));
}

TEST_F(GgufModel, TokenizerMetadata) {
  const File& f = *file_;
  EXPECT_EQ(f.get_string("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre").value(), "smollm");
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token").value());
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_space_prefix").value());
  EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id").value(), 1u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.eos_token_id").value(), 2u);
  EXPECT_EQ(f.get_u32("tokenizer.ggml.padding_token_id").value(), 2u);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens").value();
  ASSERT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(tokens[0], "<|endoftext|>");
  EXPECT_EQ(tokens[1], "<|im_start|>");
  EXPECT_EQ(tokens[2], "<|im_end|>");
  EXPECT_EQ(tokens[17], "!");
  const auto merges = f.get_string_array("tokenizer.ggml.merges").value();
  ASSERT_EQ(merges.size(), 48900u);
  EXPECT_EQ(merges[0], "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(merges[8], "\xC4\xA0t he");
  const auto types = f.get_array<std::int32_t>("tokenizer.ggml.token_type").value();
  ASSERT_EQ(types.size(), 49152u);
  EXPECT_EQ(std::count(types.begin(), types.end(), 3), 17);
  EXPECT_EQ(std::count(types.begin(), types.end(), 1), 49135);
  const std::string_view chat = f.get_string("tokenizer.chat_template").value();
  EXPECT_NE(chat.find("You are a helpful AI assistant named SmolLM"), std::string_view::npos);
}

TEST_F(GgufModel, TensorsOfTheLlamaArchitecture) {
  const File& f = *file_;
  const TensorInfo* embd = f.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->n_dims, 2u);
  EXPECT_EQ(embd->ne[0], 576u);
  EXPECT_EQ(embd->ne[1], 49152u);
  EXPECT_EQ(embd->type, GgmlType::q8_0);
  EXPECT_EQ(f.data_offset() + embd->offset, 1785664u);  // the gguf package reports absolute offsets
  EXPECT_EQ(embd->bytes, 576u / 32 * 34 * 49152);
  for (int layer = 0; layer < 30; ++layer) {
    for (const char* part : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                             "attn_norm", "ffn_norm"}) {
      const std::string name = "blk." + std::to_string(layer) + "." + part + ".weight";
      EXPECT_NE(f.find_tensor(name), nullptr) << name;
    }
  }
  const TensorInfo* k = f.find_tensor("blk.0.attn_k.weight");
  EXPECT_EQ(k->ne[0], 576u);
  EXPECT_EQ(k->ne[1], 192u);  // 3 kv heads × 64
  EXPECT_NE(f.find_tensor("output_norm.weight"), nullptr);
  std::uint64_t end = 0;
  for (const TensorInfo& t : f.tensors()) end = std::max(end, f.data_offset() + t.offset + t.bytes);
  EXPECT_LE(end, f.bytes().size());
  EXPECT_TRUE(walk(f.bytes()).ok());
}

}  // namespace
}  // namespace activekv::gguf
