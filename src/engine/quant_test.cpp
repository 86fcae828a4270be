// quant_test.cpp — the engine's dequantisation against the Python `gguf`
// package's, bit for bit (vectors written into the build folder at test time by
// tests/reference/make_quant_vectors.py, the ctest fixture engine_quant_vectors),
// and the scalar dot against dequantise-then-dot.
#include "engine/quant.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace activekv::engine {
namespace {

struct Case {
  const char* name;
  GgmlType type;
};

constexpr Case kCases[] = {
    {"F32", GgmlType::f32},   {"F16", GgmlType::f16},   {"BF16", GgmlType::bf16}, {"Q4_0", GgmlType::q4_0},
    {"Q4_1", GgmlType::q4_1}, {"Q5_0", GgmlType::q5_0}, {"Q5_1", GgmlType::q5_1}, {"Q8_0", GgmlType::q8_0},
    {"Q2_K", GgmlType::q2_k}, {"Q3_K", GgmlType::q3_k}, {"Q4_K", GgmlType::q4_k}, {"Q5_K", GgmlType::q5_k},
    {"Q6_K", GgmlType::q6_k},
};

nlohmann::json load_vectors() {
  std::ifstream in(ACTIVEKV_QUANT_VECTORS);
  EXPECT_TRUE(in.good()) << "missing " ACTIVEKV_QUANT_VECTORS
                         << ": ctest writes it (fixture engine_quant_vectors: python3 tests/reference/make_quant_vectors.py)";
  return nlohmann::json::parse(in);
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> bytes(hex.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return bytes;
}

std::vector<float> values_of(const nlohmann::json& entry) {
  const std::vector<std::uint8_t> bytes = from_hex(entry["values_f32_hex"].get<std::string>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

TEST(Quant, DequantiseEqualsPythonGgufBitForBitForEveryType) {
  const nlohmann::json doc = load_vectors();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(doc.contains(c.name));
    const std::vector<std::uint8_t> raw = from_hex(doc[c.name]["hex"].get<std::string>());
    const std::vector<float> expected = values_of(doc[c.name]);
    ASSERT_GE(expected.size(), 4096u);
    ASSERT_EQ(raw.size(), quant_row_bytes(c.type, expected.size()));
    std::vector<float> got(expected.size());
    dequantize_row(c.type, raw.data(), got.data(), got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      std::uint32_t g = 0, e = 0;
      std::memcpy(&g, &got[i], 4);
      std::memcpy(&e, &expected[i], 4);
      ASSERT_EQ(g, e) << "element " << i << ": " << got[i] << " against gguf's " << expected[i];
    }
  }
}

TEST(Quant, ScalarDotEqualsDequantiseThenDot) {
  const nlohmann::json doc = load_vectors();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<std::uint8_t> raw = from_hex(doc[c.name]["hex"].get<std::string>());
    const std::size_t n = values_of(doc[c.name]).size();
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    std::vector<float> w(n);
    dequantize_row(c.type, raw.data(), w.data(), n);
    double expected = 0.0;
    double magnitude = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      expected += static_cast<double>(w[i]) * x[i];
      magnitude += std::fabs(static_cast<double>(w[i]) * x[i]);
    }
    const float got = dot_row_scalar(c.type, raw.data(), x.data(), n);
    EXPECT_NEAR(got, expected, 1e-5 * magnitude + 1e-6);
  }
}

TEST(Quant, SupportedTypesAreExactlyTheOnesTestedAndNamed) {
  int supported = 0;
  std::string names;
  for (std::uint32_t id = 0; id < 64; ++id) {
    const gguf::GgmlTypeTraits* traits = gguf::find_ggml_type(id);
    if (traits == nullptr || !quant_supported(traits->type)) continue;
    ++supported;
    EXPECT_NE(std::string(quant_supported_names()).find(traits->name), std::string::npos) << traits->name;
  }
  EXPECT_EQ(supported, static_cast<int>(std::size(kCases)));
  EXPECT_FALSE(quant_supported(GgmlType::iq2_xs));
  EXPECT_FALSE(quant_supported(GgmlType::iq4_nl));
  EXPECT_FALSE(quant_supported(GgmlType::q8_1));
}

}  // namespace
}  // namespace activekv::engine
