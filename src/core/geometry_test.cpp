// geometry_test.cpp — row bytes of the presets and refusal of bad fields.
#include "activekv/geometry.hpp"

#include <gtest/gtest.h>

namespace activekv {
namespace {

TEST(Geometry, PresetRowBytesMatchDesignTable) {
  EXPECT_EQ(find_preset("smollm2-135m")->geometry.row_bytes(), 768u);
  EXPECT_EQ(find_preset("llama-3.1-8b")->geometry.row_bytes(), 4096u);
  const Preset hybrid = find_preset("hybrid-27b").value();
  EXPECT_EQ(hybrid.geometry.row_bytes(), 4096u);
  EXPECT_EQ(hybrid.geometry.dense_layers, 16u);
  EXPECT_EQ(hybrid.geometry.dense_layers + hybrid.geometry.recurrent_layers, 64u);
  // Derived from Qwen3.5-27B's configuration (geometry.cpp): 48 Gated DeltaNet layers, each 48 value
  // heads × 128 × 128 f32 matrices + a bf16 convolution window of 3 × 10,240 channels.
  const std::uint64_t per_layer = 48ull * 128 * 128 * 4 + 3ull * (2 * 16 * 128 + 48 * 128) * 2;
  EXPECT_EQ(per_layer, 3'207'168u);
  EXPECT_EQ(hybrid.geometry.recurrent_state_bytes, 48 * per_layer);
  EXPECT_EQ((hybrid.geometry.recurrent_state_bytes + 512 * 1024) / (1024 * 1024), 147u) << "the seed's 147 MiB, rounded";
  // And its 2 GiB per 32K-token history: 16 dense layers × 32,768 tokens × 4,096 B rows.
  EXPECT_EQ(std::uint64_t{hybrid.geometry.dense_layers} * hybrid.max_context_tokens * hybrid.geometry.row_bytes(),
            2ull * 1024 * 1024 * 1024);
}

TEST(Geometry, UnknownPresetNamesTheChoices) {
  const auto result = find_preset("gpt-5");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().setting, "--preset");
  EXPECT_NE(result.error().message.find("hybrid-27b"), std::string::npos);
}

TEST(Geometry, ZeroFieldsAreRefusedByName) {
  Geometry g{30, 0, 3, 64, DType::f16, 0};
  EXPECT_TRUE(g.validate().ok());
  g.kv_heads = 0;
  ASSERT_FALSE(g.validate().ok());
  EXPECT_EQ(g.validate().error().setting, "--kv-heads");
}

TEST(Geometry, ParsesDtypes) {
  EXPECT_EQ(parse_dtype("bf16", "--dtype").value(), DType::bf16);
  EXPECT_EQ(parse_dtype("f32", "--dtype").value(), DType::f32);
  EXPECT_FALSE(parse_dtype("int8", "--dtype").ok());
}

}  // namespace
}  // namespace activekv
