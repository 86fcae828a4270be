// scheduler.cpp — continuous batching over a StepEngine (see scheduler.hpp for the picture).
#include "serve/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace activekv::serve {

const char* request_state_name(RequestState state) noexcept {
  switch (state) {
    case RequestState::pending: return "pending";
    case RequestState::waiting_session: return "waiting_session";
    case RequestState::queued: return "queued";
    case RequestState::prefill: return "prefill";
    case RequestState::decode: return "decode";
    case RequestState::finished: return "finished";
    case RequestState::cancelled: return "cancelled";
    case RequestState::rejected: return "rejected";
    case RequestState::vacant: return "vacant";
  }
  return "?";
}

const char* wait_reason_name(WaitReason reason) noexcept {
  switch (reason) {
    case WaitReason::no_free_history: return "no_free_history";
    case WaitReason::floor_does_not_fit: return "floor_does_not_fit";
    case WaitReason::max_seqs: return "max_seqs";
    case WaitReason::behind_queue_head: return "behind_queue_head";
    case WaitReason::session_turn: return "session_turn";
    case WaitReason::kv_tier: return "kv_tier";
  }
  return "?";
}

const char* reject_reason_name(RejectReason reason) noexcept {
  switch (reason) {
    case RejectReason::none: return "none";
    case RejectReason::longer_than_max_context: return "longer_than_max_context";
    case RejectReason::never_admissible: return "never_admissible";
    case RejectReason::previous_turn_rejected: return "previous_turn_rejected";
  }
  return "?";
}

namespace {

constexpr std::size_t pages_samples_max = 4u << 20;  // bound on the pages time series (entries)
// Live mode's bounds on the time series (later entries are dropped, counted in steps_dropped).
constexpr std::size_t live_steps_max = 1u << 16;
constexpr std::uint32_t kTierWaitMs = 20;
constexpr std::size_t kPrefetchWindow = 8;  // queued requests asked to prefetch (the engine bounds what runs)  // a head waiting on the KV tier, nothing running: wait, then admit again
constexpr std::size_t live_token_samples_max = 1u << 18;

WaitReason wait_reason_of(AdmitOutcome outcome) {
  switch (outcome) {
    case AdmitOutcome::no_free_history: return WaitReason::no_free_history;
    case AdmitOutcome::floor_does_not_fit: return WaitReason::floor_does_not_fit;
    case AdmitOutcome::tier_pending: return WaitReason::kv_tier;
    case AdmitOutcome::admitted: break;
  }
  AK_ASSERT(false, "an admitted context has no wait reason");
  return WaitReason::max_seqs;
}

EngineCounters counters_delta(const EngineCounters& after, const EngineCounters& before) {
  EngineCounters d = after;  // levels (bytes in use) keep the value after the step
  d.bytes_h2d = after.bytes_h2d - before.bytes_h2d;
  d.bytes_d2h = after.bytes_d2h - before.bytes_d2h;
  d.bytes_d2d = after.bytes_d2d - before.bytes_d2d;
  d.copies_h2d = after.copies_h2d - before.copies_h2d;
  d.copies_d2h = after.copies_d2h - before.copies_d2h;
  d.copies_d2d = after.copies_d2d - before.copies_d2d;
  d.page_reads_resident = after.page_reads_resident - before.page_reads_resident;
  d.page_reads_staged = after.page_reads_staged - before.page_reads_staged;
  d.promotions = after.promotions - before.promotions;
  d.reclaimed_pages = after.reclaimed_pages - before.reclaimed_pages;
  d.reclaim_steps = after.reclaim_steps - before.reclaim_steps;
  d.quarantines = after.quarantines - before.quarantines;
  d.device_allocations_after_warmup = after.device_allocations_after_warmup - before.device_allocations_after_warmup;
  d.planning_ns = after.planning_ns - before.planning_ns;
  d.step_ns = after.step_ns - before.step_ns;
  return d;
}

}  // namespace

Scheduler::Scheduler(StepEngine& engine, Clock& clock, const SchedulerConfig& config)
    : engine_(engine), clock_(clock), config_(config) {}

