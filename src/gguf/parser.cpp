// parser.cpp — turns untrusted bytes into a consistent gguf::File, or an Error.
//
// The parser walks the file once, front to back, through a Cursor that never reads
// past the end: every read first checks that the bytes are there and otherwise
// fails with the offset and what it was reading. Counts from the file (keys,
// tensors, array elements) are capped by what the remaining bytes could possibly
// hold — each element has a minimum encoded size — before any memory is reserved,
// so a 40-byte file that claims 2^60 keys is refused, not obeyed. Array nesting is
// capped (kMaxArrayDepth) so a file of nested array headers cannot exhaust the
// stack. After the tensor infos, every tensor is checked against the ggml table,
// the alignment and the file's size (see gguf.hpp for the full invariant).
//
// Nothing here throws for bad input; allocation failure (std::bad_alloc) is the
// only exception that can escape, and the caps keep allocations proportional to
// the file's size.
#include <bit>
#include <cstring>
#include <string>

#include "gguf/gguf.hpp"

namespace activekv::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::size_t kHeaderBytes = 4 + 4 + 8 + 8;
constexpr std::size_t kMinStringBytes = 8;                   // length prefix of an empty string
constexpr std::size_t kMinKeyValueBytes = kMinStringBytes + 4 + 1;  // key, type, smallest value
constexpr std::size_t kMinTensorInfoBytes = kMinStringBytes + 4 + 8 + 4 + 8;  // name, n_dims, one ne, type, offset
constexpr std::size_t kArrayHeaderBytes = 4 + 8;             // element type, count

// Minimum encoded size of one array element of `type` (type already validated).
std::size_t min_element_bytes(ValueType type) noexcept {
  if (type == ValueType::string) return kMinStringBytes;
  if (type == ValueType::array) return kArrayHeaderBytes;
  return scalar_size(type);
}

bool is_value_type(std::uint32_t raw) noexcept { return raw <= static_cast<std::uint32_t>(ValueType::float64); }

}  // namespace

// Friend of File: fills its private tables.
class Parser {
 public:
  Parser(File& file, std::span<const std::byte> bytes) : file_(file), bytes_(bytes) {}

  Status run() {
    if (Status s = header(); !s) return s;
    if (Status s = key_values(); !s) return s;
    if (Status s = alignment(); !s) return s;
    if (Status s = tensor_infos(); !s) return s;
    return data_section();
  }

 private:
  Error fail(std::uint64_t at, const std::string& what) const {
    return make_error(ErrorCode::malformed, file_.name_, "at byte offset " + std::to_string(at) + ": " + what);
  }
  Error unsupported(std::uint64_t at, const std::string& what) const {
    return make_error(ErrorCode::unsupported, file_.name_, "at byte offset " + std::to_string(at) + ": " + what);
  }
  std::uint64_t remaining() const noexcept { return bytes_.size() - pos_; }

  // Bounds-checked fixed-size read of `n` bytes into `out`.
  Status read_raw(void* out, std::size_t n, const char* what) {
    if (remaining() < n) {
      return fail(pos_, std::string("file ends while reading ") + what + " (" + std::to_string(n) +
                            " bytes needed, " + std::to_string(remaining()) + " left)");
    }
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return {};
  }
  template <typename T>
  Status read(T& out, const char* what) {
    return read_raw(&out, sizeof(T), what);
  }

