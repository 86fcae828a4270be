// tier_store.cpp — see tier_store.hpp.
#include "tier/tier_store.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <sys/time.h>

namespace activekv::tier {
namespace {

timeval to_timeval(std::uint32_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

}  // namespace

Result<TierStoreConfig> parse_tier_url(std::string_view url, std::string_view setting) {
  constexpr std::string_view scheme = "redis://";
  const std::string name(setting);
  if (url.substr(0, scheme.size()) != scheme) {
    return make_error(ErrorCode::invalid_argument, name, "the KV tier is a redis://host:port address, for example redis://127.0.0.1:6379");
  }
  std::string_view rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  TierStoreConfig config;
  const std::size_t colon = rest.rfind(':');
  std::string_view host = colon == std::string_view::npos ? rest : rest.substr(0, colon);
  if (host.empty() || host.find_first_of("/@ ") != std::string_view::npos) {
    return make_error(ErrorCode::invalid_argument, name, "the KV tier address needs a host: redis://host:port");
  }
  config.host = std::string(host);
  if (colon != std::string_view::npos) {
    const std::string_view port = rest.substr(colon + 1);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535) {
      return make_error(ErrorCode::invalid_argument, name, "the KV tier port must be a number from 1 to 65535");
    }
    config.port = static_cast<std::uint16_t>(value);
  }
  return config;
}

TierStore::TierStore(TierStoreConfig config, TierCounters* counters)
    : config_(std::move(config)), counters_(counters), backoff_ms_(config_.backoff_ms_min) {}

TierStore::~TierStore() {
  if (context_ != nullptr) redisFree(context_);
}

void TierStore::fail(const char* /*what*/) {
  counters_->errors.fetch_add(1, std::memory_order_relaxed);
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  retry_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms_);
  backoff_ms_ = std::min(config_.backoff_ms_max, std::max(config_.backoff_ms_min, backoff_ms_ * 2));
}

bool TierStore::ensure_connected() {
  if (context_ != nullptr) return true;
  if (std::chrono::steady_clock::now() < retry_at_) return false;  // backing off: a miss, not another timeout
  redisContext* c = redisConnectWithTimeout(config_.host.c_str(), config_.port, to_timeval(config_.connect_timeout_ms));
  if (c == nullptr) {
    fail("connect");
    return false;
  }
  context_ = c;
  if (c->err != 0 || redisSetTimeout(c, to_timeval(config_.command_timeout_ms)) != REDIS_OK) {
    fail("connect");
    return false;
  }
  if (ever_connected_) counters_->reconnects.fetch_add(1, std::memory_order_relaxed);
  ever_connected_ = true;
  return true;
}

std::size_t TierStore::get_chain(std::span<const std::string> keys, std::vector<std::string>& values) {
  values.resize(keys.size());
  if (keys.empty() || !ensure_connected()) return 0;
  for (const std::string& key : keys) {
    if (redisAppendCommand(context_, "GET %b", key.data(), key.size()) != REDIS_OK) {
      fail("append");
      return 0;
    }
  }
  // Every reply is read, even after a miss, so the connection stays in step.
  std::size_t leading = 0;
  bool missed = false;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) {
      fail("read");  // timeout or connection lost mid-read: the rest is a miss
      return leading;
    }
    auto* reply = static_cast<redisReply*>(raw);
    if (!missed && reply->type == REDIS_REPLY_STRING) {
      values[i].assign(reply->str, reply->len);
      counters_->bytes_read.fetch_add(reply->len, std::memory_order_relaxed);
      ++leading;
    } else {
      if (reply->type == REDIS_REPLY_ERROR) counters_->errors.fetch_add(1, std::memory_order_relaxed);
      missed = true;
    }
    freeReplyObject(reply);
  }
  backoff_ms_ = config_.backoff_ms_min;
  return leading;
}

TierStore::Put TierStore::put(std::string_view key, std::span<const std::byte> value, bool if_absent) {
  if (!ensure_connected()) return Put::failed;
  void* raw = if_absent ? redisCommand(context_, "SET %b %b NX", key.data(), key.size(), value.data(), value.size())
                        : redisCommand(context_, "SET %b %b", key.data(), key.size(), value.data(), value.size());
  if (raw == nullptr) {
    fail("set");
    return Put::failed;
  }
  auto* reply = static_cast<redisReply*>(raw);
  // SET answers OK; SET NX answers nil when the key held a value (RESP2; RESP3's null).
  const bool ok = reply->type == REDIS_REPLY_STATUS;
  const bool kept = if_absent && (reply->type == REDIS_REPLY_NIL);
  freeReplyObject(reply);
  if (!ok && !kept) {
    counters_->errors.fetch_add(1, std::memory_order_relaxed);
    return Put::failed;
  }
  backoff_ms_ = config_.backoff_ms_min;
  if (kept) return Put::kept;
  counters_->bytes_written.fetch_add(value.size(), std::memory_order_relaxed);
  return Put::stored;
}

}  // namespace activekv::tier