Result<std::unique_ptr<Scheduler>> Scheduler::create(const std::vector<TraceRequest>& trace, StepEngine& engine,
                                                     Clock& clock, const SchedulerConfig& config) {
  AK_ASSERT(config.max_seqs > 0, "SchedulerConfig: max_seqs must be at least 1");
  AK_ASSERT(config.step_tokens >= config.max_seqs, "SchedulerConfig: step_tokens must cover one decode token per context");
  AK_ASSERT(config.prefill_chunk_tokens > 0, "SchedulerConfig: prefill_chunk_tokens must be at least 1");
  const EnginePlan& plan = engine.plan();
  if (plan.concurrency == 0) {
    return make_error(ErrorCode::refused, "--host-pool", "the memory plan admits no context (0 histories fit)");
  }
  std::unique_ptr<Scheduler> s(new Scheduler(engine, clock, config));
  s->cap_ = std::min(config.max_seqs, plan.concurrency);
  s->max_context_tokens_ = plan.max_context_tokens;
  s->eos_token_ = config.stop_at_eos ? plan.eos_token : -1;

  const std::size_t n = trace.size();
  s->requests_.resize(n);
  std::unordered_map<std::string, std::uint32_t> last_turn;  // load time only
  std::vector<std::size_t> capacity(n, 0);
  std::size_t steps_bound = 16;
  std::size_t tokens_out_bound = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const TraceRequest& t = trace[i];
    RequestRecord& r = s->requests_[i];
    r.id = t.id;
    r.trace_line = t.line;
    r.arrival_s = t.arrival_s * config.arrival_scale;
    r.max_tokens = t.max_tokens;
    r.cancel_after_tokens = t.cancel_after_tokens;
    if (!t.prompt_tokens.empty()) {
      r.turn_tokens = t.prompt_tokens;
    } else if (!t.prompt.empty()) {
      auto encoded = engine.encode(t.prompt);
      if (!encoded) {
        return make_error(encoded.error().code, fmt::format("trace line {}", t.line), encoded.error().describe());
      }
      r.turn_tokens = std::move(encoded).value();
    }
    if (!t.session.empty()) {
      auto [it, first] = last_turn.try_emplace(t.session, static_cast<std::uint32_t>(i));
      if (!first) {
        r.previous_turn = static_cast<std::int32_t>(it->second);
        s->requests_[it->second].next_turn = static_cast<std::int32_t>(i);
        it->second = static_cast<std::uint32_t>(i);
      }
    }
    if (r.previous_turn < 0 && r.turn_tokens.empty()) {
      return make_error(ErrorCode::malformed, fmt::format("trace line {}", t.line), "the prompt tokenizes to no tokens");
    }
    // A turn's buffer holds the previous turns' sequence and this turn's; a request never runs past the max
    // context (make_ready rejects it), so no buffer is reserved past max context + this turn's tokens: the
    // reservation is linear in the trace, not quadratic in a session's turns.
    const std::size_t before = r.previous_turn >= 0 ? capacity[static_cast<std::size_t>(r.previous_turn)] : 0;
    capacity[i] = std::min<std::size_t>(before + r.turn_tokens.size() + r.max_tokens,
                                        std::size_t{s->max_context_tokens_} + r.turn_tokens.size());
    r.tokens.reserve(capacity[i]);
    steps_bound += capacity[i] + 1;
    tokens_out_bound += std::min(r.max_tokens, s->max_context_tokens_);
  }
  s->arrival_order_.resize(n);
  std::iota(s->arrival_order_.begin(), s->arrival_order_.end(), 0u);
  std::stable_sort(s->arrival_order_.begin(), s->arrival_order_.end(), [&](std::uint32_t a, std::uint32_t b) {
    return s->requests_[a].arrival_s < s->requests_[b].arrival_s;
  });
  s->queue_.resize(n);
  s->running_.resize(s->cap_);
  s->batch_.resize(s->cap_);
  s->batch_request_.resize(s->cap_);
  s->batch_tokens_out_.resize(s->cap_);
  s->steps_.reserve(steps_bound);
  s->token_samples_.reserve(tokens_out_bound);
  s->pages_samples_.reserve(std::min(pages_samples_max, steps_bound * s->cap_));
  return s;
}

