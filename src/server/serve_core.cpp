// serve_core.cpp — the engine thread, the intake and the per-request slots (see serve_core.hpp).
#include "server/serve_core.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "serve/run_report.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::server {

namespace {
constexpr double pages_sample_interval_s = 0.1;
constexpr std::size_t latency_samples_max = 1u << 18;
}  // namespace

struct ServeCore::Slot {
  enum class Phase : std::uint8_t { free, submitted, active, ended };
  Phase phase = Phase::free;
  std::uint64_t serial = 0;
  std::vector<std::int32_t> prompt;  // reserved to the max context
  std::vector<std::int32_t> output;  // reserved to the max context
  serve::Submission submission{};
  bool cancel_requested = false;
  bool stopped_by_string = false;  // ended by the client's stop string: counted as finished, not cancelled
  Progress progress{};
  double last_token_s = -1;
  // For explain(): copied by the engine thread.
  serve::RequestState state = serve::RequestState::queued;
  std::array<std::uint32_t, serve::wait_reason_count> wait_steps{};
  bool waited = false;
  serve::WaitReason first_wait_reason = serve::WaitReason::behind_queue_head;
  double ready_s = -1, admitted_s = -1, first_token_s = -1, ended_s = -1;
  serve::ContextPages pages{};
  bool pages_known = false;
  std::condition_variable cv;
};

ServeCore::ServeCore(serve::StepEngine& engine, serve::Clock& clock, const ServeCoreSettings& settings)
    : engine_(engine), clock_(clock), settings_(settings) {}

ServeCore::~ServeCore() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    exit_ = true;
  }
  engine_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<std::unique_ptr<ServeCore>> ServeCore::create(serve::StepEngine& engine, serve::Clock& clock,
                                                     const ServeCoreSettings& settings) {
  serve::SchedulerConfig sc;
  sc.max_seqs = settings.config.max_seqs;
  sc.step_tokens = settings.config.step_tokens;
  sc.prefill_chunk_tokens = settings.config.prefill_chunk_tokens;
  sc.stop_at_eos = settings.config.stop_at_eos;
  const std::uint32_t cap = std::min(settings.config.max_seqs, engine.plan().concurrency);
  const std::uint32_t slots = cap + settings.max_queue;
  auto scheduler = serve::Scheduler::create_live(std::max(slots, 1u), engine, clock, sc);
  if (!scheduler) return scheduler.error();
  std::unique_ptr<ServeCore> core(new ServeCore(engine, clock, settings));
  core->scheduler_ = std::move(scheduler).value();
  core->max_context_ = engine.plan().max_context_tokens;
  core->slot_count_ = static_cast<std::uint32_t>(core->scheduler_->requests().size());
  core->slots_ = std::make_unique<Slot[]>(core->slot_count_);
  for (std::uint32_t i = 0; i < core->slot_count_; ++i) {
    core->slots_[i].prompt.reserve(core->max_context_);
    core->slots_[i].output.reserve(core->max_context_);
  }
  core->intake_.resize(core->slot_count_);
  core->pages_scratch_.resize(core->slot_count_);
  core->cancels_.resize(core->slot_count_);
  core->ttft_samples_.reserve(latency_samples_max);
  core->itl_samples_.reserve(latency_samples_max);
  core->stats_.histories_total = engine.plan().histories;
  core->stats_.pool_pages = engine.plan().pool_pages;
  core->stats_.pages_free = engine.plan().pool_pages;
  core->stats_.counters = engine.counters();
  return core;
}

void ServeCore::start() {
  clock_.restart();
  {
    std::lock_guard lock(mu_);
    stats_.ready = true;
  }
  thread_ = std::thread([this] { loop(); });
}

