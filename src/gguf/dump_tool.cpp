// dump_tool.cpp — activekv_gguf_dump: a GGUF file's metadata and tensor infos as JSON.
//
// The metadata comparison test (compare_metadata.py) reads the same file with the
// Python `gguf` package and compares every key, type and value (whole arrays
// included) and every tensor's name, shape, type, absolute offset and size.
//
//   activekv_gguf_dump --model m.gguf
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.hpp"

namespace {

using activekv::gguf::File;
using activekv::gguf::Value;
using activekv::gguf::ValueType;

nlohmann::json to_json(const File& file, const Value& value) {
  switch (value.type) {
    case ValueType::string:
      return std::string(value.string);
    case ValueType::array: {
      nlohmann::json items = nlohmann::json::array();
      for (std::uint64_t i = 0; i < value.count; ++i) items.push_back(to_json(file, file.item(value, i)));
      return items;
    }
    case ValueType::boolean:
      return activekv::gguf::as_bool(value).value();
    case ValueType::float32:
    case ValueType::float64:
      return activekv::gguf::as_f64(value).value();
    case ValueType::int8:
    case ValueType::int16:
    case ValueType::int32:
    case ValueType::int64:
      return activekv::gguf::as_i64(value).value();
    case ValueType::uint8:
    case ValueType::uint16:
    case ValueType::uint32:
    case ValueType::uint64:
      return activekv::gguf::as_u64(value).value();
  }
  return nullptr;
}

// The value types of a value, outermost first, as the gguf package lists them.
nlohmann::json types_of(const File& file, const Value& value) {
  nlohmann::json types = nlohmann::json::array({static_cast<std::uint32_t>(value.type)});
  if (value.type == ValueType::array) {
    if (value.element_type == ValueType::array && value.count > 0) {
      for (const auto& t : types_of(file, file.item(value, 0))) types.push_back(t);
    } else {
      types.push_back(static_cast<std::uint32_t>(value.element_type));
    }
  }
  return types;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Print a GGUF file's metadata and tensor infos as JSON"};
  std::string model;
  app.add_option("--model", model, "GGUF file")->required();
  CLI11_PARSE(app, argc, argv);

  activekv::Result<File> file = File::open(model);
  if (!file) {
    fmt::print(stderr, "activekv_gguf_dump: {}\n", file.error().describe());
    return 1;
  }
  nlohmann::json out;
  out["version"] = file->version();
  out["alignment"] = file->alignment();
  out["data_offset"] = file->data_offset();
  nlohmann::json metadata = nlohmann::json::array();
  for (const activekv::gguf::KeyValue& kv : file->metadata()) {
    metadata.push_back({{"key", std::string(kv.key)}, {"types", types_of(*file, kv.value)},
                        {"value", to_json(*file, kv.value)}});
  }
  out["metadata"] = std::move(metadata);
  nlohmann::json tensors = nlohmann::json::array();
  for (const activekv::gguf::TensorInfo& t : file->tensors()) {
    tensors.push_back({{"name", std::string(t.name)},
                       {"shape", std::vector<std::uint64_t>(t.ne, t.ne + t.n_dims)},
                       {"type", static_cast<std::uint32_t>(t.type)},
                       {"data_offset", file->data_offset() + t.offset},
                       {"n_bytes", t.bytes},
                       {"n_elements", t.elements}});
  }
  out["tensors"] = std::move(tensors);
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict) << '\n';
  return 0;
}