Result<std::unique_ptr<Scheduler>> Scheduler::create_live(std::uint32_t slots, StepEngine& engine, Clock& clock,
                                                          const SchedulerConfig& config) {
  AK_ASSERT(config.max_seqs > 0, "SchedulerConfig: max_seqs must be at least 1");
  AK_ASSERT(config.step_tokens >= config.max_seqs, "SchedulerConfig: step_tokens must cover one decode token per context");
  AK_ASSERT(config.prefill_chunk_tokens > 0, "SchedulerConfig: prefill_chunk_tokens must be at least 1");
  AK_ASSERT(slots > 0, "Scheduler::create_live: no request slots");
  const EnginePlan& plan = engine.plan();
  if (plan.concurrency == 0) {
    return make_error(ErrorCode::refused, "--host-pool", "the memory plan admits no context (0 histories fit)");
  }
  std::unique_ptr<Scheduler> s(new Scheduler(engine, clock, config));
  s->live_ = true;
  s->cap_ = std::min(config.max_seqs, plan.concurrency);
  s->max_context_tokens_ = plan.max_context_tokens;
  s->eos_token_ = config.stop_at_eos ? plan.eos_token : -1;
  s->requests_.resize(slots);
  for (RequestRecord& r : s->requests_) {
    r.state = RequestState::vacant;
    r.tokens.reserve(plan.max_context_tokens);
  }
  s->queue_.resize(slots);
  s->running_.resize(s->cap_);
  s->batch_.resize(s->cap_);
  s->batch_request_.resize(s->cap_);
  s->batch_tokens_out_.resize(s->cap_);
  s->steps_.reserve(live_steps_max);
  s->token_samples_.reserve(live_token_samples_max);
  return s;
}

void Scheduler::submit(std::uint32_t slot, const Submission& submission) {
  AK_ASSERT(live_, "Scheduler::submit: only a live scheduler takes submissions");
  AK_ASSERT(slot < requests_.size(), "Scheduler::submit: no such slot");
  RequestRecord& r = requests_[slot];
  AK_ASSERT(r.state == RequestState::vacant, "Scheduler::submit: the slot is in use");
  AK_ASSERT(!submission.prompt.empty(), "Scheduler::submit: an empty prompt (the caller refuses it)");
  // Everything but the reserved buffers goes back to its initial value (no allocation).
  r.turn_tokens.clear();
  r.tokens.clear();
  const std::size_t room = r.tokens.capacity();
  r.arrival_s = clock_.now_s();
  r.max_tokens = submission.max_tokens;
  r.cancel_after_tokens = -1;
  r.previous_turn = r.next_turn = -1;
  r.prompt_tokens = r.prefilled_tokens = r.output_tokens = 0;
  r.reject_reason = RejectReason::none;
  r.wait_steps = {};
  r.waited = false;
  r.first_wait_reason = WaitReason::behind_queue_head;
  r.context = {};
  r.sampling = submission.sampling;
  r.stop_tokens = submission.stop_tokens;
  r.reused_tokens = 0;
  r.decode_steps_held = 0;
  r.decode_held_last_step = false;
  r.ready_s = r.admitted_s = r.first_token_s = r.last_token_s = r.ended_s = -1;
  r.state = RequestState::pending;
  if (submission.prompt.size() + r.max_tokens > room) {  // longer than the max context: rejected, never copied
    r.prompt_tokens = static_cast<std::uint32_t>(std::min<std::size_t>(submission.prompt.size(), UINT32_MAX));
    r.ready_s = r.arrival_s;
    reject(slot, RejectReason::longer_than_max_context, r.arrival_s);
    return;
  }
  r.tokens.insert(r.tokens.end(), submission.prompt.begin(), submission.prompt.end());
  make_ready(slot, r.arrival_s);
}

void Scheduler::release(std::uint32_t slot) {
  AK_ASSERT(live_ && slot < requests_.size(), "Scheduler::release: no such live slot");
  AK_ASSERT(requests_[slot].ended(), "Scheduler::release: the request has not ended");
  requests_[slot].state = RequestState::vacant;
}

double Scheduler::next_arrival_s() const noexcept {
  for (std::size_t i = next_arrival_; i < arrival_order_.size(); ++i) {
    const RequestRecord& r = requests_[arrival_order_[i]];
    if (r.state == RequestState::pending) return r.arrival_s;
  }
  return std::numeric_limits<double>::infinity();
}