std::string ServeCore::busy_reason() const {
  const std::uint32_t running = stats_.running;
  const std::uint32_t waiting = in_use_ > running ? in_use_ - running : 0;
  const serve::EnginePlan& plan = engine_.plan();
  return fmt::format(
      "the server is at capacity: the host pool holds {} histories (max_seqs {}, so {} run at once); {} running, {} "
      "waiting, and the queue holds at most {} (max_queue); retry later",
      plan.histories, settings_.config.max_seqs, std::min(settings_.config.max_seqs, plan.concurrency), running, waiting,
      settings_.max_queue);
}

Result<Ticket> ServeCore::submit(const SubmitSpec& spec) {
  if (spec.prompt.empty()) return make_error(ErrorCode::invalid_argument, "prompt", "the prompt tokenizes to no tokens");
  if (spec.max_tokens == 0) return make_error(ErrorCode::invalid_argument, "max_tokens", "must be at least 1");
  if (spec.prompt.size() + spec.max_tokens > max_context_) {
    return make_error(ErrorCode::refused, "max_tokens",
                      fmt::format("the prompt is {} tokens and max_tokens is {}: {} in all, over the max context of {} "
                                  "tokens (shorten the prompt or lower max_tokens)",
                                  spec.prompt.size(), spec.max_tokens, spec.prompt.size() + spec.max_tokens, max_context_));
  }
  std::unique_lock lock(mu_);
  if (closed_) return make_error(ErrorCode::unsupported, "server", "the server is shutting down");
  if (in_use_ == slot_count_) {
    ++stats_.refused_queue_full;
    return make_error(ErrorCode::exhausted, "server", busy_reason());
  }
  std::uint32_t i = 0;
  while (slots_[i].phase != Slot::Phase::free) ++i;
  Slot& s = slots_[i];
  s.phase = Slot::Phase::submitted;
  s.serial = next_serial_++;
  s.prompt.assign(spec.prompt.begin(), spec.prompt.end());
  s.output.clear();
  s.submission = serve::Submission{s.prompt, spec.max_tokens, spec.sampling, spec.stop_tokens};
  s.cancel_requested = false;
  s.stopped_by_string = false;
  s.progress = Progress{};
  s.last_token_s = -1;
  s.state = serve::RequestState::queued;
  s.wait_steps = {};
  s.waited = false;
  s.ready_s = s.admitted_s = s.first_token_s = s.ended_s = -1;
  s.pages_known = false;
  intake_[(intake_head_ + intake_count_) % intake_.size()] = i;
  ++intake_count_;
  ++in_use_;
  if (first_submit_s_ < 0) first_submit_s_ = clock_.now_s();
  const Ticket ticket{i, s.serial};
  lock.unlock();
  engine_cv_.notify_one();  // outside the lock: the engine thread wakes to a free mutex
  return ticket;
}

Progress ServeCore::wait(const Ticket& ticket, std::vector<std::int32_t>* out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  Slot& s = slots_[ticket.slot];
  AK_ASSERT(s.serial == ticket.serial && s.phase != Slot::Phase::free, "ServeCore::wait: a released ticket");
  s.cv.wait_for(lock, timeout, [&] { return s.output.size() > out->size() || s.phase == Slot::Phase::ended; });
  out->insert(out->end(), s.output.begin() + static_cast<std::ptrdiff_t>(out->size()), s.output.end());
  Progress p = s.progress;
  p.ended = s.phase == Slot::Phase::ended;
  return p;
}

void ServeCore::cancel(const Ticket& ticket) { request_end(ticket, false); }

void ServeCore::stop_at_string(const Ticket& ticket) { request_end(ticket, true); }

void ServeCore::request_end(const Ticket& ticket, bool stopped_by_string) {
  std::lock_guard lock(mu_);
  Slot& s = slots_[ticket.slot];
  AK_ASSERT(s.serial == ticket.serial && s.phase != Slot::Phase::free, "ServeCore::cancel: a released ticket");
  if (s.cancel_requested || s.phase == Slot::Phase::ended) return;
  s.cancel_requested = true;
  s.stopped_by_string = stopped_by_string;
  cancels_[(cancel_head_ + cancel_count_) % cancels_.size()] = ticket.slot;
  ++cancel_count_;
  engine_cv_.notify_one();
}

