// reader_test.cpp — crafted GGUF files: every value type, tensors, and every kind
// of damage the parser must refuse with an error (never a crash).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "gguf/gguf.hpp"
#include "gguf/gguf_builder.hpp"

namespace activekv::gguf {
namespace {

using testing::Builder;
using testing::Encoder;

std::vector<std::byte> bytes_of(std::initializer_list<std::uint8_t> list) {
  std::vector<std::byte> out;
  for (const std::uint8_t b : list) out.push_back(std::byte{b});
  return out;
}

// A file with one key of every scalar type, strings, arrays of every element
// type (nested included) and two tensors.
Builder every_type_builder() {
  Builder b;
  b.scalar<std::uint8_t>("t.u8", ValueType::uint8, 200)
      .scalar<std::int8_t>("t.i8", ValueType::int8, -100)
      .scalar<std::uint16_t>("t.u16", ValueType::uint16, 60000)
      .scalar<std::int16_t>("t.i16", ValueType::int16, -30000)
      .scalar<std::uint32_t>("t.u32", ValueType::uint32, 4000000000u)
      .scalar<std::int32_t>("t.i32", ValueType::int32, -2000000000)
      .scalar<float>("t.f32", ValueType::float32, 1.5f)
      .boolean("t.bool", true)
      .string("t.string", "h\xC3\xA9llo")
      .scalar<std::uint64_t>("t.u64", ValueType::uint64, 18000000000000000000ull)
      .scalar<std::int64_t>("t.i64", ValueType::int64, -9000000000000000000ll)
      .scalar<double>("t.f64", ValueType::float64, 2.25)
      .array<std::uint8_t>("a.u8", ValueType::uint8, {1, 2, 255})
      .array<std::int8_t>("a.i8", ValueType::int8, {-1, 0, 1})
      .array<std::uint16_t>("a.u16", ValueType::uint16, {7, 65535})
      .array<std::int16_t>("a.i16", ValueType::int16, {-7})
      .array<std::uint32_t>("a.u32", ValueType::uint32, {1, 2, 3, 4})
      .array<std::int32_t>("a.i32", ValueType::int32, {-5, 5})
      .array<float>("a.f32", ValueType::float32, {0.5f, -0.25f})
      .array<std::uint8_t>("a.bool", ValueType::boolean, {1, 0, 1})
      .array<std::uint64_t>("a.u64", ValueType::uint64, {1ull << 40})
      .array<std::int64_t>("a.i64", ValueType::int64, {-(1ll << 40)})
      .array<double>("a.f64", ValueType::float64, {3.125})
      .string_array("a.string", {"", "one", "two words"})
      .array<std::uint32_t>("a.empty", ValueType::uint32, {});
  // array of arrays: [[1, 2], [3]] (uint16) and [["x"], []] (string)
  Encoder nested;
  nested.put_type(ValueType::array).put<std::uint64_t>(2);
  nested.put_type(ValueType::uint16).put<std::uint64_t>(2).put<std::uint16_t>(1).put<std::uint16_t>(2);
  nested.put_type(ValueType::uint16).put<std::uint64_t>(1).put<std::uint16_t>(3);
  b.raw("a.nested", ValueType::array, nested.bytes());
  Encoder nested_strings;
  nested_strings.put_type(ValueType::array).put<std::uint64_t>(2);
  nested_strings.put_type(ValueType::string).put<std::uint64_t>(1).put_string("x");
  nested_strings.put_type(ValueType::string).put<std::uint64_t>(0);
  b.raw("a.nested_strings", ValueType::array, nested_strings.bytes());
  std::vector<std::byte> f32_data(4 * 2 * 3);
  for (std::size_t i = 0; i < f32_data.size(); ++i) f32_data[i] = std::byte(i);
  b.tensor("w.f32", {2, 3}, GgmlType::f32, f32_data);
  b.tensor("w.q4_1", {64}, GgmlType::q4_1, std::vector<std::byte>(40, std::byte{7}));
  return b;
}

Result<File> parse(const std::vector<std::byte>& bytes) { return File::parse(bytes, "crafted.gguf"); }

// Parse must fail, and the message must contain `needle`.
void expect_error(const std::vector<std::byte>& bytes, const std::string& needle) {
  const Result<File> r = parse(bytes);
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(r.error().setting, "crafted.gguf");
  EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().describe();
  EXPECT_NE(r.error().message.find("byte offset"), std::string::npos) << r.error().describe();
}

TEST(GgufReader, ReadsEveryScalarType) {
  const std::vector<std::byte> bytes = every_type_builder().build();
  const Result<File> r = parse(bytes);
  ASSERT_TRUE(r.ok()) << r.error().describe();
  const File& f = *r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_u32("t.u8").value(), 200u);
  EXPECT_EQ(f.get_i32("t.i8").value(), -100);
  EXPECT_EQ(f.get_u32("t.u16").value(), 60000u);
  EXPECT_EQ(f.get_i32("t.i16").value(), -30000);
  EXPECT_EQ(f.get_u32("t.u32").value(), 4000000000u);
  EXPECT_EQ(f.get_i32("t.i32").value(), -2000000000);
  EXPECT_EQ(f.get_f32("t.f32").value(), 1.5f);
  EXPECT_TRUE(f.get_bool("t.bool").value());
  EXPECT_EQ(f.get_string("t.string").value(), "h\xC3\xA9llo");
  EXPECT_EQ(f.get_u64("t.u64").value(), 18000000000000000000ull);
  EXPECT_EQ(f.get_i64("t.i64").value(), -9000000000000000000ll);
  EXPECT_EQ(f.get_f64("t.f64").value(), 2.25);
  EXPECT_EQ(f.get_f64("t.f32").value(), 1.5);
  EXPECT_EQ(f.find("t.u8")->type, ValueType::uint8);
  EXPECT_EQ(f.find("t.f64")->type, ValueType::float64);
  EXPECT_EQ(f.metadata().size(), 27u);
  EXPECT_EQ(f.metadata()[0].key, "t.u8");
}

TEST(GgufReader, ReadsArraysOfEveryElementType) {
  const std::vector<std::byte> bytes = every_type_builder().build();
  const File f = parse(bytes).value();
  EXPECT_EQ(f.get_array<int>("a.u8").value(), (std::vector<int>{1, 2, 255}));
  EXPECT_EQ(f.get_array<int>("a.i8").value(), (std::vector<int>{-1, 0, 1}));
  EXPECT_EQ(f.get_array<std::uint16_t>("a.u16").value(), (std::vector<std::uint16_t>{7, 65535}));
  EXPECT_EQ(f.get_array<std::int16_t>("a.i16").value(), (std::vector<std::int16_t>{-7}));
  EXPECT_EQ(f.get_array<std::uint32_t>("a.u32").value(), (std::vector<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(f.get_array<std::int32_t>("a.i32").value(), (std::vector<std::int32_t>{-5, 5}));
  EXPECT_EQ(f.get_array<float>("a.f32").value(), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(f.get_array<bool>("a.bool").value(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.get_array<std::uint64_t>("a.u64").value(), (std::vector<std::uint64_t>{1ull << 40}));
  EXPECT_EQ(f.get_array<std::int64_t>("a.i64").value(), (std::vector<std::int64_t>{-(1ll << 40)}));
  EXPECT_EQ(f.get_array<double>("a.f64").value(), (std::vector<double>{3.125}));
  EXPECT_EQ(f.get_string_array("a.string").value(), (std::vector<std::string_view>{"", "one", "two words"}));
  EXPECT_EQ(f.get_array_count("a.empty").value(), 0u);
  EXPECT_TRUE(f.get_array<std::uint32_t>("a.empty").value().empty());

  const Value& nested = *f.find("a.nested");
  ASSERT_EQ(nested.element_type, ValueType::array);
  ASSERT_EQ(nested.count, 2u);
  const Value first = f.item(nested, 0);
  const Value second = f.item(nested, 1);
  ASSERT_EQ(first.element_type, ValueType::uint16);
  ASSERT_EQ(first.count, 2u);
  EXPECT_EQ(as_u64(f.item(first, 0)), 1u);
  EXPECT_EQ(as_u64(f.item(first, 1)), 2u);
  ASSERT_EQ(second.count, 1u);
  EXPECT_EQ(as_u64(f.item(second, 0)), 3u);

  const Value& nested_strings = *f.find("a.nested_strings");
  const Value x = f.item(nested_strings, 0);
  ASSERT_EQ(x.count, 1u);
  EXPECT_EQ(f.item(x, 0).string, "x");
  EXPECT_EQ(f.item(nested_strings, 1).count, 0u);
}

TEST(GgufReader, AccessorErrorsNameTheKey) {
  const std::vector<std::byte> bytes = every_type_builder().build();
  const File f = parse(bytes).value();
  const auto missing = f.get_u32("llama.block_count");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_NE(missing.error().message.find("llama.block_count"), std::string::npos);

  const auto wrong = f.get_u32("t.string");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("t.string"), std::string::npos);
  EXPECT_NE(wrong.error().message.find("string"), std::string::npos);

  EXPECT_FALSE(f.get_u32("t.i8").ok()) << "-100 is not an unsigned integer";
  EXPECT_FALSE(f.get_u32("t.u64").ok()) << "1.8e19 does not fit in 32 bits";
  EXPECT_FALSE(f.get_i32("t.f32").ok()) << "a float is not an integer";
  EXPECT_FALSE(f.get_string("t.u8").ok());
  EXPECT_FALSE(f.get_bool("t.u8").ok());
  EXPECT_FALSE(f.get_string_array("a.u32").ok());
  const auto narrow = f.get_array<std::uint8_t>("a.u16");
  ASSERT_FALSE(narrow.ok());
  EXPECT_NE(narrow.error().message.find("element 1"), std::string::npos) << narrow.error().message;
  EXPECT_FALSE(f.get_array<std::uint32_t>("a.i8").ok());
  EXPECT_FALSE(f.get_array<int>("t.u32").ok());
}

TEST(GgufReader, TensorInfosAndData) {
  const std::vector<std::byte> bytes = every_type_builder().build();
  const File f = parse(bytes).value();
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.data_offset() % kDefaultAlignment, 0u);
  const TensorInfo* w = f.find_tensor("w.f32");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->n_dims, 2u);
  EXPECT_EQ(w->ne[0], 2u);
  EXPECT_EQ(w->ne[1], 3u);
  EXPECT_EQ(w->ne[2], 1u);
  EXPECT_EQ(w->elements, 6u);
  EXPECT_EQ(w->bytes, 24u);
  EXPECT_EQ(w->offset, 0u);
  const std::span<const std::byte> data = f.tensor_data(*w);
  ASSERT_EQ(data.size(), 24u);
  for (std::size_t i = 0; i < data.size(); ++i) EXPECT_EQ(data[i], std::byte(i));
  const TensorInfo* q = f.find_tensor("w.q4_1");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::q4_1);
  EXPECT_EQ(q->traits().block_elements, 32u);
  EXPECT_EQ(q->traits().block_bytes, 20u);
  EXPECT_EQ(q->bytes, 40u);
  EXPECT_EQ(q->offset, 32u);
  EXPECT_EQ(f.tensor_data(*q)[39], std::byte{7});
  EXPECT_EQ(f.find_tensor("absent"), nullptr);
}

TEST(GgufReader, HonoursGeneralAlignment) {
  Builder b;
  b.alignment(64).tensor("a", {3}, GgmlType::f32, std::vector<std::byte>(12, std::byte{1}));
  b.tensor("b", {5}, GgmlType::f16, std::vector<std::byte>(10, std::byte{2}));
  const std::vector<std::byte> bytes = b.build();
  const File f = parse(bytes).value();
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, 64u);
  EXPECT_EQ(f.tensor_data(*f.find_tensor("b"))[9], std::byte{2});
}

