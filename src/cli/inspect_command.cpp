// inspect_command.cpp — `activekv inspect FILE.gguf`: what a model file is, what its KV
// costs, and whether this build can run it, from the file's metadata alone.
//
// It prints the architecture and its layers by kind, the weights' quantisation mix (tensors,
// elements and bytes per type), the KV bytes per token and per history (f16 rows, as the
// engine stores them), the memory plan when --host-pool and --device-pool are given, the chat
// template's family (recognised from its text, else "unrecognised"), and "runs here: yes" or
// every missing piece by name (architecture, each unread tensor type, tokenizer, model checks).
// --json prints the same with named keys.
//
// The file is mapped, never read through: only the header, metadata and tensor table are
// touched, so a multi-gigabyte file is inspected in milliseconds. A file that does not parse as
// GGUF is one line on stderr, exit 1; anything that parses is described (exit 0), its defects
// listed under "runs here". Sizes derived from metadata are computed in 64 bits from values
// first checked against the plan's own limits (Geometry::validate), so no value can overflow.
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "activekv/geometry.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "cli/command.hpp"
#include "engine/arch.hpp"
#include "engine/model.hpp"
#include "engine/quant.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::cli {
namespace {

constexpr std::uint32_t page_tokens_default = 16;  // a window layer's ring holds window + one page

struct Options {
  std::string path;
  std::string host_pool, device_pool, max_context;
  bool json = false;
};

struct TypeUse {
  std::uint64_t tensors = 0, elements = 0, bytes = 0;
  bool read = false;  // the engine computes with this type
};

struct Inspection {
  std::string architecture = "(none)", name;
  std::optional<Geometry> geometry;  // from metadata, when complete and within limits
  std::string geometry_problem;      // why not
  std::uint32_t context_tokens = 0, window_tokens = 0, window_layers = 0;
  std::string layer_kinds;
  std::map<std::string, TypeUse> mix;  // by type name
  std::uint64_t weight_bytes = 0, tensors = 0;
  std::string chat_family;
  std::vector<std::string> missing;
  std::string plan_text, plan_json_text, plan_problem;
};

std::string mib(std::uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

std::optional<std::uint32_t> u32_of(const gguf::File& f, const std::string& key) {
  Result<std::uint32_t> v = f.get_u32(key);
  if (!v) return std::nullopt;
  return *v;
}

// The chat template's family from its text; "none" when the file has none.
std::string chat_family(const gguf::File& f) {
  if (!f.has("tokenizer.chat_template")) return "none";
  Result<std::string_view> t = f.get_string("tokenizer.chat_template");
  if (!t) return "unrecognised (not a string)";
  if (t->find("<|im_start|>") != std::string_view::npos) return "chatml";
  if (t->find("<|start_header_id|>") != std::string_view::npos) return "llama3";
  if (t->find("<start_of_turn>") != std::string_view::npos) return "gemma";
  if (t->find("[INST]") != std::string_view::npos) return "mistral";
  return "unrecognised";
}

// The geometry as the engine reads it (every architecture it runs: window layers, recurrent state);
// false when it cannot (an unknown architecture, malformed metadata), for read_geometry's own reading.
bool engine_geometry(const gguf::File& f, Inspection& in) {
  Result<engine::HParams> hp = engine::read_hparams(f);
  if (!hp) return false;
  const Geometry g = engine::kv_geometry(*hp);
  if (!g.validate()) return false;
  in.geometry = g;
  in.context_tokens = hp->context_tokens;
  in.window_tokens = g.kinds.window_tokens;
  in.window_layers = g.window_layers();
  std::string kinds;
  if (in.window_layers == 0) {
    kinds = g.recurrent_layers == 0 ? fmt::format("{} layers, all full attention", hp->layers)
                                    : fmt::format("{} layers: {} full attention", hp->layers, g.full_layers());
  } else if (g.full_layers() == 0) {
    kinds = fmt::format("{} layers, all with a sliding window of {}", g.dense_layers, in.window_tokens);
  } else {
    kinds = fmt::format("{} layers: {} global (full history), {} local (sliding window of {})", g.dense_layers,
                        g.full_layers(), in.window_layers, in.window_tokens);
  }
  if (g.recurrent_layers != 0)
    kinds += fmt::format(", {} recurrent ({} of state per context)", g.recurrent_layers, mib(g.recurrent_state_bytes));
  in.layer_kinds = kinds;
  return true;
}

void read_geometry(const gguf::File& f, Inspection& in) {
  if (engine_geometry(f, in)) return;
  const std::string p = in.architecture + ".";
  const std::optional<std::uint32_t> layers = u32_of(f, p + "block_count");
  const std::optional<std::uint32_t> heads = u32_of(f, p + "attention.head_count");
  const std::optional<std::uint32_t> kv_heads = f.has(p + "attention.head_count_kv") ? u32_of(f, p + "attention.head_count_kv") : heads;
  const std::optional<std::uint32_t> embedding = u32_of(f, p + "embedding_length");
  std::optional<std::uint32_t> head_dim = u32_of(f, p + "attention.key_length");
  if (!head_dim && embedding && heads && *heads != 0) head_dim = *embedding / *heads;
  in.context_tokens = u32_of(f, p + "context_length").value_or(0);
  in.window_tokens = u32_of(f, p + "attention.sliding_window").value_or(0);
  if (!layers || !kv_heads || !head_dim) {
    in.geometry_problem = fmt::format("metadata '{}block_count', '{}attention.head_count(_kv)' or the head size is missing or not a whole number", p, p);
    return;
  }
  Geometry g;
  g.dense_layers = *layers;
  g.kv_heads = *kv_heads;
  g.head_dim = *head_dim;
  g.dtype = DType::f16;
  if (Status s = g.validate(); !s) {
    in.geometry_problem = s.error().describe();
    return;
  }
  in.geometry = g;
  // Layers by kind. Gemma 3: five local (window) layers for every global one; a window elsewhere (Mistral) is
  // on every layer.
  if (in.window_tokens != 0 && in.architecture == "gemma3") {
    in.window_layers = *layers - *layers / 6;
    in.layer_kinds = fmt::format("{} layers: {} global (full history), {} local (sliding window of {})", *layers,
                                 *layers - in.window_layers, in.window_layers, in.window_tokens);
  } else if (in.window_tokens != 0) {
    in.window_layers = *layers;
    in.layer_kinds = fmt::format("{} layers, all with a sliding window of {}", *layers, in.window_tokens);
  } else {
    in.layer_kinds = fmt::format("{} layers, all full attention", *layers);
  }
}

void read_mix(const gguf::File& f, Inspection& in) {
  for (const gguf::TensorInfo& t : f.tensors()) {
    TypeUse& u = in.mix[std::string(t.traits().name)];
    ++u.tensors;
    u.elements += t.elements;
    u.bytes += t.elements / t.traits().block_elements * t.traits().block_bytes;
    u.read = engine::quant_supported(t.type);
    in.weight_bytes += t.elements / t.traits().block_elements * t.traits().block_bytes;
    ++in.tensors;
  }
  for (const auto& [type, use] : in.mix) {
    if (!use.read) in.missing.push_back(fmt::format("{} tensor(s) of type {}, which ActiveKV does not read (supported: {})",
                                                    use.tensors, type, engine::quant_supported_names()));
  }
}

// What stops this build from running the file, each piece by name: the same checks as loading it
// (architecture, tensor types, the model's hyper-parameters and tensors, the tokenizer, their agreement).
void check_runs(const Options& o, Inspection& in) {
  const bool types_ok = in.missing.empty();
  std::unique_ptr<engine::Model> model;
  if (engine::find_arch(in.architecture) == nullptr) {
    in.missing.insert(in.missing.begin(),
                      fmt::format("architecture '{}' (the engine runs {})", in.architecture, engine::arch_names()));
  } else if (types_ok) {
    if (Result<gguf::File> again = gguf::File::open(o.path); again) {
      Result<std::unique_ptr<engine::Model>> loaded = engine::Model::from_file(std::move(again).value());
      if (loaded) model = std::move(loaded).value();
      else in.missing.push_back(loaded.error().describe());
    }
  }
  Result<gguf::File> file = gguf::File::open(o.path);
  if (!file) return;
  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(*file);
  if (!tok) {
    in.missing.push_back("tokenizer: " + tok.error().describe());
  } else if (model) {
    if (Status s = engine::check_vocabulary(*model, static_cast<std::uint64_t>(tok->vocab_size())); !s)
      in.missing.push_back(s.error().describe());
  }
}

// The plan's flags, checked before the file is opened: a bad flag is one line on stderr, exit 2.
struct PlanFlags {
  bool wanted = false;
  std::uint64_t host_pool_bytes = 0;
  std::uint32_t max_context_tokens = 0;  // 0: the file's
};

Result<PlanFlags> plan_flags(const Options& o) {
  PlanFlags f;
  if (o.host_pool.empty() != o.device_pool.empty()) {
    return make_error(ErrorCode::invalid_argument, o.host_pool.empty() ? "--host-pool" : "--device-pool",
                      "the plan needs both --host-pool and --device-pool");
  }
  if (!o.max_context.empty()) {
    Result<std::uint64_t> v = parse_count(o.max_context, "--max-context");
    if (!v) return v.error();
    if (*v == 0 || *v > engine::context_tokens_max) {
      return make_error(ErrorCode::invalid_argument, "--max-context",
                        fmt::format("must be 1 to {} tokens, got {}", engine::context_tokens_max, o.max_context));
    }
    f.max_context_tokens = static_cast<std::uint32_t>(*v);
  }
  if (o.host_pool.empty()) return f;
  Result<std::uint64_t> host = parse_size(o.host_pool, "--host-pool");
  if (!host) return host.error();
  f.wanted = true;
  f.host_pool_bytes = *host;
  return f;
}

void make_plan(const Options& o, const PlanFlags& flags, Inspection& in) {
  if (!flags.wanted) return;
  if (!in.geometry) {
    in.plan_problem = "no plan: the file's geometry is incomplete (" + in.geometry_problem + ")";
    return;
  }
  MemorySettings s;
  s.geometry = *in.geometry;
  s.max_context_tokens = flags.max_context_tokens != 0 ? flags.max_context_tokens : in.context_tokens;
  if (s.max_context_tokens == 0 || s.max_context_tokens > engine::context_tokens_max) {
    in.plan_problem = fmt::format("no plan: the file's context length ({}) is not 1 to {}; give --max-context",
                                  in.context_tokens, engine::context_tokens_max);
    return;
  }
  s.host_pool_bytes = flags.host_pool_bytes;
  Result<std::uint64_t> device = parse_device_pool(o.device_pool, s);
  if (!device) {
    in.plan_problem = "no plan: " + device.error().describe();
    return;
  }
  s.device_pool_bytes = *device;
  Result<MemoryPlan> plan = make_memory_plan(s);
  if (!plan) {
    in.plan_problem = "plan refused: " + plan.error().describe();
    return;
  }
  in.plan_text = format_memory_plan(*plan);
  in.plan_json_text = memory_plan_json(*plan);
}

std::uint64_t kv_token_bytes(const Inspection& in) { return in.geometry->row_bytes() * in.geometry->dense_layers; }

// Per history: full layers hold the context; window layers a ring of window + one page; recurrent
// layers their state.
std::uint64_t kv_history_bytes(const Inspection& in) {
  const Geometry& g = *in.geometry;
  const std::uint64_t full = g.dense_layers - in.window_layers;
  const std::uint64_t ring = std::min<std::uint64_t>(in.context_tokens, std::uint64_t{in.window_tokens} + page_tokens_default);
  return g.row_bytes() * (full * in.context_tokens + in.window_layers * ring) + g.recurrent_state_bytes;
}

void print_text(const Options& o, const gguf::File& f, const Inspection& in) {
  std::string out = fmt::format("file          {} ({}, GGUF v{})\n", o.path, mib(f.bytes().size()), f.version());
  if (!in.name.empty()) out += fmt::format("model         {}\n", in.name);
  out += fmt::format("architecture  {}{}\n", in.architecture, in.layer_kinds.empty() ? "" : ": " + in.layer_kinds);
  out += fmt::format("weights       {} in {} tensors\n", mib(in.weight_bytes), in.tensors);
  for (const auto& [type, u] : in.mix) {
    out += fmt::format("  {:<6} {:>5} tensors {:>14} elements {:>12}{}\n", type, u.tensors, u.elements, mib(u.bytes),
                       u.read ? "" : "  (not read)");
  }
  if (in.geometry) {
    const Geometry& g = *in.geometry;
    out += fmt::format("kv            f16 rows of {} bytes ({} KV heads × {}); {} bytes per token over {} attention layers\n",
                       g.row_bytes(), g.kv_heads, g.head_dim, kv_token_bytes(in), g.dense_layers);
    if (in.context_tokens != 0) {
      out += fmt::format("              {} per {}-token history (full layers × context{}{})\n", mib(kv_history_bytes(in)),
                         in.context_tokens, in.window_layers != 0 ? " + window layers × (window + 16)" : "",
                         g.recurrent_layers != 0 ? " + the recurrent state" : "");
    }
  } else {
    out += fmt::format("kv            unknown: {}\n", in.geometry_problem);
  }
  out += fmt::format("chat template {}\n", in.chat_family);
  if (!in.plan_text.empty()) out += "memory plan\n" + in.plan_text;
  else if (!in.plan_problem.empty()) out += "memory plan   " + in.plan_problem + "\n";
  else out += "memory plan   give --host-pool and --device-pool (e.g. --host-pool 4GiB --device-pool 512MiB)\n";
  if (in.missing.empty()) {
    out += "runs here     yes\n";
  } else {
    out += "runs here     no:\n";
    for (const std::string& m : in.missing) out += "  - " + m + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void print_json(const Options& o, const gguf::File& f, const Inspection& in) {
  nlohmann::json j;
  j["file"] = o.path;
  j["file_bytes"] = f.bytes().size();
  j["gguf_version"] = f.version();
  j["name"] = in.name;
  j["architecture"] = in.architecture;
  j["layer_kinds"] = in.layer_kinds;
  j["weight_bytes"] = in.weight_bytes;
  nlohmann::json mix = nlohmann::json::object();
  for (const auto& [type, u] : in.mix)
    mix[type] = {{"tensors", u.tensors}, {"elements", u.elements}, {"bytes", u.bytes}, {"read", u.read}};
  j["quant_mix"] = mix;
  if (in.geometry) {
    j["kv"] = {{"layers", in.geometry->dense_layers},   {"window_layers", in.window_layers},
               {"window_tokens", in.window_tokens},     {"kv_heads", in.geometry->kv_heads},
               {"head_dim", in.geometry->head_dim},     {"row_bytes", in.geometry->row_bytes()},
               {"bytes_per_token", kv_token_bytes(in)}, {"context_tokens", in.context_tokens},
               {"recurrent_layers", in.geometry->recurrent_layers},
               {"recurrent_state_bytes", in.geometry->recurrent_state_bytes},
               {"bytes_per_history", in.context_tokens != 0 ? kv_history_bytes(in) : 0}};
  } else {
    j["kv"] = {{"problem", in.geometry_problem}};
  }
  j["chat_template"] = in.chat_family;
  if (!in.plan_json_text.empty()) j["memory_plan"] = nlohmann::json::parse(in.plan_json_text);
  if (!in.plan_problem.empty()) j["memory_plan_problem"] = in.plan_problem;
  j["runs_here"] = in.missing.empty();
  j["missing"] = in.missing;
  const std::string out = j.dump(2) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int run(const Options& o) {
  Result<PlanFlags> flags = plan_flags(o);
  if (!flags) {
    std::fprintf(stderr, "activekv inspect: %s\n", flags.error().describe().c_str());
    return 2;
  }
  Result<gguf::File> opened = gguf::File::open(o.path);
  if (!opened) {
    std::fprintf(stderr, "activekv inspect: %s\n", opened.error().describe().c_str());
    return 1;
  }
  const gguf::File& f = *opened;
  Inspection in;
  if (Result<std::string_view> a = f.get_string("general.architecture"); a) in.architecture = std::string(*a);
  if (Result<std::string_view> n = f.get_string("general.name"); n) in.name = std::string(*n);
  read_geometry(f, in);
  read_mix(f, in);
  in.chat_family = chat_family(f);
  check_runs(o, in);
  make_plan(o, *flags, in);
  if (o.json) print_json(o, f, in);
  else print_text(o, f, in);
  return 0;
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("file", o->path, "the GGUF model file")->required();
  sub.add_option("--host-pool", o->host_pool, "with --device-pool: print the memory plan for this host pool");
  sub.add_option("--device-pool", o->device_pool, "the device arena for the plan");
  sub.add_option("--max-context", o->max_context, "longest context for the plan (default: the file's)");
  sub.add_flag("--json", o->json, "print the inspection as JSON");
  return [o]() -> int { return run(*o); };
}

Registration registration{"inspect", "Describe a GGUF model file: layers, weights, KV cost, plan, and whether it runs here",
                          15, setup};

}  // namespace
}  // namespace activekv::cli
