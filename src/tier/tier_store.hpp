// tier_store.hpp — the shared KV tier's client: one connection to Redis, where every failure is a miss.
//
// The tier is a cache below the host pool, never a source of truth: whatever
// goes wrong — the store down, slow past a timeout, the connection lost
// mid-read, a key evicted — the caller sees a miss and prefills, and the
// counters say which. A connection that fails is closed and not tried again
// until a back-off has passed (doubling from backoff_ms_min to backoff_ms_max,
// reset by the next success), so a dead store costs one timeout per back-off,
// not one per request.
//
// get_chain() sends every GET of a key chain in one pipeline (one round trip)
// and keeps the leading values up to the first miss: a block is useful only if
// every block before it is there too. put() is one SET; with `if_absent`, SET NX,
// which the store applies atomically: a value already under the key stays.
//
// A TierStore is used from one thread; the counters (TierCounters) may be
// shared by several stores and read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "activekv/result.hpp"

struct redisContext;

namespace activekv::tier {

struct TierStoreConfig {
  std::string host;                         // from redis://host:port
  std::uint16_t port = 6379;
  std::uint32_t connect_timeout_ms = 200;
  std::uint32_t command_timeout_ms = 500;   // a store slower than this is a miss
  std::uint32_t backoff_ms_min = 100;       // first wait after a failed connection
  std::uint32_t backoff_ms_max = 5000;
};

// "redis://host:port" (port optional, 6379) into host and port; names `setting` when malformed.
Result<TierStoreConfig> parse_tier_url(std::string_view url, std::string_view setting);

// Every outcome of the tier, counted (the metrics activekv_tier_*_total).
struct TierCounters {
  std::atomic<std::uint64_t> hits{0};            // blocks read and accepted
  std::atomic<std::uint64_t> misses{0};          // lookups that stopped short (absent, refused, or failed)
  std::atomic<std::uint64_t> errors{0};          // connection, timeout and protocol failures
  std::atomic<std::uint64_t> refused{0};         // values read but refused (checksum, version, geometry...)
  std::atomic<std::uint64_t> bytes_read{0};
  std::atomic<std::uint64_t> bytes_written{0};
  std::atomic<std::uint64_t> writes{0};          // blocks stored
  std::atomic<std::uint64_t> dropped_writes{0};  // blocks not stored: queue full or the store failed
  std::atomic<std::uint64_t> kept_writes{0};     // less complete blocks not stored: the key held a block already
  std::atomic<std::uint64_t> reconnects{0};      // connections opened after a failure
};

class TierStore {
 public:
  TierStore(TierStoreConfig config, TierCounters* counters);
  ~TierStore();
  TierStore(const TierStore&) = delete;
  TierStore& operator=(const TierStore&) = delete;

  // GETs keys[0..n) in one pipeline; values[i] holds key i's value for i < the
  // returned count, which stops at the first absent key or at any failure.
  // Counts bytes read and errors; hits and misses are the caller's (it decodes).
  std::size_t get_chain(std::span<const std::string> keys, std::vector<std::string>& values);

  enum class Put : std::uint8_t { stored, kept, failed };
  // SET key value; failed on any failure (counted as an error). With `if_absent`, SET NX: kept when
  // the key already held a value (left as it was; bytes not counted as written).
  Put put(std::string_view key, std::span<const std::byte> value, bool if_absent);
  bool put(std::string_view key, std::span<const std::byte> value) { return put(key, value, false) == Put::stored; }

  // True while a connection is open (after a success, before a failure).
  bool connected() const noexcept { return context_ != nullptr; }
  const TierStoreConfig& config() const noexcept { return config_; }

 private:
  bool ensure_connected();
  void fail(const char* what);

  TierStoreConfig config_;
  TierCounters* counters_;
  redisContext* context_ = nullptr;
  bool ever_connected_ = false;
  std::uint32_t backoff_ms_ = 0;
  std::chrono::steady_clock::time_point retry_at_{};
};

}  // namespace activekv::tier
