// run_config.cpp — parsing and validating the run's settings.
#include "serve/run_config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "activekv/size.hpp"
#include "serve/input_file.hpp"
#include "serve/json_limits.hpp"
#include "serve/retained_histories.hpp"

namespace activekv::serve {

namespace {

using nlohmann::json;

constexpr std::uint32_t count_max = 1u << 24;

Error field_error(std::string_view source, std::string_view field, std::string message) {
  return make_error(ErrorCode::invalid_argument, fmt::format("{}: {}", source, field), std::move(message));
}

// prefix_cache: optional; a size such as "1GiB", or 0 / "0" for no host prefix cache.
Status read_prefix_cache(const json& value, std::uint64_t& out, std::string_view source) {
  if (value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() == 0)) {
    out = value.get<std::uint64_t>();
    return {};
  }
  if (!value.is_string()) {
    return field_error(source, "prefix_cache",
                       fmt::format("must be a size such as \"1GiB\" (or 0 for none), got {}", describe_json(value)));
  }
  const std::string text = value.get<std::string>();
  if (text == "0") {
    out = 0;
    return {};
  }
  auto bytes = parse_size(text, fmt::format("{}: prefix_cache", source));
  if (!bytes) return bytes.error();
  out = *bytes;
  return {};
}

Status read_size(const json& object, const char* field, std::uint64_t& out, std::string_view source) {
  if (!object.contains(field)) return field_error(source, field, "missing: state the size explicitly, e.g. \"512MiB\"");
  const json& value = object.at(field);
  if (value.is_number_unsigned()) {
    out = value.get<std::uint64_t>();
    if (out == 0) return field_error(source, field, "must be more than 0 bytes");
    return {};
  }
  if (!value.is_string()) return field_error(source, field, fmt::format("must be a size such as \"512MiB\", got {}", describe_json(value)));
  const std::string text = value.get<std::string>();
  if (text == "auto") {
    return field_error(source, field,
                       "\"auto\" is refused: an automatic size hides the memory decision; state one (see `activekv plan`)");
  }
  auto bytes = parse_size(text, fmt::format("{}: {}", source, field));
  if (!bytes) return bytes.error();
  out = *bytes;
  return {};
}

// A whole number in [lo, hi]; `why` (if any) follows the refusal.
Status read_count(const json& object, const char* field, std::uint32_t& out, std::string_view source, bool required,
                  std::uint32_t lo, std::uint32_t hi = count_max, std::string_view why = {}) {
  if (!object.contains(field)) {
    if (required) return field_error(source, field, "missing");
    return {};
  }
  const json& value = object.at(field);
  if (!value.is_number_integer() || value.get<std::int64_t>() < lo || value.get<std::int64_t>() > hi) {
    return field_error(source, field, fmt::format("must be a whole number from {} to {}, got {}{}", lo, hi, describe_json(value), why));
  }
  out = static_cast<std::uint32_t>(value.get<std::int64_t>());
  return {};
}

constexpr std::uint32_t kv_tier_write_queue_max = 4096;
constexpr std::uint32_t kv_tier_lookups_max = 64;

constexpr const char* known_fields[] = {"model",       "host_pool", "device_pool", "page_tokens", "tile_tokens",
                                        "tiles",       "max_context", "max_seqs",  "step_tokens", "prefill_chunk_tokens",
                                        "threads",     "stop_at_eos", "arrival_scale", "max_queue", "shutdown_grace_s", "prefix_reuse",
                                        "kv_tier", "prefix_reuse_device", "sparse", "retained_histories", "prefix_cache", "state_checkpoint_pages", "activations", "comment"};

// The sparse key: "exact", or an object (docs/SPARSE.md "Configuration").
Status read_sparse(const json& value, SparseSettings& out, std::string_view source) {
  if (value.is_string()) {
    if (value.get<std::string>() != "exact") {
      return field_error(source, "sparse", "as a string only \"exact\"; give an object such as {\"mode\": \"fraction\", \"fraction\": 0.125}");
    }
    out = SparseSettings{};
    return {};
  }
  if (!value.is_object()) return field_error(source, "sparse", "must be \"exact\" or an object with mode, pages, fraction, recent_pages, floor_pages, measure, score, layer_budget, layer_signal");
  for (const auto& [key, v] : value.items()) {
    (void)v;
    if (key != "mode" && key != "pages" && key != "fraction" && key != "recent_pages" && key != "floor_pages" &&
        key != "measure" && key != "score" && key != "layer_budget" && key != "layer_signal" && key != "comment") {
      return field_error(source, "sparse." + key,
                         "unknown setting (known: mode, pages, fraction, recent_pages, floor_pages, measure, score, "
                         "layer_budget, layer_signal)");
    }
  }
  SparseSettings s;
  const std::string mode = value.contains("mode") && value["mode"].is_string() ? value["mode"].get<std::string>() : "";
  if (mode == "exact") {
    s.mode = SparseMode::exact;
  } else if (mode == "pages") {
    s.mode = SparseMode::pages;
  } else if (mode == "fraction") {
    s.mode = SparseMode::fraction;
  } else if (mode == "adaptive") {
    s.mode = SparseMode::adaptive;
  } else {
    return field_error(source, "sparse.mode", "must be \"exact\", \"pages\", \"fraction\" or \"adaptive\"");
  }
  json object = value;
  const std::string nested = fmt::format("{}: sparse", source);  // errors name "file: sparse: pages"
  for (Status st : {read_count(object, "pages", s.pages, nested, s.mode == SparseMode::pages, 1),
                    read_count(object, "recent_pages", s.recent_pages, nested, false, 1),
                    read_count(object, "floor_pages", s.floor_pages, nested, false, 1)}) {
    if (!st) return st;
  }
  if (s.mode == SparseMode::fraction || value.contains("fraction")) {
    if (!value.contains("fraction") || !value["fraction"].is_number() || !(value["fraction"].get<double>() > 0.0) ||
        !(value["fraction"].get<double>() <= 1.0)) {
      return field_error(source, "sparse.fraction", "must be a fraction of the pages in (0, 1], for example 0.125");
    }
    s.fraction = static_cast<float>(value["fraction"].get<double>());
  }
  if (value.contains("measure")) {
    if (!value["measure"].is_boolean()) return field_error(source, "sparse.measure", "must be true or false");
    s.measure = value["measure"].get<bool>();
  }
  if (value.contains("score")) {
    const json& v = value["score"];
    if (!v.is_string() || !sparse_score_from_name(v.get<std::string>(), s.score) || s.score == SparseScore::oracle) {
      return field_error(source, "sparse.score",
                         "must be \"bound\", \"moments\" or \"mixed\" (\"oracle\" is for activekv eval only)");
    }
    if (s.mode == SparseMode::exact) {
      return field_error(source, "sparse.score",
                         "ranks the pages of sparse attention, which is off: set mode to \"pages\", \"fraction\" or \"adaptive\"");
    }
  }
  if (value.contains("layer_budget")) {
    if (!value["layer_budget"].is_boolean()) return field_error(source, "sparse.layer_budget", "must be true or false");
    s.layer_budget = value["layer_budget"].get<bool>();
    if (s.layer_budget && s.mode != SparseMode::pages && s.mode != SparseMode::fraction) {
      return field_error(source, "sparse.layer_budget", "spreads a fixed budget: needs mode \"pages\" or \"fraction\"");
    }
  }
  if (value.contains("layer_signal")) {
    const json& v = value["layer_signal"];
    if (!v.is_string() || !layer_signal_from_name(v.get<std::string>(), s.layer_signal)) {
      return field_error(source, "sparse.layer_signal", "must be \"captured\" or \"moments\"");
    }
    if (!s.layer_budget) return field_error(source, "sparse.layer_signal", "needs \"layer_budget\": true");
  }
  out = s;
  return {};
}

bool is_known(std::string_view key) {
  for (const char* k : known_fields) {
    if (key == k) return true;
  }
  return false;
}

}  // namespace

