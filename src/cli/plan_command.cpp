// plan_command.cpp — `activekv plan`: the memory plan, explained, or the refusal that says what to change.
//
// From a preset, a model file's metadata (--model FILE.gguf) or the geometry given field by field, and the operator's sizes it prints
// the host-pool formula with the numbers filled in, the arena layout with byte offsets,
// the admitted concurrency and the floors, targets and bursts; --json prints the same
// figures with keys named after the formula's terms. Sizes take units ("768", "48KiB",
// "12GiB"). Nothing is chosen automatically: an automatic --device-pool is refused.
//
// Exit codes: 0 planned; 2 bad settings or a refused plan (message on stderr).
#include <fmt/format.h>

#include <cstdio>
#include <string>

#include "activekv/geometry.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "cli/command.hpp"
#include "engine/hparams.hpp"
#include "engine/model.hpp"
#include "gguf/gguf.hpp"
#include "serve/retained_histories.hpp"

namespace activekv::cli {

namespace {

constexpr int exit_bad_settings = 2;

struct PlanOptions {
  std::string preset;
  std::string model;  // a GGUF file whose metadata gives the geometry
  std::string dense_layers, recurrent_layers, kv_heads, head_dim, dtype, recurrent_state_bytes;
  std::string host_pool, device_pool, headroom;
  std::string page_tokens, tile_tokens, tiles, max_context, max_seqs, chunk_tokens;
  std::string floor_pages, target_pages, burst_pages, promoted_pages, queue_max;
  std::string retained_histories;
  std::string prefix_cache;
  std::string state_checkpoint_pages;
  bool json = false;
  bool sparse = false;
};

int fail(const Error& error) {
  std::fprintf(stderr, "activekv plan: %s\n", error.describe().c_str());
  return exit_bad_settings;
}

// Parses an optional whole number into `out`; empty text keeps the default.
template <typename T>
Status count_into(const std::string& text, const char* setting, T& out) {
  if (text.empty()) return Status::success();
  Result<std::uint64_t> value = parse_count(text, setting);
  if (!value) return value.error();
  if (*value > static_cast<std::uint64_t>(static_cast<T>(~T{0}))) {
    return make_error(ErrorCode::invalid_argument, setting, "'" + text + "' is too large");
  }
  out = static_cast<T>(*value);
  return Status::success();
}

// The geometry and context of a GGUF file, from its metadata alone (the weights are not read).
Result<Preset> preset_of_file(const std::string& path) {
  Result<gguf::File> file = gguf::File::open(path);
  if (!file) return file.error();
  Result<engine::HParams> hp = engine::read_hparams(*file);
  if (!hp) return hp.error();
  if (hp->window_layers() != 0 && hp->layers > LayerKinds::layers_max) {
    return make_error(ErrorCode::unsupported, "--model",
                      fmt::format("{}: {} layers with window layers; the layer-kind table describes at most {}", path,
                                  hp->layers, LayerKinds::layers_max));
  }
  return Preset{"", engine::kv_geometry(*hp), hp->context_tokens};
}

Result<MemorySettings> settings_from(const PlanOptions& o) {
  MemorySettings s;
  s.sparse_summaries = o.sparse;
  std::uint32_t preset_context = 0;
  const bool any_geometry = !o.dense_layers.empty() || !o.kv_heads.empty() || !o.head_dim.empty() || !o.dtype.empty() ||
                            !o.recurrent_layers.empty() || !o.recurrent_state_bytes.empty();
  if (!o.model.empty() && !o.preset.empty()) {
    return make_error(ErrorCode::invalid_argument, "--model", "give a preset or a model file, not both");
  }
  if (!o.model.empty()) {
    Result<Preset> from_file = preset_of_file(o.model);
    if (!from_file) return from_file.error();
    s.geometry = from_file->geometry;
    preset_context = from_file->max_context_tokens;
  } else if (!o.preset.empty()) {
    Result<Preset> preset = find_preset(o.preset);
    if (!preset) return preset.error();
    s.geometry = preset->geometry;
    preset_context = preset->max_context_tokens;
  } else if (!any_geometry) {
    return make_error(ErrorCode::invalid_argument, "--preset",
                      "give a preset (smollm2-135m, llama-3.1-8b, hybrid-27b, gemma3-270m … gemma3-27b), a model "
                      "file (--model FILE.gguf) or the geometry: --dense-layers, "
                      "--kv-heads, --head-dim and --dtype");
  }
  if (Status st = count_into(o.dense_layers, "--dense-layers", s.geometry.dense_layers); !st) return st.error();
  if (Status st = count_into(o.recurrent_layers, "--recurrent-layers", s.geometry.recurrent_layers); !st) return st.error();
  if (Status st = count_into(o.kv_heads, "--kv-heads", s.geometry.kv_heads); !st) return st.error();
  if (Status st = count_into(o.head_dim, "--head-dim", s.geometry.head_dim); !st) return st.error();
  if (!o.dtype.empty()) {
    Result<DType> dtype = parse_dtype(o.dtype, "--dtype");
    if (!dtype) return dtype.error();
    s.geometry.dtype = *dtype;
  }
  if (!o.recurrent_state_bytes.empty()) {
    Result<std::uint64_t> bytes = parse_size(o.recurrent_state_bytes, "--recurrent-state-bytes", /*zero_allowed=*/true);
    if (!bytes) return bytes.error();
    s.geometry.recurrent_state_bytes = *bytes;
  }
  if (Status st = s.geometry.validate(); !st) return st.error();

  s.max_context_tokens = preset_context;
  if (Status st = count_into(o.max_context, "--max-context", s.max_context_tokens); !st) return st.error();
  if (s.max_context_tokens == 0) {
    return make_error(ErrorCode::invalid_argument, "--max-context", "give the longest context in tokens, e.g. 8192");
  }
  if (Status st = count_into(o.page_tokens, "--page-tokens", s.page_tokens); !st) return st.error();
  if (Status st = count_into(o.tile_tokens, "--tile-tokens", s.tile_tokens); !st) return st.error();
  if (Status st = count_into(o.tiles, "--tiles", s.tiles); !st) return st.error();
  if (Status st = count_into(o.max_seqs, "--max-seqs", s.max_seqs); !st) return st.error();
  if (Status st = count_into(o.chunk_tokens, "--chunk-tokens", s.chunk_tokens); !st) return st.error();
  if (Status st = count_into(o.floor_pages, "--floor-pages", s.floor_pages); !st) return st.error();
  if (Status st = count_into(o.target_pages, "--target-pages", s.target_pages); !st) return st.error();
  if (Status st = count_into(o.burst_pages, "--burst-pages", s.burst_pages); !st) return st.error();
  if (Status st = count_into(o.promoted_pages, "--promoted-pages", s.promoted_pages_per_layer); !st) return st.error();
  if (Status st = count_into(o.queue_max, "--queue-max", s.queue_max); !st) return st.error();
  if (!o.retained_histories.empty()) {  // the run configuration's bound, in its words
    Result<std::uint64_t> retained = parse_count(o.retained_histories, "--retained-histories");
    if (!retained) return retained.error();
    if (*retained > serve::retained_histories_max) {
      return make_error(ErrorCode::invalid_argument, "--retained-histories",
                        fmt::format("must be a whole number from 0 to {}, got {}: {}; lower --retained-histories",
                                    serve::retained_histories_max, o.retained_histories, serve::retained_histories_why));
    }
    s.retained_histories = static_cast<std::uint32_t>(*retained);
  }
  if (!o.state_checkpoint_pages.empty()) {
    Result<std::uint64_t> pages = parse_count(o.state_checkpoint_pages, "--state-checkpoint-pages");
    if (!pages) return pages.error();
    if (*pages > UINT32_MAX) {
      return make_error(ErrorCode::invalid_argument, "--state-checkpoint-pages",
                        fmt::format("{} pages does not fit 32 bits: use 0 (no K-page checkpoints) or a page count",
                                    o.state_checkpoint_pages));
    }
    s.state_checkpoint_pages = static_cast<std::uint32_t>(*pages);
    s.state_checkpoints = true;  // the plan of a runtime with prefix reuse on
  }
  if (!o.prefix_cache.empty()) {
    Result<std::uint64_t> bytes = parse_size(o.prefix_cache, "--prefix-cache", /*zero_allowed=*/true);
    if (!bytes) return bytes.error();
    s.prefix_cache_bytes = *bytes;
  }
  if (!o.headroom.empty()) {
    Result<std::uint64_t> bytes = parse_size(o.headroom, "--headroom", /*zero_allowed=*/true);
    if (!bytes) return bytes.error();
    s.headroom_bytes = *bytes;
  }
  if (o.host_pool.empty()) {
    return make_error(ErrorCode::invalid_argument, "--host-pool",
                      "give the pinned host pool's size explicitly, e.g. --host-pool 64GiB");
  }
  Result<std::uint64_t> host = parse_size(o.host_pool, "--host-pool");
  if (!host) return host.error();
  s.host_pool_bytes = *host;
  Result<std::uint64_t> device = parse_device_pool(o.device_pool.empty() ? "auto" : o.device_pool, s);
  if (!device) return device.error();
  s.device_pool_bytes = *device;
  return s;
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<PlanOptions>();
  sub.add_option("--preset", o->preset,
                 "smollm2-135m, llama-3.1-8b, hybrid-27b, gemma3-270m, gemma3-1b, gemma3-4b, gemma3-12b or gemma3-27b");
  sub.add_option("--model", o->model, "a GGUF file: the geometry, window layers and context from its metadata");
  sub.add_option("--dense-layers", o->dense_layers, "attention layers whose KV grows per token");
  sub.add_option("--recurrent-layers", o->recurrent_layers, "recurrent (SSM) layers");
  sub.add_option("--kv-heads", o->kv_heads, "KV heads per dense layer");
  sub.add_option("--head-dim", o->head_dim, "elements per head");
  sub.add_option("--dtype", o->dtype, "f32, f16 or bf16");
  sub.add_option("--recurrent-state-bytes", o->recurrent_state_bytes, "recurrent state per context (e.g. 147MiB)");
  sub.add_option("--host-pool", o->host_pool, "pinned host pool holding every context's history (e.g. 64GiB)");
  sub.add_option("--device-pool", o->device_pool, "the device arena: tiles + pages + recurrent slots + headroom");
  sub.add_option("--headroom", o->headroom, "revocable part of the device pool (default 0)");
  sub.add_option("--retained-histories", o->retained_histories,
                 fmt::format("host histories beyond the concurrency that only keep retained prefixes (0 to {}, default 0; "
                             "docs/PREFIX.md)",
                             serve::retained_histories_max));
  sub.add_option("--prefix-cache", o->prefix_cache,
                 "the host prefix cache's part of the host pool (default 0: none; docs/PREFIX_CACHE.md)");
  sub.add_option("--state-checkpoint-pages", o->state_checkpoint_pages,
                 "hybrid models: keep a recurrent-state checkpoint every K pages per history, for prefix reuse "
                 "(default 0: only the prompt's and the newest page boundary's)");
  sub.add_option("--page-tokens", o->page_tokens, "tokens per page (default 16)");
  sub.add_option("--tile-tokens", o->tile_tokens, "tokens per staging tile (default min(32768, max context))");
  sub.add_option("--tiles", o->tiles, "staging tiles (default 2)");
  sub.add_option("--max-context", o->max_context, "longest context in tokens (default: the preset's)");
  sub.add_option("--max-seqs", o->max_seqs, "contexts the operator allows at once (default 1)");
  sub.add_option("--chunk-tokens", o->chunk_tokens, "most tokens one context appends per step (default 256)");
  sub.add_option("--floor-pages", o->floor_pages, "per-context floor in pages across dense layers (default: the minimum)");
  sub.add_option("--target-pages", o->target_pages, "per-context target (default: an even share of the pool)");
  sub.add_option("--burst-pages", o->burst_pages, "per-context burst (default: what a max-length context can use)");
  sub.add_option("--promoted-pages", o->promoted_pages, "promoted pages per layer a policy may keep (default 32)");
  sub.add_option("--queue-max", o->queue_max, "requests that may wait at once (default 1024)");
  sub.add_flag("--json", o->json, "print the plan as JSON");
  sub.add_flag("--sparse", o->sparse, "with sparse attention: show the page summaries it keeps (docs/SPARSE.md)");
  return [o]() -> int {
    Result<MemorySettings> settings = settings_from(*o);
    if (!settings) return fail(settings.error());
    Result<MemoryPlan> plan = make_memory_plan(*settings);
    if (!plan) return fail(plan.error());
    const std::string out = o->json ? memory_plan_json(*plan) + "\n" : format_memory_plan(*plan);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  };
}

Registration registration{"plan", "Print the memory plan: host-pool formula, arena layout, concurrency and budgets", 10,
                          setup};

}  // namespace

}  // namespace activekv::cli
