// http_server.cpp — routes, OpenAI JSON and server-sent events over a ServeCore (see http_server.hpp).
#include "server/http_server.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/peer_socket.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::server {

using nlohmann::json;

namespace {

// Text decoded from tokens may end inside a multi-byte character: the length of the complete prefix.
std::size_t complete_utf8(const std::string& text) {
  std::size_t i = text.size();
  for (std::size_t back = 0; back < 4 && i > 0; ++back) {
    const auto c = static_cast<unsigned char>(text[i - 1]);
    if ((c & 0xC0) == 0x80) {  // continuation byte: keep looking for the lead
      --i;
      continue;
    }
    const std::size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    const std::size_t have = text.size() - (i - 1);
    return have >= need ? text.size() : i - 1;
  }
  return text.size();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& param,
                const std::string& message, const char* code = nullptr) {
  json e = {{"error", {{"message", message}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
                       {"code", code == nullptr ? json(nullptr) : json(code)}}}};
  res.status = status;
  res.set_content(dump(e), "application/json");
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// httplib's accept loop hands each socket to process_and_close_socket on a task queue. Here the
// queue runs it at once on the accept thread, and the override passes the socket to the gate,
// which reads the request whole and then lets a worker answer it with process_request.
class GatedServer final : public httplib::Server {
 public:
  void set_gate(ConnectionGate* gate) { gate_ = gate; }
  bool answer(httplib::Stream& stream, bool close, bool& closed) { return process_request(stream, close, closed, nullptr); }
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of connections
  // beyond it has its SYNs dropped and retried a second later. Listening again widens the queue.
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    gate_->admit(sock);
    return true;
  }
  ConnectionGate* gate_ = nullptr;
};

// The "task queue" httplib makes per listen(): runs the hand-over inline; shutdown shuts the gate.
class GateQueue final : public httplib::TaskQueue {
 public:
  explicit GateQueue(ConnectionGate* gate) : gate_(gate) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override { gate_->shutdown(); }

 private:
  ConnectionGate* gate_;
};

}  // namespace

struct HttpServer::State {
  std::atomic<bool> ready{false};
  ConnectionGate* gate = nullptr;
  serve::StepEngine* engine = nullptr;
  ServeCore* core = nullptr;
  Frontend frontend;
  std::string plan_json;
  ApiLimits limits;
};

namespace {

using State = HttpServer::State;

// One completion request from submission to release; shared by a stream's provider and releaser.
struct Exchange {
  State* state = nullptr;
  ApiRequest request;
  Ticket ticket{};
  bool released = false;
  std::string id;
  std::int64_t created = 0;
  std::vector<std::int32_t> tokens;  // output tokens so far
  std::string text;                  // decoded, complete characters
  std::size_t sent = 0;              // bytes of text already streamed
  bool stopped_by_string = false;
  bool role_sent = false;
  bool finished = false;
  Progress progress{};
  std::size_t hold_back = 0;         // longest stop string - 1: not streamed until it cannot start a stop string
  std::chrono::steady_clock::time_point received{};  // the handler's start: the request read and parsed by httplib
  bool text_written = false;         // the first chunk with text has gone out (its time is on /metrics)