void ServeCore::release(const Ticket& ticket) {
  std::lock_guard lock(mu_);
  Slot& s = slots_[ticket.slot];
  AK_ASSERT(s.serial == ticket.serial && s.phase == Slot::Phase::ended, "ServeCore::release: the request has not ended");
  s.phase = Slot::Phase::free;
  --in_use_;
}

void ServeCore::count_bad_request() {
  std::lock_guard lock(mu_);
  ++stats_.bad_requests;
}

void ServeCore::observe_http_ttft(double seconds) {
  std::lock_guard lock(mu_);
  stats_.http_ttft.observe(seconds);
}

void ServeCore::count_queue_full() {
  std::lock_guard lock(mu_);
  ++stats_.refused_queue_full;
}

void ServeCore::publish() {
  serve::Scheduler& sched = *scheduler_;
  stats_.running = sched.running();
  stats_.waiting = sched.queued();
  stats_.histories_in_use = sched.running();  // each admitted context owns one host history
  stats_.counters = engine_.counters();
  stats_.generation_tokens = sched.tokens_out();
  running_max_ = std::max<std::uint64_t>(running_max_, sched.running());
  peak_host_bytes_ = std::max(peak_host_bytes_, stats_.counters.host_bytes_in_use);
  peak_device_bytes_ = std::max(peak_device_bytes_, stats_.counters.device_bytes_in_use);
  if (sched.running() == 0) {
    stats_.pages_resident = stats_.pages_borrowed = 0;
    stats_.pages_free = stats_.pool_pages;
  }
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    Slot& s = slots_[i];
    if (s.phase != Slot::Phase::active) continue;
    const serve::RequestRecord& r = sched.requests()[i];
    s.state = r.state;
    s.wait_steps = r.wait_steps;
    s.waited = r.waited;
    s.first_wait_reason = r.first_wait_reason;
    s.ready_s = r.ready_s;
    s.admitted_s = r.admitted_s;
    s.first_token_s = r.first_token_s;
    const std::span<const std::int32_t> out = r.output();
    const std::size_t before = s.output.size();
    bool wake = false;
    if (out.size() > before) {
      AK_ASSERT(out.size() <= s.output.capacity(), "ServeCore::publish: output beyond the reserved buffer");
      s.output.insert(s.output.end(), out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
      if (before == 0) {
        const double ttft = r.first_token_s - r.ready_s;
        stats_.ttft.observe(ttft);
        if (ttft_samples_.size() < ttft_samples_.capacity()) ttft_samples_.push_back(ttft);
      } else {
        const double itl = (r.last_token_s - s.last_token_s) / static_cast<double>(out.size() - before);
        stats_.inter_token.observe(itl);
        if (itl_samples_.size() < itl_samples_.capacity()) itl_samples_.push_back(itl);
      }
      s.last_token_s = r.last_token_s;
      wake = true;
    }
    if (r.ended()) {
      Progress& p = s.progress;
      p.state = r.state;
      p.reject_reason = r.reject_reason;
      p.prompt_tokens = r.prompt_tokens;
      p.cached_tokens = r.reused_tokens;
      const std::int32_t eos = settings_.config.stop_at_eos ? engine_.plan().eos_token : -1;
      p.hit_stop_token = r.state == serve::RequestState::finished && !out.empty() &&
                         (out.back() == eos || serve::is_stop_token(r.stop_tokens, out.back()));
      if (r.admitted_s >= 0) stats_.queue.observe(r.admitted_s - r.ready_s);
      stats_.e2e.observe(r.ended_s - r.arrival_s);
      s.ended_s = r.ended_s;
      switch (r.state) {
        case serve::RequestState::finished: ++stats_.finished; break;
        case serve::RequestState::cancelled: ++(s.stopped_by_string ? stats_.finished : stats_.cancelled); break;
        default: ++stats_.rejected; break;
      }
      stats_.prompt_tokens += r.prompt_tokens;
      last_end_s_ = std::max(last_end_s_, r.ended_s);
      s.phase = Slot::Phase::ended;
      sched.release(i);
      wake = true;
    }
    if (wake) s.cv.notify_all();
  }
}

