// connection_gate.cpp — the epoll thread that reads requests whole, and the pools that answer them (see connection_gate.hpp).
#include "server/connection_gate.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <vector>

#include "activekv/assert.hpp"
#include "server/io_thread_pool.hpp"
#include "server/peer_socket.hpp"
#include "testing/alloc_counter.hpp"

namespace activekv::server {

using Clock = std::chrono::steady_clock;

struct ConnectionGate::Connection {
  int fd = -1;
  std::string client;           // the peer's numeric address: the per-client count's key
  int client_port = 0;
  std::string local;            // this end's numeric address and port
  int local_port = 0;
  std::string bytes;            // read from the client and not yet answered
  std::size_t request_bytes = 0;  // while a worker holds it: the whole request's length in `bytes`
  Clock::time_point since{};    // arrival, or the end of the previous answer
  std::uint32_t answered = 0;
  bool continue_sent = false;   // "100 Continue" written for the request being read
  bool client_done = false;     // the client closed its side after its last request
};

namespace {

// One whole request, already read, as the httplib::Stream that process_request reads; writes go to the socket.
class GateStream final : public httplib::Stream {
 public:
  GateStream(ConnectionGate::Connection& c, int write_timeout_ms) : c_(c), write_timeout_ms_(write_timeout_ms) {}
  bool is_readable() const override { return pos_ < c_.request_bytes; }
  bool is_writable() const override {
    pollfd p{c_.fd, POLLOUT, 0};
    return ::poll(&p, 1, write_timeout_ms_) > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
  }
  ssize_t read(char* ptr, std::size_t size) override {
    // The gate framed the request: nothing beyond it is the handler's, and nothing is waited for.
    const std::size_t n = std::min(size, c_.request_bytes - pos_);
    std::copy_n(c_.bytes.data() + pos_, n, ptr);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, std::size_t size) override {
    if (!is_writable()) return -1;
    return ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.client;
    port = c_.client_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local;
    port = c_.local_port;
  }
  socket_t socket() const override { return c_.fd; }

 private:
  ConnectionGate::Connection& c_;
  int write_timeout_ms_;
  std::size_t pos_ = 0;
};

const char* status_text(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

bool is_probe(const std::string& b) {
  for (const char* path : {"GET /health", "GET /metrics"}) {
    const std::size_t n = std::char_traits<char>::length(path);
    if (b.size() > n && b.compare(0, n, path) == 0 && (b[n] == ' ' || b[n] == '?')) return true;
  }
  return false;
}

double seconds_since(Clock::time_point t, Clock::time_point now) { return std::chrono::duration<double>(now - t).count(); }

}  // namespace

ConnectionGate::ConnectionGate(const GateSettings& settings, Answer answer)
    : settings_(settings), answer_(std::move(answer)) {
  AK_ASSERT(settings.workers >= 1, "the gate needs a worker");
  AK_ASSERT(settings.probe_threads >= 1, "the gate needs a probe thread");
  AK_ASSERT(settings.max_connections_per_client >= 1 && settings.max_connections_per_client <= settings.max_connections,
            "per-client connections within the total");
}

ConnectionGate::~ConnectionGate() {
  if (started_ && !shut_) shutdown();
}

void ConnectionGate::start() {
  AK_ASSERT(!started_, "the gate starts once");
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  AK_ASSERT(epoll_fd_ >= 0 && wake_fd_ >= 0, "epoll and eventfd are available on Linux");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  workers_ = std::make_unique<IoThreadPool>(settings_.workers);
  probes_ = std::make_unique<IoThreadPool>(settings_.probe_threads);
  started_ = true;
  thread_ = std::thread([this] {
    testing::mark_io_thread();
    loop();
  });
}

void ConnectionGate::admit(int fd) {
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->since = Clock::now();
  socket_address(fd, true, &c->client, &c->client_port);
  socket_address(fd, false, &c->local, &c->local_port);
  std::lock_guard lock(mu_);
  ++counters_.accepted;
  if (stopping_.load()) {
    ::close(fd);
    return;
  }
  if (counters_.open >= settings_.max_connections) {
    ++counters_.refused_total;
    const std::string why = fmt::format("the server holds its limit of {} open connections (--max-connections); retry later",
                                        settings_.max_connections);
    return refuse(std::move(c), 503, why.c_str());
  }
  std::uint32_t& mine = open_per_client_[c->client];
  if (mine >= settings_.max_connections_per_client) {
    ++counters_.refused_per_client;
    const std::string why = fmt::format(
        "this client address holds {} open connections, the limit per client (--max-connections-per-client); close some "
        "or retry later",
        settings_.max_connections_per_client);
    return refuse(std::move(c), 503, why.c_str());
  }
  ++mine;
  ++counters_.open;
  watch(std::move(c));
}

// Called with mu_ held.
void ConnectionGate::watch(std::unique_ptr<Connection> c) {
  if (stopping_.load()) return close_connection(std::move(c));
  const Frame f = frame_request(c->bytes, settings_.frame);
  if (f.state == Frame::State::complete) {
    c->request_bytes = f.bytes;
    const bool probe = is_probe(c->bytes);
    return dispatch(std::move(c), probe);
  }
  if (f.state == Frame::State::refused) {
    ++counters_.refused_framing;
    --counters_.open;
    if (--open_per_client_[c->client] == 0) open_per_client_.erase(c->client);
    return refuse(std::move(c), f.status, f.reason);
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c->fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev);
  waiting_[c->fd] = std::move(c);
}

void ConnectionGate::loop() {
  std::vector<epoll_event> events(256);
  while (!stopping_.load()) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 50);
    for (int i = 0; i < n; ++i) {
      if (events[static_cast<std::size_t>(i)].data.fd == wake_fd_) {
        std::uint64_t v = 0;
        [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof(v));
        continue;
      }
      on_readable(events[static_cast<std::size_t>(i)].data.fd);
    }
    expire();
  }
}

