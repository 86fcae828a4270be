// serve_command.cpp — `activekv serve`: an OpenAI-compatible HTTP server over the run's scheduler and memory plan.
//
//   activekv serve --port 8080           then: curl http://127.0.0.1:8080/v1/chat/completions -d '{...}'
//
// Same configuration as `activekv run` (configs/default.json built in, --config
// FILE, the same overrides), plus max_queue and shutdown_grace_s (docs/SERVE.md).
// It binds first (so /health answers 503 while the model loads), prints the
// memory plan and the admission line exactly as `run` does, then the address
// it listens on. SIGINT/SIGTERM: refuse new requests (503), let what runs finish for the
// grace period, cancel the rest, check every page and history came back,
// print `run`'s summary and exit 0 (1 when something did not come back or a
// step allocated; 2 for bad settings or a port that cannot be bound).
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "activekv/assert.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/size.hpp"
#include "cli/command.hpp"
#include "cli/run_overrides.hpp"
#include "serve/clock.hpp"
#include "serve/fake_engine.hpp"
#include "serve/run_config.hpp"
#include "serve/run_job.hpp"
#include "serve/run_report.hpp"
#include "server/http_server.hpp"
#include "server/serve_core.hpp"
#include "testing/alloc_counter.hpp"

#ifdef ACTIVEKV_SERVE_HAS_ENGINE
#include "gguf/gguf.hpp"
#include "serve/engine_step_engine.hpp"
#include "tokenizer/chat_template.hpp"
#endif

