// gguf.hpp — a bounds-checked, zero-copy reader of GGUF model files (versions 2 and 3).
//
// This is the public header of target activekv_gguf (include it as "gguf/gguf.hpp").
//
// A GGUF file is, in order (all little-endian):
//
//   magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
//   kv_count × (key string | value type u32 | value)
//   tensor_count × (name string | n_dims u32 | n_dims × u64 ne | ggml type u32 | offset u64)
//   padding to general.alignment (default 32)
//   data section: tensor i's bytes at data_start + offset_i
//
// where a string is (length u64 | bytes) and an array value is
// (element type u32 | count u64 | count × element), elements of any value type,
// arrays of arrays included.
//
// What the reader owns: the bytes (an mmap of the file, read-only, or a span the
// caller keeps alive) and tables that point into them. Strings are string_views
// into the bytes; scalar arrays are views of packed little-endian elements; only
// arrays of strings and arrays of arrays are expanded, into one item table.
//
// The invariant it keeps: a File that parse() or open() returned is internally
// consistent. Every key is unique; every tensor's name is unique, its type is in
// the ggml table, its first dimension is a whole number of blocks, its offset is
// aligned, and its bytes lie inside the file. Every read that established this was
// bounds-checked against the bytes, and every count was capped by what the
// remaining bytes could hold before anything was reserved. So accessors never
// re-check the file, and outside input of any shape yields an Error naming the
// file, the byte offset and what is wrong — never a crash, never an exception.
//
// Typed accessors (get_u32("llama.block_count")) return an Error naming the key
// and the type actually found; integers convert between widths when the value
// fits, since writers differ in the width they choose for the same key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "activekv/result.hpp"
#include "gguf/ggml_type.hpp"

namespace activekv::gguf {

inline constexpr std::uint32_t kDefaultAlignment = 32;  // when general.alignment is absent
inline constexpr std::uint32_t kMaxDims = 4;            // GGML_MAX_DIMS
inline constexpr std::uint32_t kMaxArrayDepth = 8;      // nesting of arrays of arrays

enum class ValueType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

// "uint32", "string", ...; "unknown" for a value outside the enum.
std::string_view value_type_name(ValueType type) noexcept;
// Encoded size of a scalar value type; 0 for string and array (variable size).
std::size_t scalar_size(ValueType type) noexcept;
bool is_integer(ValueType type) noexcept;

// One metadata value. Scalars keep their raw little-endian bits zero-extended in
// `bits`; read them with the as_* functions below, which know the type.
struct Value {
  ValueType type = ValueType::uint8;
  std::uint64_t bits = 0;         // scalar types
  std::string_view string;        // type == string
  ValueType element_type = ValueType::uint8;  // type == array
  std::uint64_t count = 0;        // type == array: number of elements
  const std::byte* elements = nullptr;  // array of scalars: count × scalar_size(element_type) bytes
  std::size_t first_item = 0;     // array of strings or arrays: File::item(value, i) reads them
  std::uint64_t offset = 0;       // byte offset of the value in the file (for error messages)
};

// Scalar views. Each returns nullopt when the value's type cannot represent the
// result exactly (a negative int as u64, a float as an integer, 300 as u8).
std::optional<std::uint64_t> as_u64(const Value& value) noexcept;
std::optional<std::int64_t> as_i64(const Value& value) noexcept;
std::optional<double> as_f64(const Value& value) noexcept;  // float32, float64
std::optional<bool> as_bool(const Value& value) noexcept;

struct KeyValue {
  std::string_view key;
  Value value;
};

struct TensorInfo {
  std::string_view name;
  std::uint32_t n_dims = 0;
  std::uint64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  GgmlType type = GgmlType::f32;
  std::uint64_t offset = 0;     // relative to the data section, a multiple of the alignment
  std::uint64_t elements = 0;   // product of ne
  std::uint64_t bytes = 0;      // elements / block_elements × block_bytes
  std::uint64_t info_offset = 0;  // byte offset of this tensor info in the file

  const GgmlTypeTraits& traits() const noexcept { return ggml_type_traits(type); }
};

class File {
 public:
  // Parses `bytes`, which the caller keeps alive (and unchanged) as long as the
  // File is used. `name` labels errors (a path, or "<memory>").
  static Result<File> parse(std::span<const std::byte> bytes, std::string name = "<memory>");
  // Maps `path` read-only and parses it; the File owns the mapping.
  static Result<File> open(const std::string& path);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& name() const noexcept { return name_; }
  std::uint32_t version() const noexcept { return version_; }
  std::uint32_t alignment() const noexcept { return alignment_; }
  std::uint64_t data_offset() const noexcept { return data_offset_; }  // start of the data section
  std::span<const std::byte> bytes() const noexcept { return bytes_; }

