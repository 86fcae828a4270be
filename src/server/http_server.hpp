// http_server.hpp — the OpenAI-compatible HTTP adapter over a ServeCore (cpp-httplib).
//
// Thin by design: each handler parses the body (api_request.hpp), renders and
// tokenizes the prompt, submits to the ServeCore and turns what comes back into
// OpenAI JSON or server-sent events. It never touches the scheduler or the
// engine's step path. Routes: POST /v1/chat/completions, POST /v1/completions,
// GET /v1/models, GET /health, GET /metrics, GET /v1/activekv/plan,
// GET /v1/activekv/explain/{request_id}; another method on a known path gets
// 405, an unknown path 404, each with an OpenAI-style error object.
//
// The server binds before the model loads, so /health answers 503 while it
// loads; attach() hands it the engine and core once warm-up is done.
// Connections wait in a ConnectionGate until a whole request has arrived, so
// a slow or idle client holds no worker thread; /health and /metrics have
// threads of their own. HTTP threads are marked as I/O threads
// (testing/alloc_counter.hpp) so their allocations are not counted as the step path's.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "activekv/result.hpp"
#include "serve/step_engine.hpp"
#include "server/api_request.hpp"
#include "server/connection_gate.hpp"
#include "server/serve_core.hpp"

namespace httplib {
class Server;
}

namespace activekv::server {

// What the model brings to the adapter: its chat format and its stop tokens.
// render_chat's error (a model whose template ActiveKV does not render, or messages
// the template refuses) is the 400 the chat request gets; completions never use it.
struct Frontend {
  std::string model_name;                                          // what /v1/models lists
  std::function<Result<std::string>(const std::vector<ApiMessage>&)> render_chat;
  serve::StopTokens chat_stop_tokens = serve::no_stop_tokens;        // e.g. EOS, EOT and <|im_end|>
  serve::StopTokens completion_stop_tokens = serve::no_stop_tokens;  // the same: every end-of-generation token
  std::uint32_t default_max_tokens = 512;                          // when a request gives none
};

struct HttpSettings {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port
  GateSettings gate{};             // worker threads, connection caps, read time-outs (connection_gate.hpp)
  ApiLimits limits{};
};

class HttpServer {
 public:
  explicit HttpServer(const HttpSettings& settings);
  ~HttpServer();

  // Binds the socket; returns the port (the chosen one for port 0).
  Result<int> bind();
  // Serves until stop(); call on a thread of its own.
  void listen();
  // Stops accepting; listen() returns once every open handler has returned.
  void stop();
  // Warm-up done: the handlers may use the engine and the core from now on.
  void attach(serve::StepEngine& engine, ServeCore& core, Frontend frontend);

  struct State;

 private:
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<ConnectionGate> gate_;
  std::shared_ptr<State> state_;
  HttpSettings settings_;
};

}  // namespace activekv::server