namespace activekv::cli {

namespace {

struct ServeOptions : RunOverrides {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::int64_t max_queue = 0;
  double grace_s = 0;
  std::uint32_t http_threads = 64;
  std::uint32_t max_connections = 256;
  std::uint32_t max_connections_per_client = 64;
  double request_timeout_s = 10;
  double fake_step_ms = 0;
  CLI::Option* max_queue_given = nullptr;
  CLI::Option* grace_given = nullptr;
};

int fail(const Error& error, int code) {
  std::fprintf(stderr, "activekv serve: %s\n", error.describe().c_str());
  return code;
}

// The configuration: the file (or the default), the overrides shared with `run`, then serve's own.
Result<serve::RunConfig> load_config(const ServeOptions& o) {
  return load_run_config(o, [&](serve::RunConfig& c) -> Status {
    if (given(o.max_queue_given)) {
      if (o.max_queue < 0 || o.max_queue > 4096) {
        return make_error(ErrorCode::invalid_argument, "--max-queue",
                          fmt::format("{} is out of range: give 0 to 4096", o.max_queue));
      }
      c.max_queue = static_cast<std::uint32_t>(o.max_queue);
    }
    if (given(o.grace_given)) {
      if (!(o.grace_s >= 0 && o.grace_s <= 3600)) {
        return make_error(ErrorCode::invalid_argument, "--grace",
                          fmt::format("{} is out of range: give a finite number of seconds from 0 to 3600", o.grace_s));
      }
      c.shutdown_grace_s = o.grace_s;
    }
    if (c.max_queue > 4096) {
      return make_error(ErrorCode::invalid_argument, o.config_source() + ": max_queue",
                        fmt::format("{} is out of range: give 0 to 4096", c.max_queue));
    }
    return {};
  });
}

struct Loaded {
  std::unique_ptr<serve::StepEngine> engine;
  server::Frontend frontend;
  std::string chat_line;  // what startup prints about the chat format and the stop tokens
};

Result<std::string> plain_chat(const std::vector<server::ApiMessage>& messages) {
  std::string text;
  for (const server::ApiMessage& m : messages) text += m.role + ": " + m.content + "\n";
  return text + "assistant: ";
}

#ifdef ACTIVEKV_SERVE_HAS_ENGINE
// The end-of-turn token each family's template writes after a turn: generation stops on it.
std::string_view end_of_turn_text(tokenizer::ChatFamily family) {
  switch (family) {
    case tokenizer::ChatFamily::chatml: return "<|im_end|>";
    case tokenizer::ChatFamily::llama3: return "<|eot_id|>";
    case tokenizer::ChatFamily::gemma: return "<end_of_turn>";
    case tokenizer::ChatFamily::mistral: return "";  // a turn ends with EOS
    case tokenizer::ChatFamily::unsupported: return "";
  }
  return "";
}

// The chat side of the model: its template, recognised from tokenizer.chat_template, renders
// chats in the model's own format; a template of no family ActiveKV renders, or none at all
// (a base model), turns every chat request into a 400 that says so, while completions work.
// Generation stops, besides on EOS, on the file's EOT id and on the family's end-of-turn token.
Status chat_frontend(const gguf::File& file, serve::StepEngine& engine, server::Frontend& frontend, std::string& line) {
  auto chat = tokenizer::ChatTemplate::recognise(file);
  if (!chat) return chat.error();
  std::vector<std::int32_t> stops;  // distinct ids
  const auto add_stop = [&](std::int32_t id) {
    if (id >= 0 && std::find(stops.begin(), stops.end(), id) == stops.end()) stops.push_back(id);
  };
  add_stop(engine.plan().eos_token);
  if (file.has("tokenizer.ggml.eot_token_id")) {
    Result<std::uint32_t> eot = file.get_u32("tokenizer.ggml.eot_token_id");
    if (!eot) return eot.error();
    if (*eot <= static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) add_stop(static_cast<std::int32_t>(*eot));
  }
  const std::string_view marker = end_of_turn_text(chat->family());
  if (!marker.empty()) {
    if (auto t = engine.encode(marker); t && t->size() == 1) add_stop((*t)[0]);
  }
  AK_ASSERT(stops.size() <= serve::no_stop_tokens.size(), "EOS, EOT and one end-of-turn token at most");
  serve::StopTokens stop_tokens = serve::no_stop_tokens;
  std::copy(stops.begin(), stops.end(), stop_tokens.begin());
  frontend.chat_stop_tokens = stop_tokens;
  frontend.completion_stop_tokens = stop_tokens;
  std::string stop_names = stops.empty() ? std::string("max_tokens only (the file names no EOS)") : std::string();
  for (std::int32_t id : stops) {
    stop_names += fmt::format("{}{} ({})", stop_names.empty() ? "" : ", ", engine.decode(std::span<const std::int32_t>(&id, 1)), id);
  }

  if (chat->supported()) {
    line = fmt::format("chat       {} template (tokenizer.chat_template); generation stops on {}\n",
                       tokenizer::chat_family_name(chat->family()), stop_names);
    frontend.render_chat = [chat = std::move(chat).value()](const std::vector<server::ApiMessage>& messages) -> Result<std::string> {
      std::vector<tokenizer::ChatMessage> m;
      m.reserve(messages.size());
      for (const server::ApiMessage& x : messages) m.push_back(tokenizer::ChatMessage{x.role, x.content});
      if (Status s = chat.accepts(m); !s) return make_error(ErrorCode::invalid_argument, "messages", "messages: " + s.error().message);
      return chat.render(m, true);
    };
    return {};
  }
  std::string refusal;
  if (!file.has("tokenizer.chat_template")) {
    refusal = "the model has no chat template (its file has no tokenizer.chat_template: a base model); "
              "use /v1/completions with a prompt you format yourself";
  } else {
    Result<std::string_view> jinja = file.get_string("tokenizer.chat_template");
    if (!jinja) return jinja.error();
    std::size_t cut = std::min<std::size_t>(jinja->size(), 60);
    while (cut > 0 && cut < jinja->size() && (static_cast<unsigned char>((*jinja)[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
    std::string head(jinja->substr(0, cut));
    for (char& c : head) {
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    }
    refusal = fmt::format("the model's chat template is not one ActiveKV renders (it begins '{}'{}; ActiveKV renders "
                          "ChatML, Llama 3, Gemma and Mistral Nemo templates); use /v1/completions",
                          head, cut < jinja->size() ? "..." : "");
  }
  line = fmt::format("chat       not served: {}; generation stops on {}\n", chat->reason(), stop_names);
  frontend.render_chat = [refusal](const std::vector<server::ApiMessage>&) -> Result<std::string> {
    return make_error(ErrorCode::unsupported, "messages", refusal);
  };
  return {};
}
#endif

Result<Loaded> load_engine(const ServeOptions& o, const serve::RunConfig& c) {
  Loaded l;
  if (o.engine == "fake") {
    auto fc = fake_engine_config(c);
    if (!fc) return fc.error();
    fc->wall_sleep_s = o.fake_step_ms / 1000.0;
    l.engine = std::make_unique<serve::FakeEngine>(*fc);
    l.frontend.model_name = "fake";
    l.frontend.render_chat = plain_chat;
    return l;
  }
  if (o.engine != "model") {
    return make_error(ErrorCode::invalid_argument, "--engine", fmt::format("unknown engine \"{}\" (model or fake)", o.engine));
  }
#ifdef ACTIVEKV_SERVE_HAS_ENGINE
  auto path = model_path(c);
  if (!path) return path.error();
  // The engine first: it checks the file and the model's values, with run's messages.
  auto e = serve::EngineStepEngine::create(serve::EngineStepEngineSettings{c, *path, o.backend});
  if (!e) return e.error();
  auto file = gguf::File::open(*path);
  if (!file) return file.error();
  l.engine = std::move(e).value();
  l.frontend.model_name = std::filesystem::path(*path).stem().string();
  if (Status s = chat_frontend(*file, *l.engine, l.frontend, l.chat_line); !s) return s.error();
  return l;
#else
  return make_error(ErrorCode::unsupported, "--engine", "this build has no model engine (src/engine); use --engine fake");
#endif
}

// The connection gate's limits (server/connection_gate.hpp): each open connection is a descriptor,
// so the cap must fit the process's open-file limit with room for the model and the listener.
Status check_connection_limits(const ServeOptions& o) {
  constexpr std::uint32_t descriptors_reserved = 64;
  if (o.max_connections < 1 || o.max_connections > 65536) {
    return make_error(ErrorCode::invalid_argument, "--max-connections", fmt::format("{} is out of range: give 1 to 65536", o.max_connections));
  }
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
      o.max_connections + descriptors_reserved > nofile.rlim_cur) {
    return make_error(ErrorCode::invalid_argument, "--max-connections",
                      fmt::format("{} connections need {} open files, but this process may open {} (ulimit -n): lower "
                                  "--max-connections or raise ulimit -n",
                                  o.max_connections, o.max_connections + descriptors_reserved, nofile.rlim_cur));
  }
  if (o.max_connections_per_client < 1 || o.max_connections_per_client > o.max_connections) {
    return make_error(ErrorCode::invalid_argument, "--max-connections-per-client",
                      fmt::format("{} is out of range: give 1 to --max-connections ({})", o.max_connections_per_client,
                                  o.max_connections));
  }
  if (!(o.request_timeout_s >= 0.1 && o.request_timeout_s <= 3600)) {
    return make_error(ErrorCode::invalid_argument, "--request-timeout",
                      fmt::format("{} is out of range: give a finite number of seconds from 0.1 to 3600", o.request_timeout_s));
  }
  return {};
}

int serve_main(const ServeOptions& o) {
  // SIGINT and SIGTERM go to one watcher thread (sigwait), never to a handler thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto config = load_config(o);
  if (!config) return fail(config.error(), 2);
  if (Status s = check_pools_fit_machine(o, *config); !s) return fail(s.error(), 2);
  if (o.port < 0 || o.port > 65535) {
    return fail(make_error(ErrorCode::invalid_argument, "--port", fmt::format("{} is not a port (0 to 65535; 0: any free one)", o.port)), 2);
  }
  if (o.http_threads < 2 || o.http_threads > 1024) {
    return fail(make_error(ErrorCode::invalid_argument, "--http-threads", "must be from 2 to 1024"), 2);
  }
  if (Status s = check_connection_limits(o); !s) return fail(s.error(), 2);
  if (!(o.fake_step_ms >= 0 && o.fake_step_ms <= 1000)) {
    return fail(make_error(ErrorCode::invalid_argument, "--fake-step-ms", "must be from 0 to 1000"), 2);
  }
  server::HttpSettings hs;
  hs.host = o.host;
  hs.port = o.port;
  hs.gate.workers = o.http_threads;
  hs.gate.max_connections = o.max_connections;
  hs.gate.max_connections_per_client = o.max_connections_per_client;
  hs.gate.request_timeout_s = o.request_timeout_s;
  hs.limits.max_tokens_max = config->max_context_tokens != 0 ? config->max_context_tokens : 8192;
  server::HttpServer http(hs);
  auto port = http.bind();
  if (!port) return fail(port.error(), 2);
  std::thread listener([&] { http.listen(); });

  auto loaded = [&] {
    AllocationScope warm_up("the host pool, the device arena and the engine's buffers (--host-pool, --device-pool, "
                            "--step-tokens, max_context)");
    return load_engine(o, *config);
  }();
  if (!loaded) {
    http.stop();
    listener.join();
    return fail(loaded.error(), 2);
  }
  serve::StepEngine& engine = *loaded->engine;
  serve::WallClock clock;
  auto core = server::ServeCore::create(engine, clock, server::ServeCoreSettings{*config, config->max_queue});
  if (!core) {
    http.stop();
    listener.join();
    return fail(core.error(), 2);
  }
  fmt::print("{}", engine.plan_text());
  fmt::print("{}", serve::admission_text(engine.plan(), *config));
  fmt::print("{}", loaded->chat_line);
  // From here this thread only attaches, prints and waits: it allocates beside the engine
  // thread like the HTTP threads do, so it is left out of the step path's count as they are.
  testing::mark_io_thread();
  (*core)->start();
  http.attach(engine, **core, loaded->frontend);
  fmt::print("listening on http://{}:{} ({} request slots: {} running + max_queue {}; shutdown grace {} s)\n", o.host, *port,
             (*core)->slots(), (*core)->slots() - config->max_queue, config->max_queue, config->shutdown_grace_s);
  std::fflush(stdout);

  std::thread watcher([&] {
    testing::mark_io_thread();
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "activekv serve: %s: no new requests; finishing what runs (grace %.1f s)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", config->shutdown_grace_s);
    // New requests get 503 from now; streams in flight end with their last chunk and [DONE]
    // (httplib's stop() would cut them mid-stream, so the listener closes after the drain).
    (*core)->close();
    (*core)->drain(config->shutdown_grace_s);
    http.stop();
  });
  listener.join();
  watcher.join();

  nlohmann::json figures = (*core)->figures(loaded->frontend.model_name,
                                            o.config.empty() ? "configs/default.json (built in)" : o.config);
  engine.release_retained();  // the engine thread has stopped: retained device pages go back
  const bool returned = engine.all_returned();
  figures["all_returned"] = returned;
  fmt::print("{}", serve::summary_text(figures));
  fmt::print("returned   every page and history back: {}\n", returned ? "yes" : "NO");
  std::fflush(stdout);
  if (Status s = (*core)->engine_status(); !s) return fail(s.error(), 1);
  if (!returned || figures["allocations_after_warmup"]["device"].get<std::uint64_t>() != 0 ||
      figures["allocations_after_warmup"]["heap"].get<std::uint64_t>() != 0) {
    std::fprintf(stderr, "activekv serve: warning: %s\n",
                 returned ? "allocations after warm-up were not zero" : "not every page and history was returned");
    return 1;
  }
  return 0;
}

Action setup(CLI::App& sub) {
  auto o = std::make_shared<ServeOptions>();
  sub.add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub.add_option("--port", o->port, "Port to listen on (0: any free port)")->capture_default_str();
  o->add_to(sub);
  o->max_queue_given =
      sub.add_option("--max-queue", o->max_queue, "Override max_queue: requests that may wait beyond the running ones");
  o->grace_given =
      sub.add_option("--grace", o->grace_s, "Override shutdown_grace_s: seconds to finish running requests on SIGINT/SIGTERM");
  sub.add_option("--http-threads", o->http_threads, "HTTP worker threads (each request being answered holds one; a stream for its whole length)")->capture_default_str();
  sub.add_option("--max-connections", o->max_connections, "Open client connections in all; one more gets 503 and is closed")->capture_default_str();
  sub.add_option("--max-connections-per-client", o->max_connections_per_client,
                 "Open connections from one client address; one more gets 503 and is closed")->capture_default_str();
  sub.add_option("--request-timeout", o->request_timeout_s,
                 "Seconds to read a request whole (header and body) from a connection's arrival; then 408")->capture_default_str();
  sub.add_option("--fake-step-ms", o->fake_step_ms, "With --engine fake: milliseconds each step takes (paces load tests)");
  return [o] { return serve_main(*o); };
}

Registration reg{"serve", "Serve an OpenAI-compatible HTTP API over the scheduler and memory plan", 25, setup};

}  // namespace

}  // namespace activekv::cli