  // Metadata, in file order.
  std::span<const KeyValue> metadata() const noexcept { return metadata_; }
  const Value* find(std::string_view key) const noexcept;
  bool has(std::string_view key) const noexcept { return find(key) != nullptr; }

  // Element i of an array value (of any element type). Programming error if
  // `array` is not an array of this File or i >= count.
  Value item(const Value& array, std::uint64_t i) const noexcept;

  // Typed accessors: an Error (not_found, or malformed for a type mismatch) names the key.
  Result<std::uint32_t> get_u32(std::string_view key) const;
  Result<std::uint64_t> get_u64(std::string_view key) const;
  Result<std::int32_t> get_i32(std::string_view key) const;
  Result<std::int64_t> get_i64(std::string_view key) const;
  Result<float> get_f32(std::string_view key) const;
  Result<double> get_f64(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  Result<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  // Arithmetic T (integers of any width, float, double, bool): each element is
  // converted exactly or the call fails naming the key and the element index.
  template <typename T>
  Result<std::vector<T>> get_array(std::string_view key) const;
  // The number of elements of an array value.
  Result<std::uint64_t> get_array_count(std::string_view key) const;

  // Tensors, in file order.
  std::span<const TensorInfo> tensors() const noexcept { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const noexcept;
  // The tensor's bytes inside the file (validated at parse time).
  std::span<const std::byte> tensor_data(const TensorInfo& tensor) const noexcept;

 private:
  struct Mapping;  // an mmap owner; see mapped_file.cpp
  friend class Parser;
  File();

  Result<const Value*> require(std::string_view key) const;
  Error type_error(std::string_view key, const Value& value, std::string_view wanted) const;
  template <typename T>
  std::optional<T> convert(const Value& scalar) const noexcept;
  template <typename T>
  Result<T> get_scalar(std::string_view key, std::string_view wanted) const;

  std::string name_;
  std::unique_ptr<Mapping> mapping_;
  std::span<const std::byte> bytes_;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = kDefaultAlignment;
  std::uint64_t data_offset_ = 0;
  std::vector<KeyValue> metadata_;
  std::vector<Value> items_;  // elements of arrays of strings and arrays of arrays
  std::unordered_map<std::string_view, std::size_t> key_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
};

// The fuzz entry: parses `bytes`, then walks every metadata value (every array
// element, nested arrays included) and every tensor's data span, touching each
// byte it names. Returns what parse returned. Never crashes, never throws.
Status walk(std::span<const std::byte> bytes);
Status walk(const std::uint8_t* data, std::size_t size);

// ---- template definitions ---------------------------------------------------

template <typename T>
std::optional<T> File::convert(const Value& scalar) const noexcept {
  static_assert(std::is_arithmetic_v<T>, "get_array<T>: T must be arithmetic");
  if constexpr (std::is_same_v<T, bool>) {
    return as_bool(scalar);
  } else if constexpr (std::is_floating_point_v<T>) {
    const std::optional<double> v = as_f64(scalar);
    if (!v) return std::nullopt;
    return static_cast<T>(*v);
  } else if constexpr (std::is_signed_v<T>) {
    const std::optional<std::int64_t> v = as_i64(scalar);
    if (!v || *v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        *v > static_cast<std::int64_t>(std::numeric_limits<T>::max()))
      return std::nullopt;
    return static_cast<T>(*v);
  } else {
    const std::optional<std::uint64_t> v = as_u64(scalar);
    if (!v || *v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(*v);
  }
}

template <typename T>
Result<T> File::get_scalar(std::string_view key, std::string_view wanted) const {
  Result<const Value*> found = require(key);
  if (!found) return found.error();
  const std::optional<T> v = convert<T>(**found);
  if (!v) return type_error(key, **found, wanted);
  return *v;
}

template <typename T>
Result<std::vector<T>> File::get_array(std::string_view key) const {
  Result<const Value*> found = require(key);
  if (!found) return found.error();
  const Value& array = **found;
  if (array.type != ValueType::array) return type_error(key, array, "an array");
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(array.count));
  for (std::uint64_t i = 0; i < array.count; ++i) {
    const std::optional<T> v = convert<T>(item(array, i));
    if (!v) {
      return make_error(ErrorCode::malformed, name_,
                        "metadata key '" + std::string(key) + "': element " + std::to_string(i) + " (" +
                            std::string(value_type_name(array.element_type)) +
                            ") does not convert exactly to the requested element type");
    }
    out.push_back(*v);
  }
  return out;
}

}  // namespace activekv::gguf
