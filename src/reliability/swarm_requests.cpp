// swarm_requests.cpp — a request's life outside the step: its rows and their checksums,
// conversations (a follow-up inherits its predecessor's tokens and rows), admission and adoption
// of a retained history, release, recovery from the host history and replay into a new context.
//
// Invariant: a request's rows (k, v, sums) are exactly the rows its context holds; every row that
// is adopted, recovered or replayed is checked against its checksum before it is used, and a
// history that fails the check is reported lost, never used.
#include "reliability/swarm_seed_run.hpp"

namespace activekv::reliability::detail {

std::uint64_t SeedRun::row_sum(const float* k, const float* v) {
  const Geometry& g = settings_.memory.geometry;
  const std::size_t half = g.row_bytes() / 2;
  runtime::encode_elements(g.dtype, k, kv_, row_.data());
  runtime::encode_elements(g.dtype, v, kv_, row_.data() + half);
  return fnv(fnv_basis, row_.data(), row_.size());
}

// Compares host rows [first, last) of every layer with their checksums.
bool SeedRun::verify_rows(Request& r, std::uint32_t first, std::uint32_t last) {
  const Geometry& g = settings_.memory.geometry;
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    for (std::uint32_t t = first; t < last; ++t) {
      const auto host = device_.runtime->host_row(r.handle, l, t);
      ++report_.rows_verified;
      if (fnv(fnv_basis, host.data(), host.size()) != r.sums[l][t]) return false;
    }
  }
  return true;
}

// At its first admission: a follow-up whose predecessor completed inherits its rows and tokens
// as its prompt's start (a repeated prompt only part of them); every request draws its own tokens
// for the rest.
void SeedRun::prepare(Request& r) {
  r.prepared = true;
  const Geometry& g = settings_.memory.geometry;
  const std::uint32_t max_context = settings_.memory.max_context_tokens;
  if (r.follows >= 0) {
    const Request& p = requests_[static_cast<std::size_t>(r.follows)];
    if (p.completed && p.length + 2 <= max_context) {
      // A repeated prompt shares a drawn part (at least a page, when the history has one more token).
      const std::uint32_t page = settings_.memory.page_tokens;
      r.pre_len = r.repeats ? uniform(std::min(p.length, page + 1), p.length) : p.length;
      r.pre_k = p.k;
      r.pre_v = p.v;
      r.pre_sums = p.sums;
      r.tokens.assign(p.tokens.begin(), p.tokens.begin() + p.length);
      r.tokens_max = uniform(r.pre_len + 2, max_context);
      r.prompt_tokens = uniform(r.pre_len + 1, r.tokens_max);
      if (r.cancel_at > r.tokens_max) r.cancel_at = r.tokens_max;
      ++report_.follow_ups;
    }
  }
  r.tokens.resize(r.tokens_max);
  for (std::uint32_t t = r.pre_len; t < r.tokens_max; ++t) {
    r.tokens[t] = static_cast<std::int32_t>(fnv_u64(fnv_u64(fnv_basis, report_.seed * 4096 + r.id), t) & 0x7fffffff);
  }
  (void)g;
  trace(r.pre_len), trace(r.tokens_max);
}

// The context adopted `reused` tokens of a retained history: they must be exactly the
// conversation's rows (checked against the checksums), and they become the request's rows.
void SeedRun::adopted(Request& r, std::uint32_t reused) {
  const Geometry& g = settings_.memory.geometry;
  if (reused > r.pre_len) {
    ++report_.corrupted;
    return fail(fmt::format("request {}: adopted {} tokens, beyond its conversation's {}", r.id, reused, r.pre_len));
  }
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
    r.k[l].assign(r.pre_k[l].begin(), r.pre_k[l].begin() + static_cast<std::ptrdiff_t>(reused * kv_));
    r.v[l].assign(r.pre_v[l].begin(), r.pre_v[l].begin() + static_cast<std::ptrdiff_t>(reused * kv_));
    r.sums[l].assign(r.pre_sums[l].begin(), r.pre_sums[l].begin() + reused);
    reference_->append(r.reference, l, r.k[l].data(), r.v[l].data(), reused);
  }
  r.length = reused;
  if (!r.recurrent.empty()) {  // the state the adopted checkpoint must hold: the toy state at `reused`
    std::fill(r.recurrent.begin(), r.recurrent.end(), std::byte{0});
    for (std::uint32_t t = 0; t < reused; ++t) fold_state(r.recurrent, r.tokens[t], t);
    ++report_.state_restores;
  }
  if (!verify_rows(r, 0, reused)) {
    ++report_.corrupted;
    return fail(fmt::format("request {}: an adopted row differs from its conversation's row", r.id));
  }
  ++report_.adoptions;
  report_.tokens_reused += reused;
  trace(0xADD0), trace(reused);
}

