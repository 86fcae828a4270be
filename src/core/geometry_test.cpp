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
  EXPECT_EQ(hybrid.geometry.recurrent_state_bytes, 147ull * 1024 * 1024);
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
