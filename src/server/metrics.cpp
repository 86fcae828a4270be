// metrics.cpp — histograms and the Prometheus text (see metrics.hpp).
#include "server/metrics.hpp"

#include <fmt/format.h>

namespace activekv::server {

void Histogram::observe(double seconds) noexcept {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) ++buckets_[i];
  }
  ++count_;
  sum_ += seconds;
}

namespace {

void gauge(std::string& out, const char* name, const char* help, double value, const char* type = "gauge") {
  fmt::format_to(std::back_inserter(out), "# HELP activekv_{0} {1}\n# TYPE activekv_{0} {2}\nactivekv_{0} {3}\n", name, help,
                 type, value);
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  fmt::format_to(std::back_inserter(out), "# HELP activekv_{0} {1}\n# TYPE activekv_{0} histogram\n", name, help);
  for (std::size_t i = 0; i < Histogram::bounds.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "activekv_{}_bucket{{le=\"{}\"}} {}\n", name, Histogram::bounds[i], h.bucket(i));
  }
  fmt::format_to(std::back_inserter(out), "activekv_{0}_bucket{{le=\"+Inf\"}} {1}\nactivekv_{0}_sum {2}\nactivekv_{0}_count {1}\n",
                 name, h.count(), h.sum());
}

}  // namespace

