// scheduler.hpp — continuous batching: who runs this step, and with how many tokens.
//
// The picture. Requests arrive over time (a trace). An arrived request joins a
// FIFO queue; the head is admitted when the engine grants it a context (a free
// host-pool history and room for its floor in the device pool) and the
// scheduler's concurrency cap allows; otherwise the head records why it waits
// and everyone behind it waits "behind the head" (strict FIFO: a long request
// is never starved by short ones behind it). Each step composes one batch under
// a token budget: first one decode token for every context that is generating,
// then prompt chunks (at most prefill_chunk_tokens each) for contexts still in
// prefill, in admission order, until the budget is spent. Except: a context that
// adopted a retained prefix and has fed none of its suffix, which fits one chunk,
// goes first, and that step carries no other prefill and holds the other
// contexts' decode tokens for that one step, except a context held in the step
// before (never held twice in a row): its first token costs its own suffix only
// (docs/PREFIX.md, "The follow-up's first step"). So prefill is chunked
// and interleaved with decode, and a long prompt cannot stall the others'
// generation. A request that reaches max_tokens (or the end-of-sequence token)
// returns its context at once; a cancelled one returns it at any point (the
// engine honours outstanding fences).
//
// Sessions: a follow-up turn's prompt is its predecessor's prompt + answer +
// its own text. It joins the queue only once the predecessor has finished and
// it has arrived. With prefix reuse the engine's admission may adopt the
// predecessor's retained history (Admission::reused_tokens, whole pages) and
// prefill starts at that offset; outputs are bit-identical either way.
//
// Rejection happens only for what can never run: a prompt + max_tokens beyond
// the max context. Everything else waits and completes.
//
// Two ways in, one path. create() replays a trace known up front: each request
// joins the queue (make_ready) at its arrival time. create_live() serves
// requests submitted while it runs (a server's engine thread calls submit()):
// a fixed number of request slots, sized at creation (running concurrency +
// the queue bound), each with a token buffer reserved to the max context, so a
// submission copies its prompt into the slot and joins the same queue through
// the same make_ready; the slot is reused after release(). Live mode keeps the
// step and token time series up to a fixed bound and drops the rest.
//
// Invariants: running ≤ min(max_seqs, plan concurrency); tokens per step ≤
// step_tokens; a generating context's decode token is held in at most one step
// of any two in a row; every request ends finished, cancelled or rejected; nothing on
// the step path allocates — request token buffers, the queue, the batch and
// the time series are all sized when the scheduler is created.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "activekv/result.hpp"
#include "serve/clock.hpp"
#include "serve/step_engine.hpp"
#include "serve/trace.hpp"