void SeedRun::opened(Request& r, ContextId handle) {
  r.state = Request::State::running;
  r.handle = handle;
  trace(r.id), trace(handle.slot);
}

void SeedRun::open(Request& r) {
  const bool fresh = !r.needs_replay && r.length == 0;
  if (fresh && !r.prepared) prepare(r);
  std::uint32_t reused = 0;
  // A replay starts from row 0 (its rows come from its own recovered history): it adopts nothing.
  const std::span<const std::int32_t> prompt =
      fresh ? std::span<const std::int32_t>(r.tokens).first(r.prompt_tokens) : std::span<const std::int32_t>();
  auto result = device_.runtime->open_context(next_request_id_++ * 64 + r.id, r.tokens_max, prompt, reused);
  if (!result.ok()) {
    // A faulty device whose every history was retired (failed copies quarantined part of each
    // host range) can run nothing more: its fault phase ends here, the request waits for the next device.
    if (exhausted()) {
      device_exhausted_ = true;
      --next_request_id_;
      return;
    }
    return fail("open_context refused a request within --max-context: " + result.error().describe());
  }
  request_of_.push_back(static_cast<std::uint32_t>(&r - requests_.data()));
  if (fresh && settings_.memory.geometry.recurrent_state_bytes != 0)
    r.recurrent.assign(settings_.memory.geometry.recurrent_state_bytes, std::byte{0});
  if (result->outcome == AdmitOutcome::admitted) {
    opened(r, result->handle);
    if (reused > 0) adopted(r, reused);
    // A restore whose copy failed leaves the context faulted: recovered from its (adopted) rows
    // and replayed, its state recomputed, like any context a fault reached.
    if (violation_.empty() && reused > 0 && device_.runtime->faulted(r.handle)) recover(r);
  } else {
    r.state = Request::State::queued;
  }
}

void SeedRun::sync_admitted() {
  AdmitResult admitted[8];
  for (;;) {
    const std::uint32_t n = device_.runtime->take_admitted(admitted);
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint64_t key = admitted[i].request_id / 64 - 1;
      if (key >= request_of_.size()) return fail("take_admitted returned an unknown request");
      Request& r = requests_[request_of_[key]];
      opened(r, admitted[i].handle);
      // Admitted from the queue without its prompt: the runtime learns where the prompt ends.
      if (r.length == 0 && !r.needs_replay) device_.runtime->note_prompt(r.handle, r.prompt_tokens);
    }
    if (n < 8) return;
  }
}

// A context leaves the runtime; queued requests may be admitted.
void SeedRun::release(Request& r, bool finished) {
  if (finished) {
    // With prefix reuse the history stays retained under the tokens of its rows.
    device_.runtime->finish_retaining(r.handle, std::span<const std::int32_t>(r.tokens).first(r.length));
  } else {
    device_.runtime->cancel(r.handle);
  }
  sync_admitted();
}

// The context's step failed (or its device is going away): its host history
// [0, length) is verified against the checksums and becomes the rows the
// request is replayed from; a history that fails is reported lost.
void SeedRun::recover(Request& r) {
  const Geometry& g = settings_.memory.geometry;
  const bool intact = verify_rows(r, 0, r.length);
  trace(intact ? 1 : 2);
  if (intact) {
    for (std::uint32_t l = 0; l < g.dense_layers; ++l) {
      for (std::uint32_t t = 0; t < r.length; ++t) {
        const auto host = device_.runtime->host_row(r.handle, l, t);
        runtime::decode_elements(g.dtype, host.data(), kv_, r.k[l].data() + t * kv_);
        runtime::decode_elements(g.dtype, host.data() + host.size() / 2, kv_, r.v[l].data() + t * kv_);
      }
    }
    r.needs_replay = r.length > 0;
    ++report_.contexts_recovered;
  } else {
    ++report_.contexts_lost;  // reported, never used
  }
  release(r, false);
  if (!intact) {
    r.state = Request::State::done;
    return;
  }
  r.state = Request::State::pending;  // opened again in this step's admission pass
}