void Scheduler::intake(double now_s) {
  while (next_arrival_ < arrival_order_.size()) {
    const std::uint32_t i = arrival_order_[next_arrival_];
    RequestRecord& r = requests_[i];
    if (r.state == RequestState::pending && r.arrival_s > now_s) break;
    ++next_arrival_;
    if (r.state != RequestState::pending) continue;  // cancelled before it arrived
    if (r.previous_turn >= 0 && !requests_[static_cast<std::size_t>(r.previous_turn)].ended()) {
      r.state = RequestState::waiting_session;
      continue;
    }
    make_ready(i, r.arrival_s);
  }
}

void Scheduler::make_ready(std::uint32_t request, double ready_s) {
  RequestRecord& r = requests_[request];
  AK_ASSERT(r.state == RequestState::pending || r.state == RequestState::waiting_session,
            "make_ready: the request is already ready or ended");
  if (!live_) r.tokens.clear();  // a live submission has copied its prompt in already
  if (r.previous_turn >= 0) {
    const RequestRecord& previous = requests_[static_cast<std::size_t>(r.previous_turn)];
    AK_ASSERT(previous.ended(), "make_ready: the previous turn is still running");
    if (previous.state == RequestState::rejected) {
      reject(request, RejectReason::previous_turn_rejected, ready_s);
      return;
    }
    // Capacity was reserved for the previous turn's whole sequence plus this turn: no allocation.
    r.tokens.insert(r.tokens.end(), previous.tokens.begin(), previous.tokens.end());
  }
  r.tokens.insert(r.tokens.end(), r.turn_tokens.begin(), r.turn_tokens.end());
  r.prompt_tokens = static_cast<std::uint32_t>(r.tokens.size());
  r.ready_s = ready_s;
  if (static_cast<std::uint64_t>(r.prompt_tokens) + r.max_tokens > max_context_tokens_) {
    reject(request, RejectReason::longer_than_max_context, ready_s);
    return;
  }
  r.state = RequestState::queued;
  AK_ASSERT(queue_count_ < queue_.size(), "make_ready: the queue holds every request at most once");
  queue_[(queue_head_ + queue_count_) % queue_.size()] = request;
  ++queue_count_;
}

void Scheduler::reject(std::uint32_t request, RejectReason reason, double now_s) {
  RequestRecord& r = requests_[request];
  r.state = RequestState::rejected;
  r.reject_reason = reason;
  r.ended_s = now_s;
  ++ended_;
  if (r.next_turn >= 0 && requests_[static_cast<std::size_t>(r.next_turn)].state == RequestState::waiting_session) {
    make_ready(static_cast<std::uint32_t>(r.next_turn), now_s);
  }
}

void Scheduler::admit(double now_s) {
  // The first queued requests start what their admission will need (the KV tier's lookup) while
  // they wait; the engine bounds how many run at once and says false when it cannot start one yet.
  for (std::size_t k = 0; k < std::min<std::size_t>(queue_count_, kPrefetchWindow); ++k) {
    RequestRecord& q = requests_[queue_[(queue_head_ + k) % queue_.size()]];
    if (!q.prefetched) q.prefetched = engine_.prefetch(std::span<const std::int32_t>(q.tokens).first(q.prompt_tokens));
  }
  while (queue_count_ > 0) {
    const std::uint32_t i = queue_[queue_head_];
    RequestRecord& r = requests_[i];
    if (running_count_ >= config_.max_seqs) {
      head_reason_ = WaitReason::max_seqs;
      return;
    }
    // Below the configured cap, the engine's admission (histories, floors) decides and says why.
    const Admission admission =
        engine_.admit(std::span<const std::int32_t>(r.tokens).first(r.prompt_tokens), r.prompt_tokens + r.max_tokens);
    if (admission.outcome == AdmitOutcome::tier_pending) {
      // Waits in admission, never on the step path: running contexts keep stepping; with none,
      // the engine thread waits (bounded) for the tier and advance() comes back.
      head_reason_ = WaitReason::kv_tier;
      if (running_count_ == 0) engine_.wait_admission(kTierWaitMs);
      return;
    }
    if (admission.outcome != AdmitOutcome::admitted) {
      if (running_count_ > 0) {
        head_reason_ = wait_reason_of(admission.outcome);
        return;
      }
      // Nothing else holds memory, so waiting cannot help: the request does not fit at all.
      queue_head_ = (queue_head_ + 1) % queue_.size();
      --queue_count_;
      engine_.drop_prefetch(std::span<const std::int32_t>(r.tokens).first(r.prompt_tokens));
      reject(i, RejectReason::never_admissible, now_s);
      continue;
    }
    AK_ASSERT(running_count_ < cap_, "admit: the engine admitted beyond its plan's concurrency");
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_count_;
    running_[running_count_++] = i;
    running_max_ = std::max(running_max_, static_cast<std::uint32_t>(running_count_));
    r.state = RequestState::prefill;
    r.context = admission.context;
    engine_.set_sampling(r.context, r.sampling);
    r.admitted_s = now_s;
    // Prefix reuse: the adopted leading tokens already have their KV; prefill starts after them.
    AK_ASSERT(admission.reused_tokens == 0 || admission.reused_tokens < r.prompt_tokens,
              "admit: at least one prompt token is prefilled");
    r.reused_tokens = admission.reused_tokens;
    r.prefilled_tokens = admission.reused_tokens;
    if (r.cancel_after_tokens == 0) end_request(i, RequestState::cancelled, now_s);
  }
}

