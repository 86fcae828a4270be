// walk.cpp — the fuzz entry: parse, then touch everything the File describes.
//
// A fuzzer feeds arbitrary bytes here. Parsing establishes the File's invariant;
// walking then reads every value through the public accessors (every array
// element, nested arrays included, every string's bytes) and every tensor's data
// span, so a table that pointed outside the bytes would be caught by the
// sanitizers rather than lie dormant until an engine used it.
#include "gguf/gguf.hpp"

namespace activekv::gguf {
namespace {

// Folds bytes into a checksum so the reads cannot be optimised away.
std::uint64_t touch(std::span<const std::byte> bytes) noexcept {
  std::uint64_t sum = 0;
  for (const std::byte b : bytes) sum = sum * 31 + std::to_integer<std::uint64_t>(b);
  return sum;
}

std::uint64_t walk_value(const File& file, const Value& value) noexcept {
  switch (value.type) {
    case ValueType::string:
      return touch(std::as_bytes(std::span(value.string.data(), value.string.size())));
    case ValueType::array: {
      std::uint64_t sum = value.count;
      for (std::uint64_t i = 0; i < value.count; ++i) sum += walk_value(file, file.item(value, i));
      return sum;
    }
    case ValueType::uint8:
    case ValueType::int8:
    case ValueType::uint16:
    case ValueType::int16:
    case ValueType::uint32:
    case ValueType::int32:
    case ValueType::float32:
    case ValueType::boolean:
    case ValueType::uint64:
    case ValueType::int64:
    case ValueType::float64:
      return value.bits + as_u64(value).value_or(0) + static_cast<std::uint64_t>(as_f64(value).value_or(0) != 0);
  }
  return 0;
}

}  // namespace

Status walk(std::span<const std::byte> bytes) {
  Result<File> parsed = File::parse(bytes, "<fuzz input>");
  if (!parsed) return parsed.error();
  const File& file = *parsed;
  volatile std::uint64_t sink = 0;
  for (const KeyValue& kv : file.metadata()) {
    AK_ASSERT(file.find(kv.key) == &kv.value, "walk: a key does not find its own value");
    sink = sink + walk_value(file, kv.value);
  }
  for (const TensorInfo& tensor : file.tensors()) {
    AK_ASSERT(file.find_tensor(tensor.name) == &tensor, "walk: a tensor name does not find its own tensor");
    sink = sink + touch(file.tensor_data(tensor)) + tensor.elements;
  }
  (void)sink;
  return {};
}

Status walk(const std::uint8_t* data, std::size_t size) {
  return walk(std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size));
}

}  // namespace activekv::gguf