  // Finds a stop string in the text; truncates there. True when one was found.
  bool apply_stop_strings() {
    std::size_t cut = std::string::npos;
    for (const std::string& s : request.stop) cut = std::min(cut, text.find(s));
    if (cut == std::string::npos) return false;
    text.resize(cut);
    return true;
  }
  // Decodes every output token (but a final stop token) into text.
  void decode() {
    std::size_t n = tokens.size();
    if (progress.ended && progress.hit_stop_token && n > 0) --n;
    // Decoding all tokens again each time keeps the text exact: a character split across
    // tokens decodes as U+FFFD (the real tokenizer) or as a partial byte sequence (the
    // fake engine) until its last byte arrives, so while the request runs that tail is held back.
    text = state->engine->decode(std::span<const std::int32_t>(tokens.data(), n));
    if (!progress.ended) {
      std::size_t keep = complete_utf8(text);
      static constexpr char replacement[] = "\xEF\xBF\xBD";
      if (text.size() >= 3 && text.compare(text.size() - 3, 3, replacement) == 0) keep = std::min(keep, text.size() - 3);
      text.resize(keep);
    }
  }
  // Waits for tokens or the end; handles stop strings by cancelling. Returns true once ended.
  bool step(std::chrono::milliseconds timeout) {
    progress = state->core->wait(ticket, &tokens, timeout);
    decode();  // from every token again, so the cut below is applied to each new text
    if (apply_stop_strings() && !stopped_by_string) {
      stopped_by_string = true;
      state->core->stop_at_string(ticket);
    }
    return progress.ended;
  }
  void finish_and_release() {
    if (released) return;
    if (!progress.ended) state->core->cancel(ticket);
    while (!progress.ended) progress = state->core->wait(ticket, &tokens, std::chrono::milliseconds(100));
    state->core->release(ticket);
    released = true;
  }
  const char* finish_reason() const {
    if (stopped_by_string || progress.hit_stop_token) return "stop";
    return "length";
  }
  json usage() const {
    const std::size_t completion = tokens.size() - (progress.hit_stop_token && !tokens.empty() ? 1 : 0);
    return {{"prompt_tokens", progress.prompt_tokens},
            {"completion_tokens", completion},
            {"total_tokens", progress.prompt_tokens + completion},
            {"prompt_tokens_details", {{"cached_tokens", progress.cached_tokens}}}};
  }
  json chunk(const json& delta_or_text, const char* finish) const {
    const bool chat = request.kind == ApiKind::chat;
    json choice = {{"index", 0}, {"finish_reason", finish == nullptr ? json(nullptr) : json(finish)}, {"logprobs", nullptr}};
    if (chat) {
      choice["delta"] = delta_or_text;
    } else {
      choice["text"] = delta_or_text;
    }
    return {{"id", id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", state->frontend.model_name},
            {"choices", json::array({choice})}};
  }
};

void handle_completion(State& st, const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  const auto received = std::chrono::steady_clock::now();
  if (!st.ready.load()) return send_error(res, 503, "server_error", "", "the model is still loading; retry shortly");
  ServeCore& core = *st.core;
  auto parsed = parse_api_request(req.body, kind, st.limits);
  if (!parsed) {
    core.count_bad_request();
    const Error& e = parsed.error();
    return send_error(res, e.code == ErrorCode::exhausted ? 413 : 400, "invalid_request_error", e.setting, e.describe());
  }
  auto ex = std::make_shared<Exchange>();
  ex->state = &st;
  ex->received = received;
  ex->request = std::move(parsed).value();
  ApiRequest& r = ex->request;
  if (!r.model.empty() && r.model != st.frontend.model_name) {
    core.count_bad_request();
    return send_error(res, 404, "invalid_request_error", "model",
                      fmt::format("model: the model \"{}\" does not exist here; this server serves \"{}\"", r.model,
                                  st.frontend.model_name),
                      "model_not_found");
  }
  std::string text;
  if (kind == ApiKind::chat) {
    Result<std::string> rendered = st.frontend.render_chat(r.messages);
    if (!rendered) {
      core.count_bad_request();
      return send_error(res, 400, "invalid_request_error", "messages", rendered.error().message);
    }
    text = std::move(rendered).value();
  } else {
    text = r.prompt;
  }
  auto encoded = st.engine->encode(text);
  if (!encoded) {
    core.count_bad_request();
    return send_error(res, 400, "invalid_request_error", kind == ApiKind::chat ? "messages" : "prompt",
                      encoded.error().describe());
  }
  const std::vector<std::int32_t>& prompt = *encoded;
  const std::uint32_t max_context = core.max_context_tokens();
  if (prompt.size() >= max_context) {
    core.count_bad_request();
    return send_error(res, 400, "invalid_request_error", kind == ApiKind::chat ? "messages" : "prompt",
                      fmt::format("the prompt is {} tokens; the max context is {} tokens, which must also hold at least "
                                  "one generated token",
                                  prompt.size(), max_context));
  }
  const std::uint32_t max_tokens =
      r.max_tokens ? *r.max_tokens
                   : std::min<std::uint32_t>(st.frontend.default_max_tokens, max_context - static_cast<std::uint32_t>(prompt.size()));
  for (const std::string& s : r.stop) ex->hold_back = std::max(ex->hold_back, s.size() - 1);
  SubmitSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = max_tokens;
  spec.sampling = serve::SamplingSettings{r.seed, r.temperature, r.top_p};
  spec.stop_tokens = kind == ApiKind::chat ? st.frontend.chat_stop_tokens : st.frontend.completion_stop_tokens;
  auto ticket = core.submit(spec);
  if (!ticket) {
    const Error& e = ticket.error();
    if (e.code == ErrorCode::exhausted) {
      res.set_header("Retry-After", "1");
      return send_error(res, 429, "rate_limit_exceeded", "", e.message, "queue_full");
    }
    if (e.code == ErrorCode::unsupported) return send_error(res, 503, "server_error", "", e.message);
    core.count_bad_request();
    return send_error(res, 400, "invalid_request_error", e.setting, e.describe(), "context_length_exceeded");
  }
  ex->ticket = *ticket;
  ex->id = fmt::format("{}-{}", kind == ApiKind::chat ? "chatcmpl" : "cmpl", ticket->serial);
  ex->created = unix_now();
  res.set_header("X-Request-Id", ex->id);

  if (!r.stream) {
    // httplib tells of a closed connection only on a write, and this answer is written once, at
    // the end: while the request runs, its socket (found once it has run a while) is peeked at,
    // and a client that has gone cancels the request as a stream's disconnect does.
    int socket = -2;  // not looked up yet; -1: not found
    bool client_gone = false;
    while (!ex->step(std::chrono::milliseconds(200))) {
      if (client_gone) continue;
      if (socket == -2) socket = find_connection_socket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
      if (socket >= 0 && peer_closed(socket)) {
        client_gone = true;
        core.cancel(ex->ticket);
      }
    }
    ex->finish_and_release();
    if (ex->progress.state == serve::RequestState::cancelled && !ex->stopped_by_string) {
      return send_error(res, 503, "server_error", "",
                        client_gone ? "the client closed the connection; the request was cancelled"
                                    : "the request was cancelled before it finished (the server is shutting down)");
    }
    json choice = {{"index", 0}, {"finish_reason", ex->finish_reason()}, {"logprobs", nullptr}};
    if (kind == ApiKind::chat) {
      choice["message"] = {{"role", "assistant"}, {"content", ex->text}};
    } else {
      choice["text"] = ex->text;
    }
    json body = {{"id", ex->id},
                 {"object", kind == ApiKind::chat ? "chat.completion" : "text_completion"},
                 {"created", ex->created},
                 {"model", st.frontend.model_name},
                 {"choices", json::array({choice})},
                 {"usage", ex->usage()}};
    res.set_content(dump(body), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [ex](std::size_t, httplib::DataSink& sink) {
        const auto send = [&](const json& j) {
          const std::string line = "data: " + dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        if (!ex->role_sent) {
          ex->role_sent = true;
          const json first = ex->request.kind == ApiKind::chat ? json{{"role", "assistant"}, {"content", ""}} : json("");
          if (!send(ex->chunk(first, nullptr))) return false;  // the client went away: the releaser cancels
        }
        const std::size_t had = ex->tokens.size();
        const bool ended = ex->step(std::chrono::milliseconds(500));
        if (ex->tokens.size() == had && !ended) {
          static constexpr char ping[] = ": waiting\n\n";  // an SSE comment: finds a closed connection while queued
          return sink.write(ping, sizeof(ping) - 1);
        }
        const std::size_t ready = ended || ex->stopped_by_string
                                      ? ex->text.size()
                                      : (ex->text.size() > ex->hold_back ? ex->text.size() - ex->hold_back : 0);
        if (ready > ex->sent || ex->tokens.size() > had) {
          const std::string piece = ex->text.substr(std::min(ex->sent, ex->text.size()), ready > ex->sent ? ready - ex->sent : 0);
          ex->sent = std::max(ex->sent, ready);
          const json delta = ex->request.kind == ApiKind::chat ? json{{"content", piece}} : json(piece);
          if (!piece.empty() && !send(ex->chunk(delta, nullptr))) return false;
          if (!piece.empty() && !ex->text_written) {
            ex->text_written = true;
            ex->state->core->observe_http_ttft(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - ex->received).count());
          }
        }
        if (!ended) return true;
        ex->finish_and_release();
        if (ex->progress.state == serve::RequestState::cancelled && !ex->stopped_by_string) {
          json err = {{"error", {{"message", "the request was cancelled before it finished (the server is shutting down)"},
                                 {"type", "server_error"}}}};
          send(err);
        } else {
          const json empty = ex->request.kind == ApiKind::chat ? json::object() : json("");
          if (!send(ex->chunk(empty, ex->finish_reason()))) return false;
          if (ex->request.include_usage) {
            json u = ex->chunk(empty, nullptr);
            u["choices"] = json::array();
            u["usage"] = ex->usage();
            if (!send(u)) return false;
          }
        }
        static constexpr char done[] = "data: [DONE]\n\n";
        sink.write(done, sizeof(done) - 1);
        sink.done();
        return true;
      },
      [ex](bool) { ex->finish_and_release(); });
}

}  // namespace

HttpServer::HttpServer(const HttpSettings& settings)
    : state_(std::make_shared<State>()), settings_(settings) {
  auto server = std::make_unique<GatedServer>();
  GatedServer* gated = server.get();
  GateSettings gs = settings.gate;
  // The gate reads a body up to 4x the parser's limit, so a body just above it gets the parser's
  // 413 naming the limit (counted as a bad request); a larger one gets the gate's 413.
  gs.frame.body_bytes_max = settings.limits.body_bytes_max * 4;
  gate_ = std::make_unique<ConnectionGate>(
      gs, [gated](httplib::Stream& stream, bool close, bool& closed) { return gated->answer(stream, close, closed); });
  gated->set_gate(gate_.get());
  http_ = std::move(server);
  state_->limits = settings.limits;
  state_->gate = gate_.get();
  httplib::Server& s = *http_;
  ConnectionGate* gate = gate_.get();
  s.new_task_queue = [gate] { return new GateQueue(gate); };
  s.set_payload_max_length(gs.frame.body_bytes_max);
  s.set_keep_alive_timeout(static_cast<time_t>(gs.idle_timeout_s));
  s.set_keep_alive_max_count(gs.requests_per_connection);
  s.set_write_timeout(static_cast<time_t>(gs.write_timeout_s));
  // Small SSE chunks go out at once: without TCP_NODELAY, Nagle holds a token chunk until the
  // client acknowledges the previous chunk, which a delayed ACK can put off by up to 40 ms.
  // Linux copies the option from the listening socket to every accepted one.
  s.set_tcp_nodelay(true);
  State* st = state_.get();

  s.Post("/v1/chat/completions",
         [st](const httplib::Request& req, httplib::Response& res) { handle_completion(*st, req, res, ApiKind::chat); });
  s.Post("/v1/completions",
         [st](const httplib::Request& req, httplib::Response& res) { handle_completion(*st, req, res, ApiKind::completion); });
  s.Get("/health", [st](const httplib::Request&, httplib::Response& res) {
    if (!st->ready.load()) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [st](const httplib::Request&, httplib::Response& res) {
    if (!st->ready.load()) return send_error(res, 503, "server_error", "", "the model is still loading; retry shortly");
    json body = {{"object", "list"},
                 {"data", json::array({{{"id", st->frontend.model_name},
                                        {"object", "model"},
                                        {"created", 0},
                                        {"owned_by", "activekv"},
                                        {"max_model_len", st->core->max_context_tokens()}}})}};
    res.set_content(dump(body), "application/json");
  });
  s.Get("/metrics", [st](const httplib::Request&, httplib::Response& res) {
    if (!st->ready.load()) {
      MetricsSnapshot loading;
      res.set_content(render_metrics(loading) + render_connection_metrics(st->gate->counters()), "text/plain; version=0.0.4");
      return;
    }
    res.set_content(render_metrics(st->core->metrics()) + render_connection_metrics(st->gate->counters()),
                    "text/plain; version=0.0.4");
  });
  s.Get("/v1/activekv/plan", [st](const httplib::Request&, httplib::Response& res) {
    if (!st->ready.load()) return send_error(res, 503, "server_error", "", "the model is still loading; retry shortly");
    res.set_content(st->plan_json, "application/json");
  });
  s.Get(R"(/v1/activekv/explain/([A-Za-z0-9_-]+))", [st](const httplib::Request& req, httplib::Response& res) {
    if (!st->ready.load()) return send_error(res, 503, "server_error", "", "the model is still loading; retry shortly");
    const std::string id = req.matches[1];
    const std::string digits = id.substr(id.rfind('-') == std::string::npos ? 0 : id.rfind('-') + 1);
    std::uint64_t serial = 0;
    bool ok = !digits.empty() && digits.size() <= 18;
    for (const char c : digits) ok = ok && c >= '0' && c <= '9';
    if (ok) serial = std::stoull(digits);
    auto x = ok ? st->core->explain(serial) : std::nullopt;
    if (!x) {
      return send_error(res, 404, "invalid_request_error", "request_id",
                        fmt::format("request_id: no request \"{}\" is held now (a request is explained while it runs "
                                    "and until its response is sent)",
                                    id));
    }
    (*x)["id"] = id;
    res.set_content(dump(*x), "application/json");
  });
  // A known path with another method: 405 naming the allowed one.
  const auto method_not_allowed = [](const char* allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      send_error(res, 405, "invalid_request_error", "method",
                 fmt::format("method: {} is not allowed on {}; use {}", req.method, req.path, allowed));
    };
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    s.Get(path, method_not_allowed("POST"));
    s.Put(path, method_not_allowed("POST"));
    s.Delete(path, method_not_allowed("POST"));
    s.Patch(path, method_not_allowed("POST"));
  }
  for (const char* path : {"/health", "/v1/models", "/metrics", "/v1/activekv/plan", R"(/v1/activekv/explain/([A-Za-z0-9_-]+))"}) {
    s.Post(path, method_not_allowed("GET"));
    s.Put(path, method_not_allowed("GET"));
    s.Delete(path, method_not_allowed("GET"));
    s.Patch(path, method_not_allowed("GET"));
  }
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      return send_error(res, 404, "invalid_request_error", "path", fmt::format("path: no endpoint {} {}", req.method, req.path));
    }
    send_error(res, res.status, "invalid_request_error", "", fmt::format("HTTP {}", res.status));
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, 500, "server_error", "", fmt::format("internal error: {}", what));
  });
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind() {
  const int port = settings_.port == 0 ? http_->bind_to_any_port(settings_.host)
                                       : (http_->bind_to_port(settings_.host, settings_.port) ? settings_.port : -1);
  if (port >= 0) static_cast<GatedServer&>(*http_).widen_backlog();
  if (port < 0) {
    return make_error(ErrorCode::io, "--port", fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)",
                                                           settings_.host, settings_.port));
  }
  return port;
}

void HttpServer::listen() {
  testing::mark_io_thread();
  gate_->start();
  http_->listen_after_bind();
}

void HttpServer::stop() {
  // httplib's stop() does nothing until listen() has started running: wait for it (listen()
  // is called on its own thread right after bind(), so this is a few milliseconds at most).
  for (int i = 0; i < 10000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
}

void HttpServer::attach(serve::StepEngine& engine, ServeCore& core, Frontend frontend) {
  state_->engine = &engine;
  state_->core = &core;
  state_->frontend = std::move(frontend);
  state_->plan_json = engine.plan_json();
  state_->ready.store(true);
}

}  // namespace activekv::server