  Status read_string(std::string_view& out, const char* what) {
    const std::uint64_t at = pos_;
    std::uint64_t length = 0;
    if (Status s = read(length, what); !s) return s;
    if (length > remaining()) {
      return fail(at, std::string(what) + " claims " + std::to_string(length) + " bytes but only " +
                          std::to_string(remaining()) + " remain in the file");
    }
    out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(length));
    pos_ += length;
    return {};
  }

  Status header() {
    if (bytes_.size() < kHeaderBytes) {
      return fail(0, "file is " + std::to_string(bytes_.size()) + " bytes, shorter than the " +
                         std::to_string(kHeaderBytes) + "-byte GGUF header");
    }
    std::uint32_t magic = 0;
    (void)read(magic, "magic");
    if (magic != kMagic) return fail(0, "not a GGUF file (the first four bytes are not \"GGUF\")");
    std::uint32_t version = 0;
    (void)read(version, "version");
    if (version == 1) return unsupported(4, "GGUF version 1 (32-bit counts) is not supported; re-convert the model");
    if (version != 2 && version != 3) {
      if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
        return unsupported(4, "big-endian GGUF files are not supported");
      }
      return unsupported(4, "GGUF version " + std::to_string(version) + " is not supported (versions 2 and 3 are)");
    }
    file_.version_ = version;
    (void)read(tensor_count_, "tensor count");
    (void)read(kv_count_, "metadata key count");
    if (kv_count_ > remaining() / kMinKeyValueBytes) {
      return fail(16, "metadata key count " + std::to_string(kv_count_) + " cannot fit in the " +
                          std::to_string(remaining()) + " bytes that follow the header");
    }
    if (tensor_count_ > (remaining() - kv_count_ * kMinKeyValueBytes) / kMinTensorInfoBytes) {
      return fail(8, "tensor count " + std::to_string(tensor_count_) + " cannot fit in the " +
                         std::to_string(remaining()) + " bytes that follow the header");
    }
    return {};
  }

  Status key_values() {
    file_.metadata_.reserve(static_cast<std::size_t>(kv_count_));
    file_.key_index_.reserve(static_cast<std::size_t>(kv_count_));
    for (std::uint64_t k = 0; k < kv_count_; ++k) {
      const std::uint64_t at = pos_;
      KeyValue kv;
      if (Status s = read_string(kv.key, "a metadata key"); !s) return s;
      std::uint32_t raw_type = 0;
      if (Status s = read(raw_type, "a metadata value type"); !s) return s;
      if (!is_value_type(raw_type)) {
        return fail(pos_ - 4, "metadata key '" + std::string(kv.key) + "' has unknown value type " +
                                  std::to_string(raw_type));
      }
      if (Status s = value(static_cast<ValueType>(raw_type), kv.value, 0); !s) return s;
      if (!file_.key_index_.emplace(kv.key, file_.metadata_.size()).second) {
        return fail(at, "metadata key '" + std::string(kv.key) + "' appears twice");
      }
      file_.metadata_.push_back(kv);
    }
    return {};
  }

  // Reads a value of a known type at the cursor into `out`.
  Status value(ValueType type, Value& out, std::uint32_t depth) {
    out.type = type;
    out.offset = pos_;
    switch (type) {
      case ValueType::string:
        return read_string(out.string, "a string value");
      case ValueType::array:
        return array(out, depth);
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
        return scalar(type, out);
    }
    return fail(pos_, "value type " + std::to_string(static_cast<std::uint32_t>(type)) + " is unknown");
  }

  Status scalar(ValueType type, Value& out) {
    const std::uint64_t at = pos_;
    out.bits = 0;
    if (Status s = read_raw(&out.bits, scalar_size(type), "a scalar value"); !s) return s;
    if (type == ValueType::boolean && out.bits > 1) {
      return fail(at, "boolean value is " + std::to_string(out.bits) + ", not 0 or 1");
    }
    return {};
  }

  Status array(Value& out, std::uint32_t depth) {
    const std::uint64_t at = pos_;
    if (depth >= kMaxArrayDepth) {
      return fail(at, "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    }
    std::uint32_t raw_type = 0;
    if (Status s = read(raw_type, "an array element type"); !s) return s;
    if (!is_value_type(raw_type)) return fail(at, "array has unknown element type " + std::to_string(raw_type));
    out.element_type = static_cast<ValueType>(raw_type);
    if (Status s = read(out.count, "an array length"); !s) return s;
    const std::size_t element_bytes = min_element_bytes(out.element_type);
    if (out.count > remaining() / element_bytes) {
      return fail(at, "array of " + std::to_string(out.count) + " " +
                          std::string(value_type_name(out.element_type)) + " elements cannot fit in the " +
                          std::to_string(remaining()) + " bytes that remain");
    }
    if (out.element_type != ValueType::string && out.element_type != ValueType::array) {
      out.elements = bytes_.data() + pos_;
      pos_ += out.count * element_bytes;
      if (out.element_type == ValueType::boolean) return check_booleans(out);
      return {};
    }
    // Reserve the slots first: nested arrays append their own items after these.
    out.first_item = file_.items_.size();
    file_.items_.resize(file_.items_.size() + static_cast<std::size_t>(out.count));
    for (std::uint64_t i = 0; i < out.count; ++i) {
      Value item;
      if (Status s = value(out.element_type, item, depth + 1); !s) return s;
      file_.items_[out.first_item + static_cast<std::size_t>(i)] = item;
    }
    return {};
  }

  Status check_booleans(const Value& array) const {
    for (std::uint64_t i = 0; i < array.count; ++i) {
      const auto byte = std::to_integer<unsigned>(array.elements[i]);
      if (byte > 1) {
        return fail(array.offset + kArrayHeaderBytes + i,
                    "boolean array element " + std::to_string(i) + " is " + std::to_string(byte) + ", not 0 or 1");
      }
    }
    return {};
  }

  Status alignment() {
    const Value* found = file_.find("general.alignment");
    if (found == nullptr) return {};
    if (found->type != ValueType::uint32) {
      return fail(found->offset, "general.alignment must be a uint32, found " +
                                     std::string(value_type_name(found->type)));
    }
    const auto align = static_cast<std::uint32_t>(found->bits);
    if (align == 0 || !std::has_single_bit(align)) {
      return fail(found->offset, "general.alignment is " + std::to_string(align) + ", not a power of two");
    }
    file_.alignment_ = align;
    return {};
  }

  Status tensor_infos() {
    file_.tensors_.reserve(static_cast<std::size_t>(tensor_count_));
    file_.tensor_index_.reserve(static_cast<std::size_t>(tensor_count_));
    for (std::uint64_t t = 0; t < tensor_count_; ++t) {
      TensorInfo info;
      if (Status s = tensor_info(info); !s) return s;
      if (!file_.tensor_index_.emplace(info.name, file_.tensors_.size()).second) {
        return fail(info.info_offset, "tensor '" + std::string(info.name) + "' appears twice");
      }
      file_.tensors_.push_back(info);
    }
    return {};
  }

  Status tensor_info(TensorInfo& info) {
    info.info_offset = pos_;
    if (Status s = read_string(info.name, "a tensor name"); !s) return s;
    const std::string name(info.name);
    if (Status s = read(info.n_dims, "a tensor's dimension count"); !s) return s;
    if (info.n_dims == 0 || info.n_dims > kMaxDims) {
      return fail(pos_ - 4, "tensor '" + name + "' has " + std::to_string(info.n_dims) +
                                " dimensions (1 to " + std::to_string(kMaxDims) + " allowed)");
    }
    if (Status s = dims(info, name); !s) return s;
    std::uint32_t raw_type = 0;
    if (Status s = read(raw_type, "a tensor's ggml type"); !s) return s;
    const GgmlTypeTraits* traits = find_ggml_type(raw_type);
    if (traits == nullptr) {
      return unsupported(pos_ - 4, "tensor '" + name + "' has unknown ggml type " + std::to_string(raw_type));
    }
    info.type = traits->type;
    if (info.ne[0] % traits->block_elements != 0) {
      return fail(info.info_offset, "tensor '" + name + "' has first dimension " + std::to_string(info.ne[0]) +
                                        ", not a multiple of the " + std::string(traits->name) + " block of " +
                                        std::to_string(traits->block_elements));
    }
    // Bytes must fit in 63 bits (a file cannot be larger), checked before multiplying.
    const std::uint64_t blocks = info.elements / traits->block_elements;
    if (blocks > (std::uint64_t{1} << 63) / traits->block_bytes) {
      return fail(info.info_offset, "tensor '" + name + "' of " + std::to_string(info.elements) + " " +
                                        std::string(traits->name) + " elements is larger than any file");
    }
    info.bytes = blocks * traits->block_bytes;
    if (Status s = read(info.offset, "a tensor's data offset"); !s) return s;
    if (info.offset % file_.alignment_ != 0) {
      return fail(pos_ - 8, "tensor '" + name + "' data offset " + std::to_string(info.offset) +
                                " is not a multiple of the alignment " + std::to_string(file_.alignment_));
    }
    return {};
  }

  Status dims(TensorInfo& info, const std::string& name) {
    // Elements are capped at 2^62 so their product cannot overflow a u64; the
    // byte size is checked against 2^63 separately (tensor_info).
    constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;
    info.elements = 1;
    for (std::uint32_t d = 0; d < info.n_dims; ++d) {
      if (Status s = read(info.ne[d], "a tensor dimension"); !s) return s;
      const std::uint64_t ne = info.ne[d];
      if (ne != 0 && info.elements > kMaxElements / ne) {
        return fail(pos_ - 8, "tensor '" + name + "' has more than 2^62 elements");
      }
      info.elements *= ne;
    }
    return {};
  }

  Status data_section() {
    const std::uint64_t align = file_.alignment_;
    const std::uint64_t start = (pos_ + align - 1) / align * align;  // pos_ ≤ size, no overflow
    if (file_.tensors_.empty()) {
      file_.data_offset_ = std::min<std::uint64_t>(start, bytes_.size());
      return {};
    }
    if (start > bytes_.size()) {
      return fail(pos_, "file ends before the data section (which starts at " + std::to_string(start) + ")");
    }
    file_.data_offset_ = start;
    const std::uint64_t data_bytes = bytes_.size() - start;
    for (const TensorInfo& info : file_.tensors_) {
      if (info.offset > data_bytes || info.bytes > data_bytes - info.offset) {
        // Offsets are printed as the file gives them (relative to the data section), never summed: a sum
        // could wrap past 2^64 and name a range inside the file.
        return fail(info.info_offset, "tensor '" + std::string(info.name) + "' data offset " +
                                          std::to_string(info.offset) + " + " + std::to_string(info.bytes) +
                                          " bytes lies beyond the end of the file (the data section holds " +
                                          std::to_string(data_bytes) + " bytes, from byte " + std::to_string(start) + ")");
      }
    }
    return {};
  }

  File& file_;
  std::span<const std::byte> bytes_;
  std::uint64_t pos_ = 0;
  std::uint64_t tensor_count_ = 0;
  std::uint64_t kv_count_ = 0;
};

Result<File> File::parse(std::span<const std::byte> bytes, std::string name) {
  File file;
  file.name_ = std::move(name);
  file.bytes_ = bytes;
  Parser parser(file, bytes);
  if (Status s = parser.run(); !s) return s.error();
  return file;
}

}  // namespace activekv::gguf