TEST(GgufReader, AcceptsVersionTwoAndEmptyFiles) {
  const std::vector<std::byte> v2 = Builder().version(2).u32("k", 1).build();
  EXPECT_EQ(parse(v2).value().version(), 2u);
  const std::vector<std::byte> empty = Builder().build();
  const File f = parse(empty).value();
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufReader, GgmlTypeTableMatchesGgml) {
  EXPECT_EQ(find_ggml_type(0)->block_bytes, 4u);
  EXPECT_EQ(find_ggml_type(1)->block_bytes, 2u);
  EXPECT_EQ(find_ggml_type(2)->block_bytes, 18u);
  EXPECT_EQ(find_ggml_type(3)->block_bytes, 20u);
  EXPECT_EQ(find_ggml_type(6)->block_bytes, 22u);
  EXPECT_EQ(find_ggml_type(7)->block_bytes, 24u);
  EXPECT_EQ(find_ggml_type(8)->block_bytes, 34u);
  EXPECT_EQ(find_ggml_type(12)->block_elements, 256u);
  EXPECT_EQ(find_ggml_type(12)->block_bytes, 144u);
  EXPECT_EQ(find_ggml_type(14)->block_bytes, 210u);
  EXPECT_EQ(find_ggml_type(30)->name, "BF16");
  EXPECT_EQ(find_ggml_type(4), nullptr);
  EXPECT_EQ(find_ggml_type(31), nullptr);
  EXPECT_EQ(find_ggml_type(1000), nullptr);
}