void ServeCore::sample_pages() {
  // Instrumentation: the real engine builds an explanation to answer pages(), so this runs
  // outside the counted window, at most every pages_sample_interval_s. The pages are read
  // without the lock (the engine is the engine thread's), then copied in under it: a handler
  // just woken by publish() does not wait on the lock while explanations are built.
  const double now_s = clock_.now_s();
  if (last_pages_sample_s_ >= 0 && now_s - last_pages_sample_s_ < pages_sample_interval_s) return;
  last_pages_sample_s_ = now_s;
  const serve::Scheduler& sched = *scheduler_;
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    const serve::RequestRecord& r = sched.requests()[i];
    const bool running = r.state == serve::RequestState::prefill || r.state == serve::RequestState::decode;
    pages_scratch_[i] = running ? std::optional<serve::ContextPages>(engine_.pages(r.context)) : std::nullopt;
  }
  std::uint32_t resident = 0, borrowed = 0;
  std::lock_guard lock(mu_);
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    if (!pages_scratch_[i]) continue;
    const serve::ContextPages& p = *pages_scratch_[i];
    resident += p.held;
    borrowed += p.held > p.target ? p.held - p.target : 0;
    slots_[i].pages = p;
    slots_[i].pages_known = true;
  }
  stats_.pages_resident = resident;
  stats_.pages_borrowed = borrowed;
  stats_.pages_free = stats_.pool_pages > resident ? stats_.pool_pages - resident : 0;
}

void ServeCore::loop() {
  std::unique_lock lock(mu_);
  serve::Scheduler& sched = *scheduler_;
  while (true) {
    const std::uint64_t before = testing::heap_allocations_outside_io();
    while (intake_count_ > 0) {
      const std::uint32_t i = intake_[intake_head_];
      intake_head_ = (intake_head_ + 1) % intake_.size();
      --intake_count_;
      slots_[i].phase = Slot::Phase::active;
      sched.submit(i, slots_[i].submission);
    }
    while (cancel_count_ > 0) {
      const std::uint32_t i = cancels_[cancel_head_];
      cancel_head_ = (cancel_head_ + 1) % cancels_.size();
      --cancel_count_;
      if (slots_[i].phase == Slot::Phase::active && !sched.requests()[i].ended()) sched.cancel(i);
    }
    publish();
    stats_.heap_allocations_after_warmup += testing::heap_allocations_outside_io() - before;
    if (sched.running() == 0 && sched.queued() == 0) {
      if (exit_) break;
      engine_cv_.wait(lock, [&] { return intake_count_ > 0 || cancel_count_ > 0 || exit_; });
      continue;
    }
    lock.unlock();
    const std::uint64_t step_before = testing::heap_allocations_outside_io();
    Status status = sched.advance();
    const std::uint64_t step_heap = testing::heap_allocations_outside_io() - step_before;
    lock.lock();
    stats_.heap_allocations_after_warmup += step_heap;
    if (!status) {
      status_ = status;
      // A failed step: cancel everything (the engine's fenced path returns what it can), refuse new work.
      for (std::uint32_t i = 0; i < slot_count_; ++i) {
        if (slots_[i].phase == Slot::Phase::active && !sched.requests()[i].ended()) sched.cancel(i);
      }
      while (intake_count_ > 0) {
        const std::uint32_t i = intake_[intake_head_];
        intake_head_ = (intake_head_ + 1) % intake_.size();
        --intake_count_;
        slots_[i].phase = Slot::Phase::active;
        sched.submit(i, slots_[i].submission);
        if (!sched.requests()[i].ended()) sched.cancel(i);
      }
      publish();
      closed_ = true;
      exit_ = true;
      break;
    }
    // The step's tokens reach their waiters now, before the pages are sampled: sampling
    // builds an explanation per context, and a first token should not wait for it.
    const std::uint64_t publish_before = testing::heap_allocations_outside_io();
    publish();
    stats_.heap_allocations_after_warmup += testing::heap_allocations_outside_io() - publish_before;
    lock.unlock();
    sample_pages();
    lock.lock();
  }
}

