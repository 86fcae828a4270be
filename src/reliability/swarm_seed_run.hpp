// swarm_seed_run.hpp — one seed of the swarm simulation: the SeedRun class, its request
// records and its device, shared by the files that define its parts (internal to the swarm).
//
// SeedRun owns everything one seed touches: the seed's generator (every draw comes from it, in
// a fixed order, so a seed replays exactly), the drawn configuration and workload, the device
// and runtime under test, the reference attention and the step buffers (sized before the first
// step). Its parts live in swarm_draw.cpp (the draw), swarm_devices.cpp (devices: warm-up,
// drain checks at teardown, migration), swarm_requests.cpp (a request's rows, conversations,
// admission, recovery and replay) and swarm_step.cpp (one step, the work between steps, the
// run). Invariant: the first violation found is the one reported (fail() keeps it) and the
// run stops at once; the trace hash folds every event in the order it happened.
#pragma once

#include "reliability/swarm.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "activekv/memory_plan.hpp"
#include "activekv/state_plan.hpp"
#include "backends/host/host_backend.hpp"
#include "runtime/element_codec.hpp"
#include "runtime/reference_kv.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::reliability::detail {

constexpr float reference_tolerance = 2e-5f;
constexpr std::uint64_t steps_limit = 4000;  // a run longer than this is a liveness failure

inline std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
// Hybrid seeds: a toy recurrence stands in for a model's recurrent layers. Every token at position p
// folds into every 64-bit word of the state, so the state after n tokens is a function of exactly
// those n tokens, and a lost, stale or misplaced byte shows (as in runtime recurrent_state_test).
inline std::uint64_t state_mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline void fold_state(std::span<std::byte> state, std::int32_t token, std::uint32_t position) {
  for (std::size_t i = 0; i < state.size() / 8; ++i) {
    std::uint64_t w;
    std::memcpy(&w, state.data() + 8 * i, 8);
    w = state_mix(w ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(token)) << 20) ^ position ^ (i << 56));
    std::memcpy(state.data() + 8 * i, &w, 8);
  }
}

inline std::uint64_t fnv_u64(std::uint64_t h, std::uint64_t x) { return fnv(h, &x, sizeof x); }
constexpr std::uint64_t fnv_basis = 14695981039346656037ull;

struct Request {
  std::uint64_t id = 0;          // index + 1
  std::uint32_t tokens_max = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t cancel_at = 0;   // 0 = never; else cancelled once length ≥ cancel_at
  std::uint64_t arrival_step = 0;
  enum class State : std::uint8_t { pending, queued, running, done } state = State::pending;
  bool needs_replay = false;     // recovered rows not yet in the current context
  ContextId handle;
  std::uint32_t reference = 0;   // ReferenceKv context holding exactly `length` rows
  std::uint32_t length = 0;
  std::vector<std::vector<float>> k, v;           // [layer]: length × kv elements
  std::vector<std::vector<std::uint64_t>> sums;   // [layer]: length checksums
  // Conversations (prefix reuse): a follow-up's first pre_len rows are its predecessor's rows, under
  // the predecessor's tokens; every later token is this request's own. A row is thus a function of
  // the tokens before it, as in a model, and an adopted history must hold exactly these rows.
  std::int32_t follows = -1;                      // index of the predecessor in requests_, or -1
  bool repeats = false;                           // shares only a drawn part of the predecessor's history
                                                  //   (a repeated prompt that then diverges: copy on adopt)
  bool prepared = false;                          // tokens (and the prefix) drawn at first admission
  bool completed = false;                         // ran to tokens_max (a predecessor must have)
  std::vector<std::int32_t> tokens;               // tokens_max token ids
  std::uint32_t pre_len = 0;
  std::vector<std::vector<float>> pre_k, pre_v;   // [layer]: pre_len × kv elements
  std::vector<std::vector<std::uint64_t>> pre_sums;
  std::vector<std::byte> recurrent;               // hybrid seeds: the toy state after `length` tokens
};