// ---- damage -------------------------------------------------------------------

TEST(GgufReader, RefusesWhatIsNotGguf) {
  expect_error({}, "shorter than");
  std::vector<std::byte> bytes = Builder().u32("k", 1).build();
  bytes[0] = std::byte{'X'};
  expect_error(bytes, "not a GGUF file");
}

TEST(GgufReader, RefusesOtherVersionsAndByteOrders) {
  expect_error(Builder().version(1).build(), "version 1");
  expect_error(Builder().version(4).build(), "version 4");
  expect_error(Builder().version(0x03000000).build(), "big-endian");
  const Result<File> r = parse(Builder().version(4).build());
  EXPECT_EQ(r.error().code, ErrorCode::unsupported);
}

TEST(GgufReader, RefusesAbsurdCounts) {
  std::vector<std::byte> bytes = Builder().u32("k", 1).build();
  std::uint64_t huge = 1ull << 60;
  std::memcpy(bytes.data() + 16, &huge, 8);  // kv_count
  expect_error(bytes, "metadata key count");
  bytes = Builder().u32("k", 1).build();
  std::memcpy(bytes.data() + 8, &huge, 8);  // tensor_count
  expect_error(bytes, "tensor count");

  Encoder big_array;
  big_array.put_type(ValueType::uint64).put<std::uint64_t>(1ull << 61);
  expect_error(Builder().raw("a", ValueType::array, big_array.bytes()).build(), "cannot fit");
  Encoder big_string;
  big_string.put<std::uint64_t>(~0ull);
  expect_error(Builder().raw("s", ValueType::string, big_string.bytes()).build(), "claims");
}