std::string render_metrics(const MetricsSnapshot& m) {
  std::string out;
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  const serve::EngineCounters& c = m.counters;
  gauge(out, "ready", "1 once the model is loaded and the engine thread runs", m.ready ? 1 : 0);
  gauge(out, "requests_running", "Requests admitted (prefill or decode)", m.running);
  gauge(out, "requests_waiting", "Requests in the FIFO queue", m.waiting);
  gauge(out, "host_histories_in_use", "Host-pool histories owned by running contexts", m.histories_in_use);
  gauge(out, "host_histories_total", "Host-pool histories in the memory plan", m.histories_total);
  gauge(out, "device_pages_resident", "Device pool pages owned by contexts", m.pages_resident);
  gauge(out, "device_pages_free", "Device pool pages owned by nobody", m.pages_free);
  gauge(out, "device_pages_borrowed", "Device pool pages held above their context's target", m.pages_borrowed);
  gauge(out, "device_pages_total", "Device pool pages in the memory plan", m.pool_pages);
  gauge(out, "pages_staged_total", "Page reads attention served from a staging tile", d(c.page_reads_staged), "counter");
  gauge(out, "pages_resident_reads_total", "Page reads attention served in place", d(c.page_reads_resident), "counter");
  gauge(out, "h2d_bytes_total", "Bytes copied host to device", d(c.bytes_h2d), "counter");
  gauge(out, "d2h_bytes_total", "Bytes copied device to host", d(c.bytes_d2h), "counter");
  gauge(out, "d2d_bytes_total", "Bytes copied device to device (promotions)", d(c.bytes_d2d), "counter");
  gauge(out, "reclaimed_pages_total", "Pages reclaimed from contexts above their target", d(c.reclaimed_pages), "counter");
  gauge(out, "quarantines_total", "Tiles, host ranges and pages quarantined by failed fences", d(c.quarantines), "counter");
  gauge(out, "device_allocations_after_warmup", "Device allocations since warm-up ended (must be 0)",
        d(c.device_allocations_after_warmup));
  gauge(out, "heap_allocations_after_warmup", "Heap allocations on the engine thread's step path since warm-up (must be 0)",
        d(m.heap_allocations_after_warmup));
  gauge(out, "prompt_tokens_total", "Prompt tokens of ended requests", d(m.prompt_tokens), "counter");
  gauge(out, "generation_tokens_total", "Tokens generated", d(m.generation_tokens), "counter");
  gauge(out, "prefix_reused_tokens_total", "Prompt tokens adopted from retained histories instead of prefilled",
        d(c.prefix_reused_tokens), "counter");
  gauge(out, "retained_histories", "Host-pool histories holding a retained prefix now", d(c.retained_histories));
  gauge(out, "retained_kept_total", "Finished histories kept as retained prefixes", d(c.retained_kept), "counter");
  gauge(out, "retained_dropped_total", "Retained prefixes dropped (admission needed the history, or cancel)",
        d(c.retained_dropped), "counter");
  gauge(out, "prefix_cache_bytes", "Bytes of finished histories' pages the host prefix cache holds now",
        d(c.prefix_cache_bytes));
  gauge(out, "prefix_cache_pages", "Pages the host prefix cache holds now (one page index across every dense layer)",
        d(c.prefix_cache_pages));
  gauge(out, "prefix_cache_pages_capacity", "Pages the host prefix cache can hold (the memory plan's prefix_cache_pages)",
        d(c.prefix_cache_pages_total));
  gauge(out, "prefix_cache_lookups_total", "Admissions that looked in the host prefix cache", d(c.prefix_cache_lookups),
        "counter");
  gauge(out, "prefix_cache_hits_total", "Admissions that copied at least one page from the host prefix cache",
        d(c.prefix_cache_hits), "counter");
  gauge(out, "prefix_cache_hit_tokens_total", "Prompt tokens copied from the host prefix cache instead of prefilled",
        d(c.prefix_cache_hit_tokens), "counter");
  gauge(out, "prefix_cache_evictions_total", "Host prefix cache pages evicted (least recently used leaves first)",
        d(c.prefix_cache_evictions), "counter");
  gauge(out, "prefix_cache_ring_cuts_total",
        "Admissions whose host prefix cache match was cut back: window layers' rows missing (the rest prefilled)",
        d(c.prefix_cache_ring_cuts), "counter");
  gauge(out, "prefix_cache_ring_cut_pages_total", "Matched host prefix cache pages those cuts prefilled instead",
        d(c.prefix_cache_ring_cut_pages), "counter");
  gauge(out, "prefix_cache_state_cuts_total",
        "Admissions whose host prefix cache match was cut back to the last cached state checkpoint (hybrid models)",
        d(c.prefix_cache_state_cuts), "counter");
  gauge(out, "prefix_cache_state_cut_pages_total", "Matched host prefix cache pages those cuts prefilled instead",
        d(c.prefix_cache_state_cut_pages), "counter");
  gauge(out, "tier_hits_total", "KV tier blocks read and accepted", d(c.tier_hits), "counter");
  gauge(out, "tier_misses_total", "KV tier lookups that stopped short (absent, refused or failed)", d(c.tier_misses), "counter");
  gauge(out, "tier_errors_total", "KV tier connection, timeout and protocol failures", d(c.tier_errors), "counter");
  gauge(out, "tier_refused_total", "KV tier values refused (checksum, version, model, geometry)", d(c.tier_refused), "counter");
  gauge(out, "tier_bytes_read_total", "Bytes read from the KV tier", d(c.tier_bytes_read), "counter");
  gauge(out, "tier_bytes_written_total", "Bytes written to the KV tier", d(c.tier_bytes_written), "counter");
  gauge(out, "tier_dropped_writes_total", "KV tier blocks not written (queue full or store failed)", d(c.tier_dropped_writes),
        "counter");
  gauge(out, "tier_kept_writes_total",
        "KV tier blocks lacking window rows or a state not written: their key held a block already (SET NX)",
        d(c.tier_kept_writes), "counter");
  gauge(out, "tier_restored_tokens_total", "Prompt tokens restored from the KV tier instead of prefilled",
        d(c.tier_restored_tokens), "counter");
  gauge(out, "tier_ring_cuts_total", "KV tier restores cut back: the blocks lacked window rows the window needs",
        d(c.tier_ring_cuts), "counter");
  gauge(out, "tier_state_cuts_total", "KV tier restores cut back to the last block carrying a recurrent state",
        d(c.tier_state_cuts), "counter");
  fmt::format_to(std::back_inserter(out),
                 "# HELP activekv_requests_total Requests by how they ended\n# TYPE activekv_requests_total counter\n"
                 "activekv_requests_total{{outcome=\"finished\"}} {}\nactivekv_requests_total{{outcome=\"cancelled\"}} {}\n"
                 "activekv_requests_total{{outcome=\"rejected\"}} {}\nactivekv_requests_total{{outcome=\"queue_full\"}} {}\n"
                 "activekv_requests_total{{outcome=\"bad_request\"}} {}\n",
                 m.finished, m.cancelled, m.rejected, m.refused_queue_full, m.bad_requests);
  histogram(out, "time_to_first_token_seconds", "From joining the queue to the first token", m.ttft);
  histogram(out, "inter_token_latency_seconds", "Between a request's consecutive tokens", m.inter_token);
  histogram(out, "queue_time_seconds", "From joining the queue to admission", m.queue);
  histogram(out, "e2e_latency_seconds", "From submission to the request's end", m.e2e);
  histogram(out, "http_time_to_first_token_seconds",
            "Streamed requests: from the HTTP handler's start (request read) to the first token's chunk written",
            m.http_ttft);
  return out;
}

std::string render_connection_metrics(const GateCounters& g) {
  std::string out;
  const auto d = [](std::uint64_t v) { return static_cast<double>(v); };
  gauge(out, "http_connections_open", "Client connections open (waiting for a request, or being answered)", g.open);
  gauge(out, "http_connections_accepted_total", "Client connections accepted", d(g.accepted), "counter");
  fmt::format_to(std::back_inserter(out),
                 "# HELP activekv_http_connections_refused_total Connections answered 503 and closed at once, by the cap "
                 "they met\n# TYPE activekv_http_connections_refused_total counter\n"
                 "activekv_http_connections_refused_total{{cap=\"max_connections\"}} {}\n"
                 "activekv_http_connections_refused_total{{cap=\"max_connections_per_client\"}} {}\n",
                 g.refused_total, g.refused_per_client);
  gauge(out, "http_requests_timed_out_total", "Requests not read whole within --request-timeout (408)", d(g.timed_out),
        "counter");
  gauge(out, "http_requests_unframed_total", "Requests refused before parsing: header too large, body too large, bad framing",
        d(g.refused_framing), "counter");
  return out;
}

}  // namespace activekv::server
