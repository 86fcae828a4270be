// swarm_devices.cpp — the devices a seed runs on: warm-up (with a refused first try), the step
// buffers sized once, teardown with its drain checks, and migration to a fault-free device.
//
// Invariant: a retired device has drained — every page free or quarantined, every history back —
// and a fault-free one neither retired a history nor quarantined a page; every surviving request
// leaves a retired device for the next one from its host history.
#include "reliability/swarm_seed_run.hpp"

namespace activekv::reliability::detail {

bool SeedRun::open_device(bool faulty) {
  device_exhausted_ = false;
  BackendOptions options;
  options.deterministic = true;
  options.seed = report_.seed * 2 + (faulty ? 0 : 1);
  options.reorder = reorder_;
  if (faulty) options.faults = faults_;
  auto backend = std::make_unique<host::HostBackend>(options);
  if (refuse_warmup_) {  // an operator's first try: a device pool far too small
    refuse_warmup_ = false;
    KvRuntimeSettings small = settings_;
    small.memory.device_pool_bytes = arena_alignment_bytes;
    auto refused = KvRuntime::create(small, *backend);
    if (refused.ok() || refused.error().setting.empty()) {
      fail("a device pool too small for warm-up was not refused with the setting to change");
      return false;
    }
    ++report_.faults.warmup_refusals;
    backend = std::make_unique<host::HostBackend>(options);
  }
  auto created = KvRuntime::create(settings_, *backend);
  if (!created.ok()) {
    fail("warm-up refused a sound configuration: " + created.error().describe());
    return false;
  }
  device_.backend = std::move(backend);
  device_.runtime = std::move(created.value());
  device_.faulty = faulty;
  if (buffers_k_.empty()) size_buffers();
  return true;
}

void SeedRun::size_buffers() {
  const Geometry& g = settings_.memory.geometry;
  const KvRuntime& rt = *device_.runtime;
  const std::uint32_t entries_max = rt.plan().budget.concurrency;
  tokens_max_ = entries_max * settings_.memory.chunk_tokens;
  kv_ = std::size_t{g.kv_heads} * g.head_dim;
  qe_ = std::size_t{settings_.q_heads} * g.head_dim;
  buffers_k_.assign(g.dense_layers, std::vector<float>(tokens_max_ * kv_));
  buffers_v_.assign(g.dense_layers, std::vector<float>(tokens_max_ * kv_));
  buffers_q_.assign(g.dense_layers, std::vector<float>(tokens_max_ * qe_));
  buffers_out_.assign(g.dense_layers, std::vector<float>(tokens_max_ * qe_));
  expected_.resize(tokens_max_ * qe_);
  row_.resize(g.row_bytes());
  entries_.reserve(entries_max);
  chosen_.reserve(entries_max);
}

// Retires a device: every context is gone, so every page not quarantined and
// every history must be back (liveness on the faulty device), and its faults
// are tallied.
void SeedRun::close_device() {
  KvRuntime& rt = *device_.runtime;
  if (const char* broken = rt.check()) fail(std::string("at teardown: ") + broken);
  // Shutdown: retained histories' device pages (prefix reuse) go back to the pool through the
  // runtime, after the device copies in flight resolve; then every page must be free or quarantined.
  report_.device_pages_handed_over += rt.counters().retained_device_pages_adopted;
  report_.device_pages_copied += rt.counters().prefix_device_pages_copied;
  report_.prefix_cache_hits += rt.counters().prefix_cache_hits;
  rt.release_retained();
  if (const char* broken = rt.check()) fail(std::string("after releasing retained pages: ") + broken);
  if (rt.pages_free() + rt.pages_quarantined() != rt.pages_total())
    fail(fmt::format("pages did not drain: {} free + {} quarantined of {} ({} histories free of {})", rt.pages_free(),
                     rt.pages_quarantined(), rt.pages_total(), rt.histories_free(), rt.plan().host.history_slots));
  if (rt.histories_free() + rt.histories_retired() != rt.plan().host.history_slots) fail("histories did not drain");
  if (!device_.faulty && rt.histories_retired() != 0) fail("a fault-free device retired a host history");
  if (!device_.faulty && rt.pages_quarantined() != 0) fail("a fault-free device quarantined pages");
  if (rt.counters().device_allocations_after_warmup != 0) fail("a device allocation after warm-up");
  report_.pages_quarantined += rt.pages_quarantined();
  report_.pages_staged += rt.counters().pages_staged;
  report_.sparse_pages_missed += rt.counters().pages_stage_missed;
  report_.sparse_pages_skipped += rt.counters().pages_stage_skipped;
  report_.tiles_retired += rt.counters().tiles_retired;
  report_.histories_retired += rt.histories_retired();
  trace(rt.pages_quarantined()), trace(rt.counters().steps), trace(rt.counters().quarantines);
  const auto& f = device_.backend->faults_injected();
  report_.faults.late += f.late;
  report_.faults.failed_fences += f.failed_fences;
  report_.faults.unknown_fences += f.unknown_fences;
  report_.faults.failed_copies += f.failed_copies;
  report_.faults.torn_copies += f.torn_copies;
  report_.faults.poisoned += f.poisoned;
  device_.runtime.reset();
  device_.backend.reset();
}

// A faulty device whose failed copies quarantined every staging tile, or part of every host
// history, can run nothing more: its fault phase ends there (the runtime refuses, by name).
bool SeedRun::exhausted() const {
  const KvRuntime& rt = *device_.runtime;
  return device_.faulty && (rt.tiles_usable() == 0 || rt.histories_retired() == rt.plan().host.history_slots);
}

// The fault phase is over (or the device is gone): recover every context from
// its host history, retire the device, continue on a fault-free one.
void SeedRun::migrate() {
  // Releasing one context may admit a queued one: repeat until none runs.
  for (bool again = true; again && violation_.empty();) {
    again = false;
    for (Request& r : requests_) {
      if (r.state != Request::State::running) continue;
      again = true;
      if (r.needs_replay || r.length == 0) {  // nothing on this device to recover
        release(r, false);
        r.state = Request::State::pending;
      } else {
        recover(r);
      }
    }
  }
  for (Request& r : requests_) {
    if (r.state == Request::State::queued) r.state = Request::State::pending;
  }
  close_device();
  if (!violation_.empty()) return;
  request_of_.clear();
  next_request_id_ = 1;
  open_device(false);
}

}  // namespace activekv::reliability::detail