TEST(GgufReader, RefusesUnknownValueTypes) {
  expect_error(Builder().raw("k", static_cast<ValueType>(13), bytes_of({0, 0, 0, 0})).build(),
               "unknown value type 13");
  Encoder array;
  array.put<std::uint32_t>(99).put<std::uint64_t>(1);
  expect_error(Builder().raw("k", ValueType::array, array.bytes()).build(), "unknown element type 99");
  expect_error(Builder().scalar<std::uint8_t>("b", ValueType::boolean, 2).build(), "not 0 or 1");
  expect_error(Builder().array<std::uint8_t>("b", ValueType::boolean, {0, 1, 5}).build(), "element 2");
}

TEST(GgufReader, RefusesDuplicatesAndDeepNesting) {
  expect_error(Builder().u32("k", 1).u32("k", 2).build(), "appears twice");
  expect_error(Builder()
                   .tensor("t", {1}, GgmlType::f32, std::vector<std::byte>(4))
                   .tensor("t", {1}, GgmlType::f32, std::vector<std::byte>(4))
                   .build(),
               "appears twice");
  Encoder deep;
  for (std::uint32_t d = 0; d < kMaxArrayDepth + 1; ++d) deep.put_type(ValueType::array).put<std::uint64_t>(1);
  deep.put_type(ValueType::uint8).put<std::uint64_t>(0);
  expect_error(Builder().raw("deep", ValueType::array, deep.bytes()).build(), "nested deeper");
}

TEST(GgufReader, RefusesBadAlignment) {
  expect_error(Builder().u32("general.alignment", 24).build(), "not a power of two");
  expect_error(Builder().u32("general.alignment", 0).build(), "not a power of two");
  expect_error(Builder().scalar<std::uint64_t>("general.alignment", ValueType::uint64, 32).build(),
               "must be a uint32");
}

// Offsets of fields inside the first tensor info of a file with no metadata.
constexpr std::size_t kInfo = 24;
constexpr std::size_t kNDims = kInfo + 8 + 1;  // after the 1-byte name "t"

std::vector<std::byte> one_tensor(std::vector<std::uint64_t> ne, GgmlType type, std::size_t data_bytes) {
  return Builder().tensor("t", std::move(ne), type, std::vector<std::byte>(data_bytes)).build();
}