bool activations_known(std::string_view text) { return text == "q16" || text == "q8"; }

Status RunConfig::validate(std::string_view source) const {
  if (tile_tokens % page_tokens != 0) {
    return field_error(source, "tile_tokens",
                       fmt::format("{} is not a multiple of page_tokens {}: a tile must hold whole pages", tile_tokens, page_tokens));
  }
  if (prefill_chunk_tokens > step_tokens) {
    return field_error(source, "prefill_chunk_tokens",
                       fmt::format("{} exceeds step_tokens {}: a chunk must fit in one step's budget", prefill_chunk_tokens,
                                   step_tokens));
  }
  if (retained_histories > retained_histories_max) {  // a configuration built in code, not read from JSON
    return field_error(source, "retained_histories",
                       fmt::format("must be a whole number from 0 to {}, got {}: {}; lower retained_histories",
                                   retained_histories_max, retained_histories, retained_histories_why));
  }
  if (step_tokens < max_seqs) {
    return field_error(source, "step_tokens",
                       fmt::format("{} is below max_seqs {}: every running context must be able to decode each step",
                                   step_tokens, max_seqs));
  }
  if (!std::isfinite(arrival_scale) || arrival_scale < 0.0) {
    return field_error(source, "arrival_scale", "must be a number >= 0");
  }
  return {};
}

