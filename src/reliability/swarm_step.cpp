// swarm_step.cpp — one step of the workload and the run around it: the step's entries and random
// rows, the checks of a good step (every output against the reference, every new row read back,
// no heap allocation inside it), recovery of a failed one, the work between steps (arrivals,
// replays, cancellations, completions) and the run's two phases.
//
// Invariant: a step that reports a fault is never used — its contexts are recovered from their host
// histories; a good step's outputs and rows are checked before the request's rows grow.
#include "reliability/swarm_seed_run.hpp"

namespace activekv::reliability::detail {

// Returns false when the device was lost (the caller migrates).
bool SeedRun::step_once() {
  const Geometry& g = settings_.memory.geometry;
  KvRuntime& rt = *device_.runtime;
  entries_.clear();
  chosen_.clear();
  if (serve_pattern_) {
    compose_serve_step();
  } else {
    for (std::uint32_t i = 0; i < requests_.size(); ++i) {
      Request& r = requests_[i];
      if (r.state != Request::State::running || r.needs_replay || r.length >= r.tokens_max) continue;
      if (!chance(75)) continue;
      const std::uint32_t room = r.tokens_max - r.length;
      const std::uint32_t n = r.length < r.prompt_tokens
                                  ? std::min({room, r.prompt_tokens - r.length, uniform(1, settings_.memory.chunk_tokens),
                                              rt.tokens_to_checkpoint(r.handle)})
                                  : 1u;
      entries_.push_back(StepEntry{r.handle, n});
      chosen_.push_back(i);
    }
  }
  if (entries_.empty()) return true;
  std::uint32_t total = 0;
  for (const StepEntry& e : entries_) total += e.tokens_new;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    for (std::size_t i = 0; i < total * kv_; ++i) buffers_k_[l][i] = normal(rng_);
    for (std::size_t i = 0; i < total * kv_; ++i) buffers_v_[l][i] = normal(rng_);
    for (std::size_t i = 0; i < total * qe_; ++i) buffers_q_[l][i] = normal(rng_);
  }
  // A conversation's inherited positions get its predecessor's rows (what a model would compute).
  for (std::size_t e = 0, row = 0; e < entries_.size(); row += entries_[e].tokens_new, ++e) {
    const Request& r = requests_[chosen_[e]];
    for (std::uint32_t t = r.length; t < std::min(r.pre_len, r.length + entries_[e].tokens_new); ++t) {
      for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
        std::copy_n(r.pre_k[l].data() + t * kv_, kv_, buffers_k_[l].data() + (row + t - r.length) * kv_);
        std::copy_n(r.pre_v[l].data() + t * kv_, kv_, buffers_v_[l].data() + (row + t - r.length) * kv_);
      }
    }
  }
  const bool lose = device_.faulty && lose_device_at_ != 0 && step_ >= lose_device_at_;
  // (A context cancelled mid-step is gone before its rows can be read back:
  // the damage test turns these off so that the damaged row is always read.)
  // (Sparse seeds: the output check reads the step's selection from explain(), which a context
  // cancelled in the step no longer has.)
  const bool cancel_mid_step =
      chance(serve_pattern_ ? 8 : 2) && hooks_.corrupt_host_row_after_step == 0 && !settings_.sparse.enabled();
  const std::uint32_t cancel_layer = uniform(0, g.dense_layers - 1);

  if (exhausted()) {  // nothing more runs here: the fault phase ends before this step
    device_exhausted_ = true;
    return true;
  }
  const std::uint64_t heap_before = testing::heap_allocations();
  Status s = rt.begin_step(entries_);
  if (!s.ok()) {
    fail("begin_step refused a well-formed step: " + s.error().describe());
    return true;
  }
  // Hybrid seeds: each context's state is checked, then the step's tokens fold into it.
  for (std::size_t e = 0; e < entries_.size() && violation_.empty(); ++e) {
    const Request& r = requests_[chosen_[e]];
    if (check_state(r, entries_[e].context)) fold_steps_state(entries_[e].context, r, r.length, entries_[e].tokens_new);
  }
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    if (lose && l == lose_device_layer_) {
      device_.backend->lose_device();
      lose_device_at_ = 0;
      ++report_.faults.device_losses;
    }
    const Status written = rt.write_kv(l, buffers_k_[l].data(), buffers_v_[l].data());
    const Status attended = rt.attend(l, buffers_q_[l].data(), buffers_out_[l].data());
    if (s.ok() && !written.ok()) s = written;
    if (s.ok() && !attended.ok()) s = attended;
    if (!s.ok()) break;
    if (cancel_mid_step && l == cancel_layer) rt.cancel(entries_[0].context);  // deferred to end_step
  }
  const Status ended = rt.end_step();
  const std::uint64_t heap_after = testing::heap_allocations();
  if (s.ok() && !ended.ok()) s = ended;
  ++report_.steps;
  trace(0xC0FFEE), trace(total), trace(s.ok() ? 0 : 1 + static_cast<std::uint64_t>(s.error().code));
  const bool device_lost = lose && lose_device_at_ == 0;

  if (!s.ok()) {
    ++report_.steps_failed;
    if (!device_.faulty) fail("a step failed on a fault-free device: " + s.error().describe());
    if (s.error().setting == "--fence-timeout") fail("a step stalled: " + s.error().describe());
    if (cancel_mid_step && !rt.running(entries_[0].context)) {  // the deferred cancel took effect
      requests_[chosen_[0]].state = Request::State::done;
      ++report_.requests_cancelled;
      sync_admitted();
    }
    // Every context the step touched is recovered from its host history.
    for (const std::uint32_t i : chosen_) {
      Request& r = requests_[i];
      if (r.state != Request::State::running) continue;
      if (!rt.faulted(r.handle) && !device_lost) {
        // A context the fault did not reach may not be marked; it is recovered all the same.
        trace(5);
      }
      recover(r);
    }
    return !device_lost;
  }
  if (device_lost) fail("a step reported good across a device loss");
  if (heap_counter_ && heap_after != heap_before)
    fail(fmt::format("{} heap allocations inside a good step", heap_after - heap_before));

  // A good step: every output equals the reference, every new row reads back.
  const std::uint32_t all_heads = (1u << settings_.memory.geometry.kv_heads) - 1u;  // every KV head reads the page
  std::uint32_t row = 0;
  for (std::size_t e = 0; e < entries_.size(); ++e) {
    Request& r = requests_[chosen_[e]];
    const std::uint32_t n = entries_[e].tokens_new;
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      const float* k = buffers_k_[l].data() + row * kv_;
      const float* v = buffers_v_[l].data() + row * kv_;
      reference_->append(r.reference, l, k, v, n);
      // Sparse decode: the reference reads the pages the runtime's selection named (explain).
      std::span<const std::uint32_t> pages_read;
      if (settings_.sparse.enabled() && n == 1) {
        if (l == 0) sparse_explanation_ = rt.explain(r.handle);
        pages_read_.assign((r.length + n + settings_.memory.page_tokens - 1) / settings_.memory.page_tokens, 0);
        std::uint32_t picked = 0;
        for (const SparsePick& pick : sparse_explanation_.sparse_picks) {
          if (pick.layer != l) continue;
          if (pick.logical >= pages_read_.size()) {
            fail(fmt::format("request {} layer {}: the selection names page {} past the context", r.id, l, pick.logical));
            return true;
          }
          pages_read_[pick.logical] |= pick.group == UINT32_MAX ? all_heads : 1u << pick.group;
          ++picked;
        }
        if (picked == 0 || pages_read_.front() != all_heads || pages_read_.back() != all_heads) {
          fail(fmt::format("request {} layer {}: a sparse selection without the sink or the newest page", r.id, l));
          return true;
        }
        pages_read = pages_read_;
        ++report_.sparse_selections_verified;
      }
      reference_->attend(r.reference, l, buffers_q_[l].data() + row * qe_, n, r.length, expected_.data(), pages_read);
      const float* out = buffers_out_[l].data() + row * qe_;
      for (std::size_t i = 0; i < n * qe_; ++i) {
        if (!(std::fabs(out[i] - expected_[i]) <= reference_tolerance)) {
          ++report_.corrupted;
          fail(fmt::format("request {} layer {}: a good step's output differs from the reference ({} vs {})", r.id, l,
                           out[i], expected_[i]));
          return true;
        }
      }
      hash_ = fnv(hash_, out, n * qe_ * sizeof(float));
      report_.outputs_verified += n;
      r.k[l].insert(r.k[l].end(), k, k + n * kv_);
      r.v[l].insert(r.v[l].end(), v, v + n * kv_);
      for (std::uint32_t t = 0; t < n; ++t) r.sums[l].push_back(row_sum(k + t * kv_, v + t * kv_));
    }
    for (std::uint32_t t = r.length; t < r.length + n && !r.recurrent.empty(); ++t) fold_state(r.recurrent, r.tokens[t], t);
    r.length += n;
    row += n;
    const bool cancelled = cancel_mid_step && e == 0;
    if (cancelled) {
      if (rt.running(r.handle)) fail("a cancel during a step did not take effect at its end");
      r.state = Request::State::done;
      ++report_.requests_cancelled;
      sync_admitted();
      continue;
    }
    if (!verify_rows(r, r.length - n, r.length)) {
      ++report_.corrupted;
      fail(fmt::format("request {}: a good step left a wrong row on the host", r.id));
      return true;
    }
  }
  ++good_steps_;
  if (hooks_.corrupt_host_row_after_step == good_steps_) {
    Request& r = requests_[chosen_.back()];
    if (r.state == Request::State::running) {
      auto host = rt.host_row(r.handle, 0, r.length - 1);
      const_cast<std::byte&>(host[0]) ^= std::byte{1};
    }
  }
  return true;
}