TEST(GgufReader, RefusesBadTensorInfos) {
  std::vector<std::byte> bytes = one_tensor({4}, GgmlType::f32, 16);
  ASSERT_TRUE(parse(bytes).ok());
  std::uint32_t n_dims = 5;
  std::memcpy(bytes.data() + kNDims, &n_dims, 4);
  expect_error(bytes, "5 dimensions");

  bytes = one_tensor({4}, GgmlType::f32, 16);
  std::uint32_t type = 31;
  std::memcpy(bytes.data() + kNDims + 4 + 8, &type, 4);
  expect_error(bytes, "unknown ggml type 31");
  EXPECT_EQ(parse(bytes).error().code, ErrorCode::unsupported);

  expect_error(one_tensor({48}, GgmlType::q4_0, 36), "not a multiple of the Q4_0 block of 32");

  bytes = one_tensor({4}, GgmlType::f32, 16);
  std::uint64_t offset = 8;
  std::memcpy(bytes.data() + kNDims + 4 + 8 + 4, &offset, 8);
  expect_error(bytes, "not a multiple of the alignment");

  bytes = one_tensor({4}, GgmlType::f32, 16);
  bytes.resize(bytes.size() - 1);
  expect_error(bytes, "beyond the end of the file");

  bytes = one_tensor({4}, GgmlType::f32, 16);
  offset = 1ull << 63;
  std::memcpy(bytes.data() + kNDims + 4 + 8 + 4, &offset, 8);
  expect_error(bytes, "beyond the end of the file");

  expect_error(one_tensor({1ull << 40, 1ull << 40}, GgmlType::f32, 0), "more than 2^62 elements");
  // 2^61 F64 elements are 2^64 bytes: refused, not wrapped to a 0-byte tensor.
  expect_error(one_tensor({1ull << 31, 1ull << 30}, GgmlType::f64, 0), "larger than any file");
  expect_error(one_tensor({1ull << 62}, GgmlType::f32, 0), "larger than any file");
}

// Every proper prefix of a valid file is an error (the file ends early, or a
// tensor's data lies beyond it), and walking it never crashes.
TEST(GgufReader, EveryTruncationIsAnError) {
  const std::vector<std::byte> bytes = every_type_builder().build();
  ASSERT_TRUE(walk(bytes).ok());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<std::byte> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    const Result<File> r = parse(prefix);
    ASSERT_FALSE(r.ok()) << "a " << n << "-byte prefix parsed";
    EXPECT_FALSE(r.error().message.empty());
    EXPECT_FALSE(walk(prefix).ok());
  }
}

// Random byte damage over many seeds: parse either succeeds, and then the whole
// File is walkable, or it fails with a message. Run under the asan preset this
// proves no out-of-bounds read on any of the damaged files.
TEST(GgufReader, RandomDamageNeverCrashes) {
  const std::vector<std::byte> good = every_type_builder().build();
  int parsed = 0;
  for (std::uint32_t seed = 0; seed < 3000; ++seed) {
    std::mt19937 rng(seed);
    std::vector<std::byte> bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const std::size_t at = rng() % bytes.size();
      bytes[at] = (rng() % 2 == 0) ? std::byte(rng()) : std::byte{0xFF};
    }
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    const Status s = walk(bytes);
    if (s.ok()) {
      ++parsed;
    } else {
      EXPECT_FALSE(s.error().message.empty());
    }
  }
  EXPECT_GT(parsed, 0) << "some damage (inside string bytes or tensor data) leaves a valid file";
}

TEST(GgufReader, OpenMapsAFileAndNamesMissingOnes) {
  const auto missing = File::open("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_EQ(missing.error().setting, "/nonexistent/model.gguf");

  const std::string path = ::testing::TempDir() + "activekv_gguf_reader_test.gguf";
  const std::vector<std::byte> bytes = every_type_builder().build();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  Result<File> opened = File::open(path);
  ASSERT_TRUE(opened.ok()) << opened.error().describe();
  File moved = std::move(opened.value());
  EXPECT_EQ(moved.name(), path);
  EXPECT_EQ(moved.get_string("t.string").value(), "h\xC3\xA9llo");
  EXPECT_EQ(moved.tensor_data(*moved.find_tensor("w.f32"))[5], std::byte{5});

  { std::ofstream truncate(path, std::ios::binary | std::ios::trunc); }
  const auto empty = File::open(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("empty"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace activekv::gguf