namespace activekv::serve {

struct SchedulerConfig {
  std::uint32_t max_seqs = 8;              // concurrency cap (the engine's plan may be lower)
  std::uint32_t step_tokens = 256;         // token budget of one step
  std::uint32_t prefill_chunk_tokens = 128;// most prompt tokens of one context per step
  bool stop_at_eos = true;
  double arrival_scale = 1.0;              // multiplies every arrival time
  // A reusing follow-up's first step holds the other contexts' decode tokens (never one
  // context two steps in a row); false keeps them in that step (tests compare both).
  bool hold_decodes_for_follow_ups = true;
};

enum class RequestState : std::uint8_t {
  pending,          // not arrived yet
  waiting_session,  // arrived; its session's previous turn has not finished
  queued,           // in the FIFO queue
  prefill,          // admitted; feeding its prompt
  decode,           // generating
  finished,
  cancelled,
  rejected,
  vacant,           // live mode: a free request slot
};
const char* request_state_name(RequestState state) noexcept;

enum class WaitReason : std::uint8_t {
  no_free_history,     // engine: every host-pool history is in use
  floor_does_not_fit,  // engine: the device pool cannot hold another floor now
  max_seqs,            // the concurrency cap is reached
  behind_queue_head,   // FIFO: the head of the queue is waiting
  session_turn,        // the session's previous turn is still running
  kv_tier,             // engine: the shared KV tier's lookup of the prompt runs (docs/TIER.md)
};
inline constexpr std::size_t wait_reason_count = 6;
const char* wait_reason_name(WaitReason reason) noexcept;

enum class RejectReason : std::uint8_t {
  none,
  longer_than_max_context,  // prompt + max_tokens > max context
  never_admissible,         // refused by the engine with nothing else running
  previous_turn_rejected,   // a session follow-up whose previous turn was rejected
};
const char* reject_reason_name(RejectReason reason) noexcept;

// Tokens that finish a request when generated (-1: none): the file's EOS, its EOT and the chat
// family's end-of-turn token, whichever the model has. EOS from the plan finishes a request too
// when stop_at_eos is set.
using StopTokens = std::array<std::int32_t, 3>;
inline constexpr StopTokens no_stop_tokens{-1, -1, -1};
inline bool is_stop_token(const StopTokens& stops, std::int32_t token) noexcept {
  return token >= 0 && (token == stops[0] || token == stops[1] || token == stops[2]);
}

// One request, from load to its end. Plain data; read by the report.
struct RequestRecord {
  std::string id;
  std::uint32_t trace_line = 0;
  double arrival_s = 0.0;                  // scaled arrival time
  std::uint32_t max_tokens = 0;
  std::int64_t cancel_after_tokens = -1;
  std::int32_t previous_turn = -1;         // index of the session's previous request
  std::int32_t next_turn = -1;             // index of the session's next request
  std::vector<std::int32_t> turn_tokens;   // this request's own prompt text, tokenized
  std::vector<std::int32_t> tokens;        // the full sequence: prompt, then output (capacity reserved)
  std::uint32_t prompt_tokens = 0;         // known once it joins the queue
  std::uint32_t prefilled_tokens = 0;      // prompt tokens whose KV the context holds (reused ones included)
  std::uint32_t reused_tokens = 0;         // of them, adopted from a retained history (not fed)
  std::uint32_t output_tokens = 0;
  std::uint32_t decode_steps_held = 0;     // steps whose decode token was held for a follow-up's first step
  bool decode_held_last_step = false;      // held in the latest step: the next one carries its token
  RequestState state = RequestState::pending;
  RejectReason reject_reason = RejectReason::none;
  std::array<std::uint32_t, wait_reason_count> wait_steps{};  // steps spent waiting, per reason
  bool waited = false;
  bool prefetched = false;                 // the engine started what its admission will need (prefetch)
  WaitReason first_wait_reason = WaitReason::behind_queue_head;
  ContextHandle context{};
  SamplingSettings sampling{};             // set on the engine at admission
  StopTokens stop_tokens = no_stop_tokens;  // tokens that finish it
  double ready_s = -1;        // joined the queue (arrival, or when the previous turn finished)
  double admitted_s = -1;
  double first_token_s = -1;
  double last_token_s = -1;
  double ended_s = -1;

  bool ended() const noexcept {
    return state == RequestState::finished || state == RequestState::cancelled || state == RequestState::rejected;
  }
  std::span<const std::int32_t> output() const noexcept {
    return std::span<const std::int32_t>(tokens).subspan(prompt_tokens, output_tokens);
  }
};

// A live request: its prompt (already tokenized) and how it generates.
struct Submission {
  std::span<const std::int32_t> prompt{};
  std::uint32_t max_tokens = 0;
  SamplingSettings sampling{};
  StopTokens stop_tokens = no_stop_tokens;
};

// One step, for the report's time series.
struct StepSample {
  double start_s = 0;
  double end_s = 0;
  std::uint32_t decode_tokens = 0;
  std::uint32_t prefill_tokens = 0;
  std::uint32_t batch_entries = 0;
  std::uint32_t held_decode_tokens = 0;  // decode tokens held for a follow-up's first step
  bool follow_up_first = false;          // a reusing follow-up's first step (no other prefill)
  std::uint32_t running = 0;
  std::uint32_t queued = 0;
  EngineCounters delta{};  // counters moved by this step (levels: the value after it)
};

// One output token.
struct TokenSample {
  double time_s = 0;
  double latency_s = 0;  // since the request's previous token, or since it was ready (the first)
  std::uint32_t request = 0;
  bool first = false;
};

// Device pages of one running context after one step.
struct PagesSample {
  std::uint32_t step = 0;
  std::uint32_t request = 0;
  ContextPages pages{};
};

class Scheduler {
 public:
  // Tokenizes every prompt, links sessions, rejects what can never fit, and
  // sizes every buffer. The engine and clock must outlive the scheduler.
  static Result<std::unique_ptr<Scheduler>> create(const std::vector<TraceRequest>& trace, StepEngine& engine,
                                                   Clock& clock, const SchedulerConfig& config);

  // Live mode: `slots` request slots, all vacant, each able to hold a max-context sequence.
  static Result<std::unique_ptr<Scheduler>> create_live(std::uint32_t slots, StepEngine& engine, Clock& clock,
                                                        const SchedulerConfig& config);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // True once every request has ended (trace mode; a live scheduler is never done).
  bool done() const noexcept { return !live_ && ended_ == requests_.size(); }

  // Live mode: puts a vacant slot's request in the queue now (or rejects it, as
  // the trace path does, when prompt + max_tokens exceed the max context).
  // Copies the prompt into the slot's reserved buffer: allocation-free.
  void submit(std::uint32_t slot, const Submission& submission);
  // Live mode: an ended slot becomes vacant again.
  void release(std::uint32_t slot);
  bool live() const noexcept { return live_; }