void ServeCore::close() {
  std::lock_guard lock(mu_);
  closed_ = true;
}

void ServeCore::drain(double grace_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  std::unique_lock lock(mu_);
  closed_ = true;
  const auto idle = [&] {
    for (std::uint32_t i = 0; i < slot_count_; ++i) {
      if (slots_[i].phase == Slot::Phase::submitted || slots_[i].phase == Slot::Phase::active) return false;
    }
    return true;
  };
  while (!idle() && !exit_ && std::chrono::steady_clock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    lock.lock();
  }
  // Past the grace period: cancel what still runs or waits; the engine thread returns its pages and history.
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    Slot& s = slots_[i];
    if ((s.phase == Slot::Phase::submitted || s.phase == Slot::Phase::active) && !s.cancel_requested) {
      s.cancel_requested = true;
      cancels_[(cancel_head_ + cancel_count_) % cancels_.size()] = i;
      ++cancel_count_;
    }
  }
  exit_ = true;
  engine_cv_.notify_all();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
}

Status ServeCore::engine_status() {
  std::lock_guard lock(mu_);
  return status_;
}

MetricsSnapshot ServeCore::metrics() {
  std::lock_guard lock(mu_);
  return stats_;
}

std::optional<nlohmann::json> ServeCore::explain(std::uint64_t serial) {
  std::lock_guard lock(mu_);
  for (std::uint32_t i = 0; i < slot_count_; ++i) {
    const Slot& s = slots_[i];
    if (s.phase == Slot::Phase::free || s.serial != serial) continue;
    nlohmann::json waits = nlohmann::json::object();
    for (std::size_t k = 0; k < serve::wait_reason_count; ++k) {
      waits[serve::wait_reason_name(static_cast<serve::WaitReason>(k))] = s.wait_steps[k];
    }
    nlohmann::json x = {{"state", serve::request_state_name(s.phase == Slot::Phase::ended ? s.progress.state : s.state)},
                        {"prompt_tokens", s.prompt.size()},
                        {"output_tokens", s.output.size()},
                        {"ready_s", s.ready_s},
                        {"admitted_s", s.admitted_s},
                        {"first_token_s", s.first_token_s},
                        {"ended_s", s.ended_s},
                        {"steps_waited", waits},
                        {"first_wait_reason", s.waited ? nlohmann::json(serve::wait_reason_name(s.first_wait_reason)) : nlohmann::json(nullptr)}};
    if (s.phase == Slot::Phase::ended) {
      x["reject_reason"] = serve::reject_reason_name(s.progress.reject_reason);
    }
    if (s.pages_known && s.phase == Slot::Phase::active) {
      const serve::ContextPages& p = s.pages;
      const std::uint32_t by_floor = std::min(p.held, p.floor);
      const std::uint32_t by_right = std::min(p.held, p.target) - by_floor;
      const std::uint32_t borrowed = p.held > p.target ? p.held - p.target : 0;
      x["pages"] = {{"held", p.held},
                    {"floor", p.floor},
                    {"target", p.target},
                    {"burst", p.burst},
                    {"resident_because",
                     {{"floor", by_floor},      // needed resident for one step (sink + tail per layer)
                      {"target", by_right},     // held by right, up to the context's target
                      {"borrowed", borrowed}}}}; // free pages lent above the target, up to the burst
      if (p.state_bytes != 0) {  // a hybrid: where its recurrent state lives, which checkpoint it came from
        x["recurrent_state"] = {{"bytes", p.state_bytes},
                                {"slot", p.recurrent_slot},
                                {"restored_tokens", p.state_restored_tokens},
                                {"checkpoints_held", p.state_checkpoints_held},
                                {"checkpoint_newest", p.state_checkpoint_newest}};
      }
    } else {
      x["pages"] = {{"held", 0}, {"note", "the request holds no device pages now (queued or ended)"}};
    }
    return x;
  }
  return std::nullopt;
}

