// value.cpp — value type names and sizes, and exact scalar conversions.
//
// A scalar keeps its raw little-endian bits; these functions interpret them by
// type and refuse any conversion that would change the value (a negative int as
// unsigned, 300 into a u8, a float into an integer), so an accessor either
// returns exactly what the file says or an error naming the key.
#include <cstring>

#include "gguf/gguf.hpp"

namespace activekv::gguf {

std::string_view value_type_name(ValueType type) noexcept {
  switch (type) {
    case ValueType::uint8: return "uint8";
    case ValueType::int8: return "int8";
    case ValueType::uint16: return "uint16";
    case ValueType::int16: return "int16";
    case ValueType::uint32: return "uint32";
    case ValueType::int32: return "int32";
    case ValueType::float32: return "float32";
    case ValueType::boolean: return "bool";
    case ValueType::string: return "string";
    case ValueType::array: return "array";
    case ValueType::uint64: return "uint64";
    case ValueType::int64: return "int64";
    case ValueType::float64: return "float64";
  }
  return "unknown";
}

std::size_t scalar_size(ValueType type) noexcept {
  switch (type) {
    case ValueType::uint8:
    case ValueType::int8:
    case ValueType::boolean: return 1;
    case ValueType::uint16:
    case ValueType::int16: return 2;
    case ValueType::uint32:
    case ValueType::int32:
    case ValueType::float32: return 4;
    case ValueType::uint64:
    case ValueType::int64:
    case ValueType::float64: return 8;
    case ValueType::string:
    case ValueType::array: return 0;
  }
  return 0;
}

bool is_integer(ValueType type) noexcept {
  switch (type) {
    case ValueType::uint8:
    case ValueType::int8:
    case ValueType::uint16:
    case ValueType::int16:
    case ValueType::uint32:
    case ValueType::int32:
    case ValueType::uint64:
    case ValueType::int64: return true;
    case ValueType::float32:
    case ValueType::boolean:
    case ValueType::string:
    case ValueType::array:
    case ValueType::float64: return false;
  }
  return false;
}

namespace {

bool is_signed_integer(ValueType type) noexcept {
  return type == ValueType::int8 || type == ValueType::int16 || type == ValueType::int32 || type == ValueType::int64;
}

// Sign-extends a signed scalar's bits to 64.
std::int64_t signed_bits(const Value& value) noexcept {
  switch (value.type) {
    case ValueType::int8: return static_cast<std::int8_t>(value.bits);
    case ValueType::int16: return static_cast<std::int16_t>(value.bits);
    case ValueType::int32: return static_cast<std::int32_t>(value.bits);
    default: return static_cast<std::int64_t>(value.bits);
  }
}

}  // namespace

std::optional<std::uint64_t> as_u64(const Value& value) noexcept {
  if (!is_integer(value.type)) return std::nullopt;
  if (!is_signed_integer(value.type)) return value.bits;
  const std::int64_t v = signed_bits(value);
  if (v < 0) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

std::optional<std::int64_t> as_i64(const Value& value) noexcept {
  if (!is_integer(value.type)) return std::nullopt;
  if (is_signed_integer(value.type)) return signed_bits(value);
  if (value.bits > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
  return static_cast<std::int64_t>(value.bits);
}

std::optional<double> as_f64(const Value& value) noexcept {
  if (value.type == ValueType::float32) {
    float f = 0;
    const auto bits = static_cast<std::uint32_t>(value.bits);
    std::memcpy(&f, &bits, sizeof f);
    return static_cast<double>(f);
  }
  if (value.type == ValueType::float64) {
    double d = 0;
    std::memcpy(&d, &value.bits, sizeof d);
    return d;
  }
  return std::nullopt;
}

std::optional<bool> as_bool(const Value& value) noexcept {
  if (value.type != ValueType::boolean) return std::nullopt;
  return value.bits != 0;
}

}  // namespace activekv::gguf