void ConnectionGate::on_readable(int fd) {
  std::lock_guard lock(mu_);
  auto it = waiting_.find(fd);
  if (it == waiting_.end()) return;
  Connection& c = *it->second;
  const std::size_t cap = settings_.frame.header_bytes_max + settings_.frame.body_bytes_max + 1;
  bool gone = false;
  char buf[65536];
  while (c.bytes.size() < cap) {
    const ssize_t r = ::recv(fd, buf, std::min(sizeof(buf), cap - c.bytes.size()), MSG_DONTWAIT);
    if (r > 0) {
      c.bytes.append(buf, static_cast<std::size_t>(r));
      continue;
    }
    gone = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    break;
  }
  std::unique_ptr<Connection> owned = std::move(it->second);
  waiting_.erase(it);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  const Frame f = frame_request(owned->bytes, settings_.frame);
  if (gone && f.state != Frame::State::complete) return close_connection(std::move(owned));  // left mid-request
  owned->client_done = gone;  // a whole request, then a half-close: answered, then closed
  if (f.state == Frame::State::partial && f.expects_continue && !owned->continue_sent) {
    static constexpr char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    owned->continue_sent = ::send(fd, cont, sizeof(cont) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) > 0;
  }
  watch(std::move(owned));
}

void ConnectionGate::expire() {
  const Clock::time_point now = Clock::now();
  std::lock_guard lock(mu_);
  std::vector<int> idle, late;
  for (const auto& [fd, c] : waiting_) {
    const double waited = seconds_since(c->since, now);
    if (c->bytes.empty() && waited > settings_.idle_timeout_s) idle.push_back(fd);
    else if (!c->bytes.empty() && waited > settings_.request_timeout_s) late.push_back(fd);
  }
  for (const int fd : idle) {
    std::unique_ptr<Connection> c = std::move(waiting_[fd]);
    waiting_.erase(fd);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close_connection(std::move(c));
  }
  for (const int fd : late) {
    std::unique_ptr<Connection> c = std::move(waiting_[fd]);
    waiting_.erase(fd);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    ++counters_.timed_out;
    --counters_.open;
    if (--open_per_client_[c->client] == 0) open_per_client_.erase(c->client);
    const std::string why = fmt::format("the request was not read whole within {} s (--request-timeout)",
                                        settings_.request_timeout_s);
    refuse(std::move(c), 408, why.c_str());
  }
}

// Called with mu_ held: the pool's own lock is taken inside, never the other way round.
void ConnectionGate::dispatch(std::unique_ptr<Connection> c, bool probe) {
  Connection* raw = c.release();
  (probe ? probes_ : workers_)->enqueue([this, raw] { serve(std::unique_ptr<Connection>(raw)); });
}

void ConnectionGate::serve(std::unique_ptr<Connection> c) {
  const bool last = stopping_.load() || c->client_done || c->answered + 1 >= settings_.requests_per_connection;
  bool closed = false;
  bool ok = false;
  {
    GateStream stream(*c, static_cast<int>(settings_.write_timeout_s * 1000));
    ok = answer_(stream, last, closed);
  }
  ++c->answered;
  c->bytes.erase(0, c->request_bytes);
  c->request_bytes = 0;
  c->continue_sent = false;
  c->since = Clock::now();
  std::lock_guard lock(mu_);
  if (!ok || closed || last || c->client_done) return close_connection(std::move(c));
  watch(std::move(c));
}

// Called with mu_ held, for a connection counted as open.
void ConnectionGate::close_connection(std::unique_ptr<Connection> c) {
  --counters_.open;
  if (--open_per_client_[c->client] == 0) open_per_client_.erase(c->client);
  ::shutdown(c->fd, SHUT_RDWR);
  ::close(c->fd);
}

// Called with mu_ held, for a connection not counted as open: answers and closes it.
void ConnectionGate::refuse(std::unique_ptr<Connection> c, int status, const char* reason) {
  const std::string body = fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":null}}}})", reason,
                                       status == 503 ? "server_error" : "invalid_request_error");
  const std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n", status,
      status_text(status), body.size(), status == 503 ? "Retry-After: 1\r\n" : "");
  const std::string all = head + body;
  [[maybe_unused]] const ssize_t sent = ::send(c->fd, all.data(), all.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  // What the client sent and nobody read would turn the close into a reset that can overtake the answer.
  char sink[4096];
  for (int i = 0; i < 16 && ::recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; ++i) {
  }
  ::shutdown(c->fd, SHUT_WR);
  ::close(c->fd);
}

void ConnectionGate::shutdown() {
  if (!started_ || shut_) return;
  stopping_.store(true);
  std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof(one));
  thread_.join();
  {
    std::lock_guard lock(mu_);
    for (auto& [fd, c] : waiting_) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      close_connection(std::move(c));
    }
    waiting_.clear();
  }
  // Requests already read are answered (each then closes its connection: stopping_ is set).
  workers_->shutdown();
  probes_->shutdown();
  ::close(epoll_fd_);
  ::close(wake_fd_);
  shut_ = true;
  AK_ASSERT(counters_.open == 0, "every connection closed at shutdown");
}

GateCounters ConnectionGate::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

}  // namespace activekv::server