void Scheduler::record_waits() {
  for (std::size_t k = 0; k < queue_count_; ++k) {
    RequestRecord& r = requests_[queue_[(queue_head_ + k) % queue_.size()]];
    const WaitReason reason = k == 0 ? head_reason_ : WaitReason::behind_queue_head;
    ++r.wait_steps[static_cast<std::size_t>(reason)];
    if (!r.waited) {
      r.waited = true;
      r.first_wait_reason = reason;
    }
  }
  for (RequestRecord& r : requests_) {
    if (r.state != RequestState::waiting_session) continue;
    ++r.wait_steps[static_cast<std::size_t>(WaitReason::session_turn)];
    if (!r.waited) {
      r.waited = true;
      r.first_wait_reason = WaitReason::session_turn;
    }
  }
}

bool Scheduler::is_follow_up_suffix(const RequestRecord& r, std::uint32_t budget) const noexcept {
  // Its first chunk only: a prompt that adopted a prefix and is partway through its own prefill
  // (a stranger that shared a preamble page) has no claim on its last chunk.
  if (r.state != RequestState::prefill || r.reused_tokens == 0 || r.prefilled_tokens != r.reused_tokens) return false;
  const std::uint32_t remaining = r.prompt_tokens - r.prefilled_tokens;
  return remaining <= std::min(config_.prefill_chunk_tokens, budget);
}