Result<RunConfig> parse_run_config(std::string_view text, std::string_view source) {
  Result<json> parsed = parse_json(text, json_depth_max, source, /*comments=*/true);
  if (!parsed) return parsed.error();
  json object = std::move(parsed).value();
  if (!object.is_object()) return make_error(ErrorCode::malformed, std::string(source), "the configuration must be a JSON object");
  for (const auto& [key, value] : object.items()) {
    (void)value;
    if (!is_known(key)) {
      return field_error(source, key,
                         "unknown setting (known: model, host_pool, device_pool, page_tokens, tile_tokens, tiles, "
                         "max_context, max_seqs, step_tokens, prefill_chunk_tokens, threads, stop_at_eos, arrival_scale, max_queue, shutdown_grace_s, prefix_reuse, kv_tier, prefix_reuse_device, sparse, retained_histories, prefix_cache, state_checkpoint_pages, activations)");
    }
  }
  RunConfig config;
  if (object.contains("model")) {
    if (!object["model"].is_string()) return field_error(source, "model", "must be a path string (or absent for the default model)");
    config.model = object["model"].get<std::string>();
  }
  for (Status s : {read_size(object, "host_pool", config.host_pool_bytes, source),
                   read_size(object, "device_pool", config.device_pool_bytes, source),
                   read_count(object, "page_tokens", config.page_tokens, source, true, 1),
                   read_count(object, "tile_tokens", config.tile_tokens, source, true, 1),
                   read_count(object, "tiles", config.tiles, source, true, 1),
                   read_count(object, "max_context", config.max_context_tokens, source, false, 0),
                   read_count(object, "max_seqs", config.max_seqs, source, true, 1),
                   read_count(object, "step_tokens", config.step_tokens, source, true, 1),
                   read_count(object, "prefill_chunk_tokens", config.prefill_chunk_tokens, source, true, 1),
                   read_count(object, "threads", config.threads, source, true, 1),
                   read_count(object, "max_queue", config.max_queue, source, false, 0),
                   read_count(object, "state_checkpoint_pages", config.state_checkpoint_pages, source, false, 0),
                   read_count(object, "retained_histories", config.retained_histories, source, false, 0,
                              retained_histories_max,
                              fmt::format(": {}; lower retained_histories", retained_histories_why))}) {
    if (!s) return s.error();
  }
  if (object.contains("prefix_cache")) {
    if (Status st = read_prefix_cache(object.at("prefix_cache"), config.prefix_cache_bytes, source); !st) return st.error();
  }
  if (object.contains("activations")) {
    const json& a = object["activations"];
    if (!a.is_string() || !activations_known(a.get<std::string>()))
      return field_error(source, "activations", fmt::format("{} is not an activation width: {}", a.dump(), activations_refusal));
    config.activations = a.get<std::string>();
  }
  if (object.contains("stop_at_eos")) {
    if (!object["stop_at_eos"].is_boolean()) return field_error(source, "stop_at_eos", "must be true or false");
    config.stop_at_eos = object["stop_at_eos"].get<bool>();
  }
  if (object.contains("prefix_reuse")) {
    if (!object["prefix_reuse"].is_boolean()) return field_error(source, "prefix_reuse", "must be true or false");
    config.prefix_reuse = object["prefix_reuse"].get<bool>();
  }
  if (object.contains("kv_tier")) {
    const json& t = object["kv_tier"];
    if (t.is_string()) {
      config.kv_tier = t.get<std::string>();
    } else if (t.is_object()) {
      for (const auto& [key, value] : t.items()) {
        (void)value;
        if (key != "url" && key != "block_tokens" && key != "timeout_ms" && key != "write_queue" &&
            key != "lookups") {
          return field_error(source, "kv_tier." + key,
                             "unknown setting (known: url, block_tokens, timeout_ms, write_queue, lookups)");
        }
      }
      if (!t.contains("url") || !t["url"].is_string()) return field_error(source, "kv_tier.url", "must be a redis://host:port string");
      config.kv_tier = t["url"].get<std::string>();
      json tier = t;
      for (Status s : {read_count(tier, "block_tokens", config.kv_tier_block_tokens, source, false, 1),
                       read_count(tier, "timeout_ms", config.kv_tier_timeout_ms, source, false, 1),
                       read_count(tier, "write_queue", config.kv_tier_write_queue, source, false, 1),
                       read_count(tier, "lookups", config.kv_tier_lookups, source, false, 1)}) {
        if (!s) return s.error();
      }
      // Each queued write is a job record and each lookup a reader thread with its own connection
      // (holding up to a whole prompt's blocks): both are sized at start, so both are bounded here.
      if (config.kv_tier_write_queue > kv_tier_write_queue_max) {
        return field_error(source, "kv_tier.write_queue",
                           fmt::format("{} is more than {} blocks; lower write_queue", config.kv_tier_write_queue,
                                       kv_tier_write_queue_max));
      }
      if (config.kv_tier_lookups > kv_tier_lookups_max) {
        return field_error(source, "kv_tier.lookups",
                           fmt::format("{} is more than {} (each lookup is a reader thread and a connection); lower lookups",
                                       config.kv_tier_lookups, kv_tier_lookups_max));
      }
    } else {
      return field_error(source, "kv_tier", "must be a redis://host:port string or an object with url, block_tokens, timeout_ms, write_queue, lookups");
    }
    if (config.kv_tier.rfind("redis://", 0) != 0) {
      return field_error(source, "kv_tier", "the KV tier is a redis://host:port address, for example redis://127.0.0.1:6379");
    }
  }
  if (object.contains("prefix_reuse_device")) {
    if (!object["prefix_reuse_device"].is_boolean()) return field_error(source, "prefix_reuse_device", "must be true or false");
    config.prefix_reuse_device = object["prefix_reuse_device"].get<bool>();
  }
  if (object.contains("sparse")) {
    if (Status s = read_sparse(object["sparse"], config.sparse, source); !s) return s.error();
  }
  if (object.contains("arrival_scale")) {
    if (!object["arrival_scale"].is_number()) return field_error(source, "arrival_scale", "must be a number >= 0");
    config.arrival_scale = object["arrival_scale"].get<double>();
  }
  if (object.contains("shutdown_grace_s")) {
    const json& g = object["shutdown_grace_s"];
    if (!g.is_number() || !std::isfinite(g.get<double>()) || g.get<double>() < 0 || g.get<double>() > 3600) {
      return field_error(source, "shutdown_grace_s", "must be a number of seconds from 0 to 3600");
    }
    config.shutdown_grace_s = g.get<double>();
  }
  if (Status s = config.validate(source); !s) return s.error();
  return config;
}

Result<RunConfig> load_run_config(const std::string& path) {
  Result<std::string> text = read_input_file(path, config_file_bytes_max, "--config");
  if (!text) return text.error();
  return parse_run_config(*text, path);
}

}  // namespace activekv::serve
