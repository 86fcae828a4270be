// connection_gate.hpp — where connections wait for a whole request without holding a thread.
//
// The picture. cpp-httplib gives every accepted connection a worker thread that
// blocks reading it, so 64 clients that send half a header and wait hold all 64
// workers until their read time-outs, and /health waits behind them (issue 24:
// 300 such connections made /health take 23 s). The gate sits between accept
// and the workers: one thread with an epoll set reads every connection's bytes
// into its buffer, and a connection goes to a worker only once it holds one
// whole request (request_frame.hpp). Between requests a kept-alive connection
// comes back to the gate. A worker therefore never waits on a client's reads;
// it is held only while a request is answered (a stream, for its whole length).
//
// Limits, each stated by a setting:
//  - connections open in all (`max_connections`) and per client address
//    (`max_connections_per_client`): one beyond gets a 503 naming the limit, then the socket closes;
//  - a request must be read whole within `request_timeout_s` of the connection's
//    arrival (or of its previous answer): else 408 and close;
//  - a connection with no byte of a request closes after `idle_timeout_s`;
//  - a header above 16 KiB gets 431, a body above `body_bytes_max` 413.
// GET /health and GET /metrics go to a pool of their own (`probe_threads`), so
// they answer while every worker is busy with a stream.
//
// Invariant: every accepted socket is in exactly one place — the gate's epoll
// set, a pool's queue, a worker — or closed; the open count per address is the
// number of such sockets from that address, and the sum is `open()`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "server/request_frame.hpp"

namespace httplib {
class Stream;
}

namespace activekv::server {

class IoThreadPool;

struct GateSettings {
  std::uint32_t workers = 64;                     // threads that answer requests
  std::uint32_t probe_threads = 2;                // threads for GET /health and GET /metrics
  std::uint32_t max_connections = 256;            // open connections in all
  std::uint32_t max_connections_per_client = 64;  // open connections from one client address
  double request_timeout_s = 10;                  // arrival (or previous answer) to the request read whole
  double idle_timeout_s = 2;                      // a kept-alive connection with no new request closes
  double write_timeout_s = 5;                     // a client that reads nothing for this long is dropped
  std::uint32_t requests_per_connection = 100;    // then the answer says Connection: close
  FrameLimits frame{};
};

struct GateCounters {
  std::uint64_t accepted = 0;
  std::uint64_t refused_total = 0;       // beyond max_connections
  std::uint64_t refused_per_client = 0;  // beyond max_connections_per_client
  std::uint64_t timed_out = 0;           // a request not read whole within request_timeout_s (408)
  std::uint64_t refused_framing = 0;     // 400 / 413 / 431 from the gate
  std::uint32_t open = 0;                // connections open now
};

class ConnectionGate {
 public:
  // Answers one request read from the stream: httplib's process_request. `close` asks it to end the
  // connection; it sets `closed` when the request did (Connection: close). False on a broken connection.
  using Answer = std::function<bool(httplib::Stream& stream, bool close, bool& closed)>;

  ConnectionGate(const GateSettings& settings, Answer answer);
  ~ConnectionGate();
  ConnectionGate(const ConnectionGate&) = delete;
  ConnectionGate& operator=(const ConnectionGate&) = delete;

  void start();
  // A socket just accepted: kept (the gate reads its request) or refused with a 503 and closed.
  void admit(int fd);
  // Closes every waiting connection, lets the requests already read finish, joins every thread.
  void shutdown();
  GateCounters counters() const;

  struct Connection;

 private:
  void loop();
  void watch(std::unique_ptr<Connection> c);  // into the epoll set, or on to a pool if a request is whole
  void on_readable(int fd);
  void expire();
  void dispatch(std::unique_ptr<Connection> c, bool probe);
  void serve(std::unique_ptr<Connection> c);
  void close_connection(std::unique_ptr<Connection> c);
  void refuse(std::unique_ptr<Connection> c, int status, const char* reason);

  GateSettings settings_;
  Answer answer_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::unique_ptr<IoThreadPool> workers_;
  std::unique_ptr<IoThreadPool> probes_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  bool shut_ = false;
  mutable std::mutex mu_;  // guards everything below
  std::unordered_map<int, std::unique_ptr<Connection>> waiting_;  // in the epoll set, by descriptor
  std::unordered_map<std::string, std::uint32_t> open_per_client_;
  GateCounters counters_{};
};

}  // namespace activekv::server