// Writes the recovered rows into the request's new context, chunk by chunk,
// without attention; on success the rows are verified on the host.
bool SeedRun::replay(Request& r) {
  const Geometry& g = settings_.memory.geometry;
  KvRuntime& rt = *device_.runtime;
  runtime::ReferenceKv* ref = reference_.get();
  r.reference = ref->open();
  for (std::uint32_t l = 0; l < g.dense_layers; ++l) ref->append(r.reference, l, r.k[l].data(), r.v[l].data(), r.length);
  for (std::uint32_t done = 0; done < r.length;) {
    const std::uint32_t n = std::min(settings_.memory.chunk_tokens, r.length - done);
    const StepEntry entry{r.handle, n};
    if (exhausted()) {  // replayed on the next device instead
      device_exhausted_ = true;
      release(r, false);
      r.state = Request::State::pending;
      return false;
    }
    Status s = rt.begin_step({&entry, 1});
    if (!s.ok()) {
      fail("a replay step was refused: " + s.error().describe());
      return false;
    }
    fold_steps_state(r.handle, r, done, n);  // the state is recomputed from zero with the rows
    for (std::uint32_t l = 0; s.ok() && l < g.dense_layers; ++l) {
      s = rt.write_kv(l, r.k[l].data() + done * kv_, r.v[l].data() + done * kv_);
      const Status none = rt.attend_none(l);
      if (s.ok()) s = none;
    }
    const Status ended = rt.end_step();
    if (s.ok() && !ended.ok()) s = ended;
    ++report_.steps;
    trace(s.ok() ? 3 : 4);
    if (!s.ok()) {
      ++report_.steps_failed;
      if (!device_.faulty) {
        fail("a replay step failed on a fault-free device: " + s.error().describe());
        return false;
      }
      if (s.error().setting == "--fence-timeout" && !rt.faulted(r.handle)) {
        fail("a replay step stalled: " + s.error().describe());
        return false;
      }
      // The replayed rows are still those the request holds: cancel and try again later.
      release(r, false);
      r.state = Request::State::pending;
      return false;
    }
    done += n;
  }
  if (!verify_rows(r, 0, r.length)) {
    ++report_.corrupted;
    fail(fmt::format("request {}: a replayed row reads back different from the row written", r.id));
    return false;
  }
  r.needs_replay = false;
  return true;
}

// Inside a step: the context's recurrent state must be the toy state after the request's `length`
// tokens (what it started empty with, adopted from a checkpoint, or was replayed to). No allocation.
bool SeedRun::check_state(const Request& r, ContextId handle) {
  if (r.recurrent.empty()) return true;
  Result<std::span<std::byte>> state = device_.runtime->recurrent_state(handle);
  if (!state.ok()) {
    fail("recurrent_state refused a context of the open step: " + state.error().describe());
    return false;
  }
  ++report_.states_verified;
  if (state->size() == r.recurrent.size() && std::memcmp(state->data(), r.recurrent.data(), r.recurrent.size()) == 0) return true;
  ++report_.corrupted;
  fail(fmt::format("request {}: its recurrent state at a step's start is not the state after its {} tokens", r.id,
                   r.length));
  return false;
}

// Inside a step: tokens [first, first + n) of the request fold into the context's state.
void SeedRun::fold_steps_state(ContextId handle, const Request& r, std::uint32_t first, std::uint32_t n) {
  if (r.recurrent.empty()) return;
  Result<std::span<std::byte>> state = device_.runtime->recurrent_state(handle);
  if (!state.ok()) return fail("recurrent_state refused a context of the open step: " + state.error().describe());
  for (std::uint32_t t = first; t < first + n; ++t) fold_state(*state, r.tokens[t], t);
}

}  // namespace activekv::reliability::detail