// The server's step (serve's compose_batch): one decode token per context past its prompt, then
// prefill chunks in arrival order while the step's token budget lasts — a context admitted later
// (a follow-up that adopted its prefix) waits while earlier prompts prefill and grow.
void SeedRun::compose_serve_step() {
  std::uint32_t budget = step_tokens_;
  for (int prefill = 0; prefill < 2; ++prefill) {
    for (std::uint32_t i = 0; i < requests_.size() && budget > 0; ++i) {
      Request& r = requests_[i];
      if (r.state != Request::State::running || r.needs_replay || r.length >= r.tokens_max) continue;
      if ((r.length < r.prompt_tokens) != (prefill == 1)) continue;
      const std::uint32_t n =
          prefill == 1 ? std::min({r.prompt_tokens - r.length, settings_.memory.chunk_tokens, budget,
                                   device_.runtime->tokens_to_checkpoint(r.handle)})
                       : 1u;
      entries_.push_back(StepEntry{r.handle, n});
      chosen_.push_back(i);
      budget -= n;
    }
  }
}

// Between steps: arrivals, recoveries' re-admissions, replays, cancellations, completions.
void SeedRun::between_steps() {
  KvRuntime& rt = *device_.runtime;
  // The server's admission: a request waits (unsubmitted) while another runs and no history and
  // concurrency are free to admit it at once, so that it can still adopt its prefix when admitted;
  // a conversation's next turn is sent when the turn before it ended.
  const bool any_running = std::any_of(requests_.begin(), requests_.end(),
                                       [](const Request& r) { return r.state == Request::State::running; });
  for (Request& r : requests_) {
    if (r.state == Request::State::pending && r.arrival_step <= step_) {
      if (serve_pattern_ && any_running && !rt.may_admit_now()) continue;
      // A conversation's next turn (serve's waiting_session): sent once its predecessor ended.
      if (serve_pattern_ && r.follows >= 0 && requests_[static_cast<std::size_t>(r.follows)].state != Request::State::done) {
        continue;
      }
      if (!r.needs_replay && r.length == 0) r.reference = reference_->open();
      open(r);
    }
  }
  for (Request& r : requests_) {
    if (r.state == Request::State::running && r.needs_replay) replay(r);
    if (!violation_.empty()) return;
  }
  for (Request& r : requests_) {
    if (r.state != Request::State::running || r.needs_replay) continue;
    if (r.cancel_at != 0 && r.length >= r.cancel_at) {
      if (!verify_rows(r, 0, r.length)) {  // a cancelled history is still checked before it goes
        ++report_.corrupted;
        return fail(fmt::format("request {}: its cancelled history differs from the rows written", r.id));
      }
      r.state = Request::State::done;
      ++report_.requests_cancelled;
      release(r, false);
    } else if (r.length == r.tokens_max) {
      if (!verify_rows(r, 0, r.length)) {
        ++report_.corrupted;
        return fail(fmt::format("request {}: its finished history differs from the rows written", r.id));
      }
      r.state = Request::State::done;
      r.completed = true;
      ++report_.requests_completed;
      trace(r.id * 1000 + r.length);
      release(r, true);
    }
  }
  if (const char* broken = rt.check()) fail(broken);
}

