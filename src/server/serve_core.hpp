// serve_core.hpp — the engine thread and its bounded intake: live requests in, tokens out per request.
//
// One engine thread owns the Scheduler (live mode) and the StepEngine and
// loops: take submissions and cancellations from the intake, run one step,
// publish each request's new tokens to its slot, wake its waiter. HTTP handler
// threads (the adapter, http_server.hpp) parse, validate and tokenize, then
// submit() here; they never touch the scheduler. Every shared field is under
// one mutex; each slot has its own condition variable for its waiter.
//
// Slots. There are running concurrency + max_queue of them, one per request
// from submission until its handler releases it, each with prompt and output
// buffers reserved to the max context at creation: the engine thread copies
// into them and never allocates (its heap allocations are counted around every
// iteration, I/O threads excluded, and shown on /metrics). A submission when
// every slot is taken is refused with the reason (the server answers 429);
// one whose prompt + max_tokens exceed the max context is refused before
// it takes a slot (400).
//
// Cancellation: cancel() marks the slot; the engine thread cancels the request
// in the scheduler, which returns its pages and history through the engine's
// fenced cancel. Shutdown: close() refuses new submissions, drain() waits up
// to a grace period for what runs, cancels the rest and waits for them, then
// the engine thread exits and all_returned() says whether every page and
// history came back.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "activekv/result.hpp"
#include "serve/clock.hpp"
#include "serve/run_config.hpp"
#include "serve/scheduler.hpp"
#include "serve/step_engine.hpp"
#include "server/metrics.hpp"

namespace activekv::server {

struct ServeCoreSettings {
  serve::RunConfig config;
  std::uint32_t max_queue = 16;
};

struct Ticket {
  std::uint32_t slot = 0;
  std::uint64_t serial = 0;  // request number, 1 up: the request id's digits
};

struct SubmitSpec {
  std::span<const std::int32_t> prompt;
  std::uint32_t max_tokens = 0;
  serve::SamplingSettings sampling{};
  serve::StopTokens stop_tokens = serve::no_stop_tokens;
};

// What a waiter learns: tokens so far (copied out), and the end once there is one.
struct Progress {
  bool ended = false;
  serve::RequestState state = serve::RequestState::queued;  // finished, cancelled or rejected once ended
  serve::RejectReason reject_reason = serve::RejectReason::none;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t cached_tokens = 0;
  bool hit_stop_token = false;  // finished on EOS or a stop token (the last output token is it)
};

class ServeCore {
 public:
  // Builds the live scheduler (every buffer sized here); the engine and clock outlive the core.
  static Result<std::unique_ptr<ServeCore>> create(serve::StepEngine& engine, serve::Clock& clock,
                                                   const ServeCoreSettings& settings);
  ~ServeCore();
  ServeCore(const ServeCore&) = delete;
  ServeCore& operator=(const ServeCore&) = delete;

  // Warm-up ends: the clock restarts and the engine thread starts.
  void start();

  // HTTP threads. submit(): ErrorCode::exhausted (every slot taken: 429, message
  // says why), refused (longer than the max context: 400), unsupported (closing: 503).
  Result<Ticket> submit(const SubmitSpec& spec);
  // Waits until the request has more than out->size() output tokens or has
  // ended, or `timeout` passes; appends the new tokens to *out.
  Progress wait(const Ticket& ticket, std::vector<std::int32_t>* out, std::chrono::milliseconds timeout);
  void cancel(const Ticket& ticket);
  // The client's stop string appeared in the text: the request ends as cancel() ends it (its
  // pages and history return through the fenced path), but it is counted as finished, since
  // the client gets its text and finish_reason "stop".
  void stop_at_string(const Ticket& ticket);
  // The handler is done with the slot (after the end, or after cancel): reused from now on.
  void release(const Ticket& ticket);
  void count_bad_request();
  void count_queue_full();
  // The HTTP adapter's time to first token (request handed to it, to the first token's chunk written).
  void observe_http_ttft(double seconds);

  std::uint32_t max_context_tokens() const noexcept { return max_context_; }
  std::uint32_t slots() const noexcept { return slot_count_; }
  const serve::EnginePlan& plan() const noexcept { return engine_.plan(); }
  MetricsSnapshot metrics();
  // The request's state, wait reasons and (while it runs) its pages; nullopt when the serial is unknown or reused.
  std::optional<nlohmann::json> explain(std::uint64_t serial);

  // Shutdown, from the signal watcher: refuse new submissions; then wait up to
  // grace_s for the running and queued to end, cancel the rest, and stop the engine thread.
  void close();
  void drain(double grace_s);
  Status engine_status();  // a failed step, if any
  bool all_returned() const { return engine_.all_returned(); }
  // The figures `activekv run` prints at the end (summary_text reads them).
  nlohmann::json figures(const std::string& model, const std::string& config_source);

 private:
  struct Slot;
  ServeCore(serve::StepEngine& engine, serve::Clock& clock, const ServeCoreSettings& settings);
  void loop();
  void request_end(const Ticket& ticket, bool stopped_by_string);
  void publish();                        // under mu_
  void sample_pages();                   // engine thread, outside the counted window
  std::string busy_reason() const;       // under mu_

  serve::StepEngine& engine_;
  serve::Clock& clock_;
  ServeCoreSettings settings_;
  std::unique_ptr<serve::Scheduler> scheduler_;
  std::uint32_t max_context_ = 0;
  std::uint32_t slot_count_ = 0;

  mutable std::mutex mu_;
  std::condition_variable engine_cv_;
  std::unique_ptr<Slot[]> slots_;
  std::vector<std::uint32_t> intake_;     // ring of submitted slots
  std::size_t intake_head_ = 0, intake_count_ = 0;
  std::vector<std::uint32_t> cancels_;    // ring of slots to cancel
  std::size_t cancel_head_ = 0, cancel_count_ = 0;
  std::uint32_t in_use_ = 0;              // slots not free
  std::uint64_t next_serial_ = 1;
  bool closed_ = false;
  bool exit_ = false;
  Status status_{};
  MetricsSnapshot stats_;                 // levels refreshed by the engine thread
  std::uint64_t running_max_ = 0;
  std::uint64_t peak_host_bytes_ = 0, peak_device_bytes_ = 0;
  double last_pages_sample_s_ = -1;
  std::vector<std::optional<serve::ContextPages>> pages_scratch_;  // engine thread only: sampled before the lock
  double first_submit_s_ = -1, last_end_s_ = 0;
  std::vector<double> ttft_samples_, itl_samples_;  // reserved; for the end-of-run percentiles
  std::thread thread_;
};

}  // namespace activekv::server
