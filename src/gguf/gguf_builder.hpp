// gguf_builder.hpp — writes small GGUF files in memory, for tests.
//
// Tests craft files byte by byte through this builder: every value type, nested
// arrays, tensors with aligned data, and deliberate damage (a wrong count, an
// unknown type) by editing the bytes it returns. It is the writer side of the
// layout in gguf.hpp, kept deliberately simple: each key/value is encoded as it
// is added, tensors are laid out at build() with the alignment in force.
#pragma once

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.hpp"

namespace activekv::gguf::testing {

// Appends little-endian encodings to a byte vector.
class Encoder {
 public:
  template <typename T>
  Encoder& put(T v) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  Encoder& put_string(std::string_view s) {
    put<std::uint64_t>(s.size());
    const std::size_t at = bytes_.size();
    bytes_.resize(at + s.size());
    std::memcpy(bytes_.data() + at, s.data(), s.size());
    return *this;
  }
  Encoder& put_type(ValueType t) { return put<std::uint32_t>(static_cast<std::uint32_t>(t)); }
  Encoder& append(const std::vector<std::byte>& more) {
    bytes_.insert(bytes_.end(), more.begin(), more.end());
    return *this;
  }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class Builder {
 public:
  Builder& version(std::uint32_t v) {
    version_ = v;
    return *this;
  }
  // A scalar key of the given type; T is the C++ type written (its size must match).
  template <typename T>
  Builder& scalar(std::string_view key, ValueType type, T v) {
    kv_.put_string(key).put_type(type).put<T>(v);
    ++kv_count_;
    return *this;
  }
  Builder& u32(std::string_view key, std::uint32_t v) { return scalar(key, ValueType::uint32, v); }
  Builder& f32(std::string_view key, float v) { return scalar(key, ValueType::float32, v); }
  Builder& boolean(std::string_view key, bool v) { return scalar<std::uint8_t>(key, ValueType::boolean, v ? 1 : 0); }
  Builder& string(std::string_view key, std::string_view v) {
    kv_.put_string(key).put_type(ValueType::string).put_string(v);
    ++kv_count_;
    return *this;
  }
  Builder& string_array(std::string_view key, const std::vector<std::string>& items) {
    kv_.put_string(key).put_type(ValueType::array).put_type(ValueType::string).put<std::uint64_t>(items.size());
    for (const std::string& s : items) kv_.put_string(s);
    ++kv_count_;
    return *this;
  }
  template <typename T>
  Builder& array(std::string_view key, ValueType element_type, const std::vector<T>& items) {
    kv_.put_string(key).put_type(ValueType::array).put_type(element_type).put<std::uint64_t>(items.size());
    for (const T& v : items) kv_.put<T>(v);
    ++kv_count_;
    return *this;
  }
  // A key whose value (type and payload) the caller encoded.
  Builder& raw(std::string_view key, ValueType type, const std::vector<std::byte>& payload) {
    kv_.put_string(key).put_type(type).append(payload);
    ++kv_count_;
    return *this;
  }
  Builder& alignment(std::uint32_t a) {
    alignment_ = a;
    return u32("general.alignment", a);
  }
  Builder& tensor(std::string_view name, std::vector<std::uint64_t> ne, GgmlType type, std::vector<std::byte> data) {
    tensors_.push_back(Tensor{std::string(name), std::move(ne), type, std::move(data)});
    return *this;
  }

  std::vector<std::byte> build() const {
    Encoder out;
    out.put<std::uint32_t>(0x46554747).put<std::uint32_t>(version_);
    out.put<std::uint64_t>(tensors_.size()).put<std::uint64_t>(kv_count_);
    Encoder kv = kv_;
    out.append(kv.bytes());
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const Tensor& t : tensors_) {
      out.put_string(t.name).put<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
      for (const std::uint64_t d : t.ne) out.put<std::uint64_t>(d);
      out.put<std::uint32_t>(static_cast<std::uint32_t>(t.type)).put<std::uint64_t>(offset);
      offsets.push_back(offset);
      offset = align(offset + t.data.size());
    }
    if (!tensors_.empty()) {
      out.bytes().resize(align(out.bytes().size()));
      const std::size_t start = out.bytes().size();
      for (std::size_t i = 0; i < tensors_.size(); ++i) {
        out.bytes().resize(start + offsets[i]);
        out.append(tensors_[i].data);
      }
    }
    return out.bytes();
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> ne;
    GgmlType type;
    std::vector<std::byte> data;
  };
  std::uint64_t align(std::uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  std::uint32_t version_ = 3;
  std::uint32_t alignment_ = kDefaultAlignment;
  Encoder kv_;
  std::uint64_t kv_count_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace activekv::gguf::testing