void SeedRun::drive() {
  heap_counter_ = testing::heap_counter_linked();
  reference_ = std::make_unique<runtime::ReferenceKv>(settings_.memory.geometry, settings_.q_heads,
                                                      settings_.memory.page_tokens);
  if (!open_device(fault_phase_steps_ > 0)) return;
  for (step_ = 0; step_ < steps_limit && violation_.empty(); ++step_) {
    if (device_.faulty && (step_ >= fault_phase_steps_ || device_exhausted_)) migrate();
    if (!violation_.empty()) break;
    between_steps();
    if (!violation_.empty()) break;
    const bool all_done = std::all_of(requests_.begin(), requests_.end(),
                                      [](const Request& r) { return r.state == Request::State::done; });
    if (all_done) break;
    if (!step_once()) migrate();  // the device was lost
  }
  if (violation_.empty() && step_ >= steps_limit) fail("liveness: requests did not drain on a fault-free device");
  if (violation_.empty() && device_.runtime) close_device();
}

SeedReport SeedRun::finish_report() {
  report_.violation = violation_;
  for (const Request& r : requests_) trace(r.length);
  trace(report_.steps), trace(report_.steps_failed), trace(report_.contexts_recovered), trace(report_.contexts_lost);
  report_.trace_hash = hash_;
  return report_;
}

}  // namespace activekv::reliability::detail
