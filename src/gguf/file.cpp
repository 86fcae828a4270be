// file.cpp — a parsed GGUF file: lookups, typed accessors, tensor data, and the mmap.
//
// Everything here reads tables the parser already validated, so accessors only
// check what the caller asks for (the key exists, its type is the one wanted)
// and report a mismatch as an Error naming the file and the key.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gguf/gguf.hpp"

namespace activekv::gguf {

// A read-only private mapping of a whole file, unmapped on destruction.
struct File::Mapping {
  void* address = nullptr;
  std::size_t bytes = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, bytes);
  }
};

File::File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

Result<File> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return make_error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io, path,
                      std::string("cannot open the model file: ") + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::io, path, "not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    return make_error(ErrorCode::malformed, path, "the file is empty, not a GGUF model");
  }
  auto mapping = std::make_unique<Mapping>();
  mapping->bytes = static_cast<std::size_t>(st.st_size);
  void* address = ::mmap(nullptr, mapping->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (address == MAP_FAILED) {
    return make_error(ErrorCode::io, path, std::string("cannot map the model file: ") + std::strerror(err));
  }
  mapping->address = address;
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(address), mapping->bytes);
  Result<File> parsed = parse(bytes, path);
  if (!parsed) return parsed.error();
  parsed->mapping_ = std::move(mapping);
  return parsed;
}

const Value* File::find(std::string_view key) const noexcept {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

Value File::item(const Value& array, std::uint64_t i) const noexcept {
  AK_ASSERT(array.type == ValueType::array, "File::item: the value is not an array");
  AK_ASSERT(i < array.count, "File::item: index past the array's end");
  if (array.element_type == ValueType::string || array.element_type == ValueType::array) {
    AK_DEBUG_ASSERT(array.first_item + i < items_.size(), "File::item: the array's items are not in this file");
    return items_[array.first_item + static_cast<std::size_t>(i)];
  }
  Value out;
  out.type = array.element_type;
  const std::size_t size = scalar_size(array.element_type);
  out.offset = static_cast<std::uint64_t>(array.elements - bytes_.data()) + i * size;
  std::memcpy(&out.bits, array.elements + i * size, size);
  return out;
}

Result<const Value*> File::require(std::string_view key) const {
  const Value* value = find(key);
  if (value == nullptr) {
    return make_error(ErrorCode::not_found, name_, "metadata key '" + std::string(key) + "' is missing");
  }
  return value;
}

Error File::type_error(std::string_view key, const Value& value, std::string_view wanted) const {
  std::string found(value_type_name(value.type));
  if (value.type == ValueType::array) found += " of " + std::string(value_type_name(value.element_type));
  return make_error(ErrorCode::malformed, name_,
                    "metadata key '" + std::string(key) + "' at byte offset " + std::to_string(value.offset) +
                        " should be " + std::string(wanted) + " but is " + found +
                        (value.type == ValueType::array || value.type == ValueType::string
                             ? std::string()
                             : " (or its value does not fit)"));
}

Result<std::uint32_t> File::get_u32(std::string_view key) const {
  return get_scalar<std::uint32_t>(key, "an unsigned integer below 2^32");
}
Result<std::uint64_t> File::get_u64(std::string_view key) const {
  return get_scalar<std::uint64_t>(key, "an unsigned integer");
}
Result<std::int32_t> File::get_i32(std::string_view key) const { return get_scalar<std::int32_t>(key, "a 32-bit integer"); }
Result<std::int64_t> File::get_i64(std::string_view key) const { return get_scalar<std::int64_t>(key, "an integer"); }
Result<float> File::get_f32(std::string_view key) const { return get_scalar<float>(key, "a float"); }
Result<double> File::get_f64(std::string_view key) const { return get_scalar<double>(key, "a float"); }
Result<bool> File::get_bool(std::string_view key) const { return get_scalar<bool>(key, "a bool"); }

Result<std::string_view> File::get_string(std::string_view key) const {
  Result<const Value*> found = require(key);
  if (!found) return found.error();
  if ((*found)->type != ValueType::string) return type_error(key, **found, "a string");
  return (*found)->string;
}

Result<std::vector<std::string_view>> File::get_string_array(std::string_view key) const {
  Result<const Value*> found = require(key);
  if (!found) return found.error();
  const Value& array = **found;
  if (array.type != ValueType::array || array.element_type != ValueType::string) {
    return type_error(key, array, "an array of string");
  }
  std::vector<std::string_view> out;
  out.reserve(static_cast<std::size_t>(array.count));
  for (std::uint64_t i = 0; i < array.count; ++i) out.push_back(item(array, i).string);
  return out;
}

Result<std::uint64_t> File::get_array_count(std::string_view key) const {
  Result<const Value*> found = require(key);
  if (!found) return found.error();
  if ((*found)->type != ValueType::array) return type_error(key, **found, "an array");
  return (*found)->count;
}

const TensorInfo* File::find_tensor(std::string_view name) const noexcept {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> File::tensor_data(const TensorInfo& tensor) const noexcept {
  AK_ASSERT(tensor.offset <= bytes_.size() - data_offset_, "File::tensor_data: a tensor of another file");
  AK_ASSERT(tensor.bytes <= bytes_.size() - data_offset_ - tensor.offset, "File::tensor_data: a tensor of another file");
  return bytes_.subspan(static_cast<std::size_t>(data_offset_ + tensor.offset), static_cast<std::size_t>(tensor.bytes));
}

}  // namespace activekv::gguf
