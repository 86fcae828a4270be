// metrics.hpp — the server's Prometheus text: fixed-bucket histograms and the page they render to.
//
// A Histogram has its buckets fixed at construction; observe() is a few adds
// (no allocation), so the engine thread records latencies beside its steps.
// render_metrics() turns one snapshot (taken under the server's lock) into the
// Prometheus text exposition format, every name prefixed activekv_.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "serve/step_engine.hpp"
#include "server/connection_gate.hpp"

namespace activekv::server {

class Histogram {
 public:
  // Upper bounds in seconds, 0.5 ms to 120 s, roughly x2.5 apart.
  static constexpr std::array<double, 14> bounds{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                 0.1,    0.25,  0.5,    1.0,   2.5,  10.0,  120.0};
  void observe(double seconds) noexcept;
  std::uint64_t count() const noexcept { return count_; }
  double sum() const noexcept { return sum_; }
  std::uint64_t bucket(std::size_t i) const noexcept { return buckets_[i]; }  // cumulative: le bounds[i]

 private:
  std::array<std::uint64_t, bounds.size()> buckets_{};
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

struct MetricsSnapshot {
  std::uint32_t running = 0, waiting = 0;
  std::uint32_t histories_in_use = 0, histories_total = 0;
  std::uint32_t pages_resident = 0, pages_free = 0, pages_borrowed = 0, pool_pages = 0;
  serve::EngineCounters counters{};
  std::uint64_t heap_allocations_after_warmup = 0;
  std::uint64_t prompt_tokens = 0, generation_tokens = 0;
  std::uint64_t finished = 0, cancelled = 0, rejected = 0, refused_queue_full = 0, bad_requests = 0;
  Histogram ttft, inter_token, queue, e2e;
  Histogram http_ttft;  // streamed requests: the HTTP handler's start to the first token's chunk written
  bool ready = false;
};

std::string render_metrics(const MetricsSnapshot& m);
// The connection gate's counts (connections open, refused by which cap, requests timed out), appended to the page.
std::string render_connection_metrics(const GateCounters& g);

}  // namespace activekv::server