std::size_t Scheduler::compose_batch() {
  // A follow-up whose prompt adopted a retained prefix, has fed none of its suffix, and whose whole
  // suffix fits one chunk (and the budget left after every decode) goes first, and while one does
  // the step carries no other context's prefill and holds the other contexts' decode tokens, except
  // those held in the step before (a context is never held two steps in a row): its first token then
  // costs its own suffix, not a step of others' prompt chunks and long-context decodes (docs/PREFIX.md,
  // "The follow-up's first step"). Others lose that one step; outputs do not change (rows are chunk-
  // and batch-invariant, and a held context's tokens are the same tokens, one step later).
  std::uint32_t decodes = 0;
  for (std::size_t k = 0; k < running_count_; ++k) decodes += requests_[running_[k]].state == RequestState::decode;
  AK_ASSERT(decodes <= config_.step_tokens, "compose_batch: step_tokens must cover every decode");
  bool follow_up_first = false;
  for (std::size_t k = 0; k < running_count_ && !follow_up_first; ++k) {
    follow_up_first = is_follow_up_suffix(requests_[running_[k]], config_.step_tokens - decodes);
  }
  const bool hold = follow_up_first && config_.hold_decodes_for_follow_ups;
  std::uint32_t budget = config_.step_tokens;
  std::uint32_t held = 0;
  std::size_t n = 0;
  for (std::size_t k = 0; k < running_count_; ++k) {
    const std::uint32_t i = running_[k];
    RequestRecord& r = requests_[i];
    if (r.state != RequestState::decode) continue;
    if (hold && !r.decode_held_last_step) {
      r.decode_held_last_step = true;
      ++r.decode_steps_held;
      ++held;
      continue;
    }
    r.decode_held_last_step = false;
    batch_[n] = BatchEntry{r.context, std::span<const std::int32_t>(r.tokens).subspan(r.tokens.size() - 1, 1), true};
    batch_request_[n++] = i;
    --budget;
  }
  batch_decode_tokens_ = config_.step_tokens - budget;
  batch_held_decode_tokens_ = held;
  batch_follow_up_first_ = follow_up_first;
  held_decode_tokens_ += held;
  held_decode_steps_ += held > 0 ? 1 : 0;
  if (follow_up_first) {
    ++follow_up_first_steps_;
    for (std::size_t k = 0; k < running_count_; ++k) {
      const std::uint32_t i = running_[k];
      if (!is_follow_up_suffix(requests_[i], budget)) continue;
      const RequestRecord& r = requests_[i];
      // Cut where a hybrid's state is checkpointed (the suffix's own prompt checkpoint), if inside.
      const std::uint32_t remaining = r.prompt_tokens - r.prefilled_tokens;
      const std::uint32_t chunk = std::min(remaining, engine_.tokens_to_checkpoint(r.context));
      batch_[n] = BatchEntry{r.context, std::span<const std::int32_t>(r.tokens).subspan(r.prefilled_tokens, chunk),
                             chunk == remaining};
      batch_request_[n++] = i;
      budget -= chunk;
    }
  }
  for (std::size_t k = 0; k < running_count_ && budget > 0 && !follow_up_first; ++k) {
    const std::uint32_t i = running_[k];
    const RequestRecord& r = requests_[i];
    if (r.state != RequestState::prefill) continue;
    const std::uint32_t chunk =
        std::min({r.prompt_tokens - r.prefilled_tokens, config_.prefill_chunk_tokens, budget,
                  engine_.tokens_to_checkpoint(r.context)});
    const bool last = r.prefilled_tokens + chunk == r.prompt_tokens;
    batch_[n] = BatchEntry{r.context, std::span<const std::int32_t>(r.tokens).subspan(r.prefilled_tokens, chunk), last};
    batch_request_[n++] = i;
    budget -= chunk;
  }
  batch_prefill_tokens_ = config_.step_tokens - budget - batch_decode_tokens_;
  return n;
}

void Scheduler::apply_outputs(std::size_t entries, double now_s) {
  for (std::size_t e = 0; e < entries; ++e) {
    const std::uint32_t i = batch_request_[e];
    RequestRecord& r = requests_[i];
    if (r.state == RequestState::prefill) {
      r.prefilled_tokens += static_cast<std::uint32_t>(batch_[e].tokens.size());
      tokens_in_ += batch_[e].tokens.size();
    }
    if (!batch_[e].want_token) continue;
    const std::int32_t token = batch_tokens_out_[e];
    AK_ASSERT(r.tokens.size() < r.tokens.capacity(), "apply_outputs: output beyond the reserved capacity");
    r.tokens.push_back(token);
    ++r.output_tokens;
    const bool first = r.state == RequestState::prefill;
    r.state = RequestState::decode;
    const double since_s = first ? r.ready_s : r.last_token_s;
    if (first) r.first_token_s = now_s;
    r.last_token_s = now_s;
    ++tokens_out_;
    if (token_samples_.size() < token_samples_.capacity()) {
      token_samples_.push_back(TokenSample{now_s, now_s - since_s, i, first});
    } else {
      AK_ASSERT(live_, "apply_outputs: token samples beyond the reserved capacity");
    }
    const bool stop = token == eos_token_ || is_stop_token(r.stop_tokens, token);
    if (r.output_tokens >= r.max_tokens || stop) {
      end_request(i, RequestState::finished, now_s);
    } else if (r.cancel_after_tokens >= 0 && r.output_tokens >= r.cancel_after_tokens) {
      end_request(i, RequestState::cancelled, now_s);
    }
  }
}

void Scheduler::remove_running(std::uint32_t request) {
  for (std::size_t k = 0; k < running_count_; ++k) {
    if (running_[k] != request) continue;
    for (std::size_t j = k + 1; j < running_count_; ++j) running_[j - 1] = running_[j];
    --running_count_;
    return;
  }
  AK_ASSERT(false, "remove_running: the request is not running");
}