nlohmann::json ServeCore::figures(const std::string& model, const std::string& config_source) {
  std::lock_guard lock(mu_);
  const serve::Scheduler& s = *scheduler_;
  const serve::EngineCounters& c = stats_.counters;
  const double wall_s = first_submit_s_ >= 0 ? std::max(0.0, last_end_s_ - first_submit_s_) : 0.0;
  const double w = wall_s > 0 ? wall_s : 1e-9;
  const std::uint64_t reads = c.page_reads_resident + c.page_reads_staged;
  const auto share = [&](std::uint64_t v) { return reads == 0 ? 0.0 : static_cast<double>(v) / static_cast<double>(reads); };
  const auto lat = [](const std::vector<double>& v) {
    return nlohmann::json{{"p50", serve::percentile(v, 0.5)}, {"p99", serve::percentile(v, 0.99)}, {"count", v.size()}};
  };
  nlohmann::json f;
  f["run"] = {{"model", model}, {"trace", "live requests (activekv serve)"}, {"config", config_source}, {"wall_s", wall_s},
              {"steps", s.steps().size() + s.steps_dropped()}};
  const std::uint64_t ended = stats_.finished + stats_.cancelled + stats_.rejected;
  f["requests"] = {{"total", ended + stats_.refused_queue_full},
                   {"finished", stats_.finished},
                   {"cancelled", stats_.cancelled},
                   {"rejected", stats_.rejected + stats_.refused_queue_full},
                   {"queue_full", stats_.refused_queue_full},
                   {"running_max", running_max_}};
  f["tokens"] = {{"in", s.tokens_in()}, {"out", s.tokens_out()}};
  f["throughput"] = {{"output_tokens_per_s", static_cast<double>(s.tokens_out()) / w},
                     {"total_tokens_per_s", static_cast<double>(s.tokens_in() + s.tokens_out()) / w},
                     {"requests_per_s", static_cast<double>(stats_.finished) / w}};
  f["latency"] = {{"ttft_s", lat(ttft_samples_)}, {"inter_token_s", lat(itl_samples_)}};
  f["copies"] = {{"h2d", {{"bytes", c.bytes_h2d}, {"count", c.copies_h2d}}},
                 {"d2h", {{"bytes", c.bytes_d2h}, {"count", c.copies_d2h}}},
                 {"d2d", {{"bytes", c.bytes_d2d}, {"count", c.copies_d2d}}}};
  f["residency"] = {{"page_reads_resident", c.page_reads_resident},
                    {"page_reads_staged", c.page_reads_staged},
                    {"resident_share", share(c.page_reads_resident)},
                    {"staged_share", share(c.page_reads_staged)}};
  f["promotions"] = c.promotions;
  f["reclaimed"] = {{"pages", c.reclaimed_pages}, {"steps", c.reclaim_steps}};
  f["quarantines"] = c.quarantines;
  f["allocations_after_warmup"] = {{"device", c.device_allocations_after_warmup},
                                   {"heap", stats_.heap_allocations_after_warmup}};
  f["peak"] = {{"host_bytes", peak_host_bytes_},
               {"host_bytes_plan", engine_.plan().host_pool_bytes},
               {"device_bytes", peak_device_bytes_},
               {"device_bytes_plan", engine_.plan().device_arena_bytes}};
  return f;
}

}  // namespace activekv::server