  // One iteration: intake arrivals, admit from the queue head, run one step.
  // When nothing can run it waits for the next arrival instead. Allocation-free.
  Status advance();

  // Records the device pages of every running context after the last step (for
  // the report's chart). Instrumentation, not the step path: the real engine
  // builds an explanation to answer, so callers keep it outside allocation counts.
  void sample_pages();

  // Cancels a request wherever it is (queued, prefill, decode); no-op once ended.
  void cancel(std::uint32_t request);

  std::uint32_t concurrency() const noexcept { return cap_; }
  std::uint32_t running() const noexcept { return static_cast<std::uint32_t>(running_count_); }
  std::uint32_t queued() const noexcept { return static_cast<std::uint32_t>(queue_count_); }
  std::uint32_t ended() const noexcept { return static_cast<std::uint32_t>(ended_); }
  std::uint32_t running_max() const noexcept { return running_max_; }
  std::uint64_t tokens_out() const noexcept { return tokens_out_; }
  std::uint64_t tokens_in() const noexcept { return tokens_in_; }

  const std::vector<RequestRecord>& requests() const noexcept { return requests_; }
  const std::vector<StepSample>& steps() const noexcept { return steps_; }
  const std::vector<TokenSample>& token_samples() const noexcept { return token_samples_; }
  const std::vector<PagesSample>& pages_samples() const noexcept { return pages_samples_; }
  std::uint32_t steps_dropped() const noexcept { return steps_dropped_; }
  // Steps that fed a prefix-reusing follow-up's whole suffix and no other prefill (compose_batch).
  std::uint32_t follow_up_first_steps() const noexcept { return follow_up_first_steps_; }
  // Decode tokens held for those steps, and the steps that held at least one.
  std::uint64_t held_decode_tokens() const noexcept { return held_decode_tokens_; }
  std::uint32_t held_decode_steps() const noexcept { return held_decode_steps_; }

 private:
  Scheduler(StepEngine& engine, Clock& clock, const SchedulerConfig& config);

  void intake(double now_s);
  void make_ready(std::uint32_t request, double now_s);
  void admit(double now_s);
  void record_waits();
  std::size_t compose_batch();
  bool is_follow_up_suffix(const RequestRecord& r, std::uint32_t budget) const noexcept;
  void apply_outputs(std::size_t entries, double now_s);
  void end_request(std::uint32_t request, RequestState state, double now_s);
  void remove_running(std::uint32_t request);
  void remove_queued(std::uint32_t request);
  void reject(std::uint32_t request, RejectReason reason, double now_s);
  void record_step(double start_s, double end_s, std::size_t entries, const EngineCounters& before);
  double next_arrival_s() const noexcept;

  StepEngine& engine_;
  Clock& clock_;
  SchedulerConfig config_;
  std::uint32_t cap_ = 0;                  // min(max_seqs, plan concurrency)
  std::uint32_t max_context_tokens_ = 0;
  std::int32_t eos_token_ = -1;

  std::vector<RequestRecord> requests_;
  std::vector<std::uint32_t> arrival_order_;  // request indices by scaled arrival time (stable)
  std::size_t next_arrival_ = 0;              // position in arrival_order_
  std::size_t ended_ = 0;

  std::vector<std::uint32_t> queue_;          // FIFO ring of request indices
  std::size_t queue_head_ = 0;
  std::size_t queue_count_ = 0;

  std::vector<std::uint32_t> running_;        // admission order; first running_count_ valid
  std::size_t running_count_ = 0;
  std::uint32_t running_max_ = 0;
  WaitReason head_reason_ = WaitReason::max_seqs;  // why the queue head waits this step

  std::vector<BatchEntry> batch_;
  std::vector<std::uint32_t> batch_request_;  // request index of each batch entry
  std::vector<std::int32_t> batch_tokens_out_;
  std::uint32_t batch_decode_tokens_ = 0;
  std::uint32_t batch_prefill_tokens_ = 0;
  std::uint32_t batch_held_decode_tokens_ = 0;
  bool batch_follow_up_first_ = false;

  bool live_ = false;
  std::uint64_t tokens_in_ = 0;
  std::uint64_t tokens_out_ = 0;
  std::vector<StepSample> steps_;             // capacity reserved; full => later steps are dropped
  std::vector<TokenSample> token_samples_;
  std::vector<PagesSample> pages_samples_;
  std::uint32_t steps_dropped_ = 0;
  std::uint32_t follow_up_first_steps_ = 0;
  std::uint64_t held_decode_tokens_ = 0;
  std::uint32_t held_decode_steps_ = 0;
};

}  // namespace activekv::serve