void Scheduler::remove_queued(std::uint32_t request) {
  const std::size_t size = queue_.size();
  for (std::size_t k = 0; k < queue_count_; ++k) {
    if (queue_[(queue_head_ + k) % size] != request) continue;
    for (std::size_t j = k + 1; j < queue_count_; ++j) {
      queue_[(queue_head_ + j - 1) % size] = queue_[(queue_head_ + j) % size];
    }
    --queue_count_;
    return;
  }
  AK_ASSERT(false, "remove_queued: the request is not queued");
}

void Scheduler::end_request(std::uint32_t request, RequestState state, double now_s) {
  RequestRecord& r = requests_[request];
  AK_ASSERT(state == RequestState::finished || state == RequestState::cancelled, "end_request: not an end state");
  AK_ASSERT(!r.ended(), "end_request: the request already ended");
  if (r.state == RequestState::prefill || r.state == RequestState::decode) {
    if (state == RequestState::finished) {
      engine_.finish(r.context);
    } else {
      engine_.cancel(r.context);
    }
    remove_running(request);
  } else if (r.state == RequestState::queued) {
    remove_queued(request);
    engine_.drop_prefetch(std::span<const std::int32_t>(r.tokens).first(r.prompt_tokens));
  }
  r.state = state;
  r.ended_s = now_s;
  ++ended_;
  if (r.next_turn >= 0 && requests_[static_cast<std::size_t>(r.next_turn)].state == RequestState::waiting_session) {
    make_ready(static_cast<std::uint32_t>(r.next_turn), now_s);
  }
}

void Scheduler::cancel(std::uint32_t request) {
  AK_ASSERT(request < requests_.size(), "cancel: no such request");
  if (requests_[request].ended()) return;
  end_request(request, RequestState::cancelled, clock_.now_s());
}

void Scheduler::record_step(double start_s, double end_s, std::size_t entries, const EngineCounters& before) {
  if (steps_.size() == steps_.capacity()) {
    ++steps_dropped_;
    return;
  }
  StepSample sample;
  sample.start_s = start_s;
  sample.end_s = end_s;
  sample.batch_entries = static_cast<std::uint32_t>(entries);
  sample.decode_tokens = batch_decode_tokens_;
  sample.prefill_tokens = batch_prefill_tokens_;
  sample.held_decode_tokens = batch_held_decode_tokens_;
  sample.follow_up_first = batch_follow_up_first_;
  sample.running = static_cast<std::uint32_t>(running_count_);
  sample.queued = static_cast<std::uint32_t>(queue_count_);
  sample.delta = counters_delta(engine_.counters(), before);
  steps_.push_back(sample);
}

void Scheduler::sample_pages() {
  if (steps_.empty()) return;
  const auto step = static_cast<std::uint32_t>(steps_.size() - 1);
  for (std::size_t k = 0; k < running_count_ && pages_samples_.size() < pages_samples_.capacity(); ++k) {
    const std::uint32_t i = running_[k];
    pages_samples_.push_back(PagesSample{step, i, engine_.pages(requests_[i].context)});
  }
}

Status Scheduler::advance() {
  const double now_s = clock_.now_s();
  intake(now_s);
  admit(now_s);
  if (running_count_ == 0) {
    AK_ASSERT(queue_count_ == 0 || head_reason_ == WaitReason::kv_tier,
              "advance: with nothing running the queue head is admitted, rejected or waits on the KV tier");
    if (queue_count_ > 0) return {};  // the head waits on the KV tier: admit again
    if (live_ || done()) return {};  // live: the caller waits for the next submission
    const double next_s = next_arrival_s();
    AK_ASSERT(next_s < std::numeric_limits<double>::infinity(), "advance: requests remain but none can arrive");
    clock_.wait_until(next_s);
    return {};
  }
  const std::size_t entries = compose_batch();
  AK_ASSERT(entries > 0, "advance: a running context always has tokens to feed");
  record_waits();
  const EngineCounters before = engine_.counters();
  const double start_s = clock_.now_s();
  Status status = engine_.step(std::span<const BatchEntry>(batch_.data(), entries),
                               std::span<std::int32_t>(batch_tokens_out_.data(), entries));
  if (!status) return status;
  const double end_s = clock_.now_s();
  apply_outputs(entries, end_s);
  record_step(start_s, end_s, entries, before);
  return {};
}

}  // namespace activekv::serve
