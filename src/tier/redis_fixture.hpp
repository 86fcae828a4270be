// redis_fixture.hpp — a private redis-server for a test: a free loopback port, no persistence.
//
// start() forks `redis-server --port N --bind 127.0.0.1 --save '' --appendonly no`
// and waits until it answers PING; stop() sends SIGTERM and reaps it; pause()
// and resume() (SIGSTOP / SIGCONT) make it a store that accepts nothing and
// answers nothing — a stalled connection. The destructor stops it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace activekv::tier::testing {

class RedisServer {
 public:
  RedisServer() = default;
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  static bool available();                  // redis-server is on PATH
  bool start(std::uint16_t port = 0);       // 0: a free port; false if it did not come up in 5 s
  void stop();
  void pause();
  void resume();
  // Runs one command on a fresh connection ("FLUSHALL"); the reply as text, or "" on failure.
  std::string command(const std::string& text);

  std::uint16_t port() const noexcept { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

}  // namespace activekv::tier::testing