struct Device {
  std::unique_ptr<host::HostBackend> backend;
  std::unique_ptr<KvRuntime> runtime;
  bool faulty = false;
};

class SeedRun {
 public:
  SeedRun(std::uint64_t seed, const SwarmHooks& hooks) : rng_(seed), hooks_(hooks) { report_.seed = seed; }

  SeedReport run() {
    draw();
    if (!violation_.empty()) return finish_report();
    drive();
    return finish_report();
  }

 private:
  std::uint32_t uniform(std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng_);
  }
  double real(double hi) { return std::uniform_real_distribution<double>(0.0, hi)(rng_); }
  bool chance(std::uint32_t percent) { return uniform(0, 99) < percent; }

  void fail(const std::string& what) {
    if (violation_.empty()) violation_ = fmt::format("step {}: {}", step_, what);
  }
  void trace(std::uint64_t x) { hash_ = fnv_u64(hash_, x); }

  // ---- the seed's draw (swarm_draw.cpp)
  void draw();
  void draw_serve_pattern(std::uint64_t floor_pages, std::uint64_t pages);
  void draw_hybrid();

  // ---- devices (swarm_devices.cpp)
  bool open_device(bool faulty);
  void size_buffers();
  void close_device();
  bool exhausted() const;
  void migrate();

  // ---- a request's rows, conversations, admission, recovery (swarm_requests.cpp)
  std::uint64_t row_sum(const float* k, const float* v);
  bool verify_rows(Request& r, std::uint32_t first, std::uint32_t last);
  void prepare(Request& r);
  void adopted(Request& r, std::uint32_t reused);
  void opened(Request& r, ContextId handle);
  void open(Request& r);
  void sync_admitted();
  void release(Request& r, bool finished);
  void recover(Request& r);
  bool replay(Request& r);
  bool check_state(const Request& r, ContextId handle);
  void fold_steps_state(ContextId handle, const Request& r, std::uint32_t first, std::uint32_t n);

  // ---- steps and the run (swarm_step.cpp)
  bool step_once();
  void compose_serve_step();
  void between_steps();
  void drive();
  SeedReport finish_report();

  std::mt19937_64 rng_;
  SwarmHooks hooks_;
  SeedReport report_;
  std::string violation_;
  std::uint64_t hash_ = fnv_basis;
  std::uint64_t step_ = 0;
  std::uint64_t good_steps_ = 0;
  bool heap_counter_ = false;

  KvRuntimeSettings settings_;
  FaultRates faults_;
  bool reorder_ = true;
  std::uint64_t fault_phase_steps_ = 0;
  bool device_exhausted_ = false;  // the faulty device can run nothing more (see exhausted())
  std::uint64_t lose_device_at_ = 0;
  std::uint32_t lose_device_layer_ = 0;
  bool refuse_warmup_ = false;
  // The server's pattern (issue 24): a small target under a whole-pool burst, repeated prompts, a
  // step token budget that keeps later prefills waiting (decodes first, then chunks in arrival
  // order), admission only when a request can adopt (may_admit_now), more cancels inside a step.
  bool serve_pattern_ = false;
  std::uint32_t step_tokens_ = 0;

  std::vector<Request> requests_;
  std::vector<std::uint32_t> request_of_;  // runtime request key − 1 → index in requests_
  std::uint64_t next_request_id_ = 1;
  Device device_;
  std::unique_ptr<runtime::ReferenceKv> reference_;
  Explanation sparse_explanation_;       // sparse seeds: the step's selection of the entry checked
  std::vector<std::uint32_t> pages_read_;  // per page, the KV heads that read it

  std::uint32_t tokens_max_ = 0;
  std::size_t kv_ = 0, qe_ = 0;
  std::vector<std::vector<float>> buffers_k_, buffers_v_, buffers_q_, buffers_out_;
  std::vector<float> expected_;
  std::vector<std::byte> row_;
  std::vector<StepEntry> entries_;
  std::vector<std::uint32_t> chosen_;
};

}  // namespace activekv::reliability::detail
