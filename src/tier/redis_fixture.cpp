// redis_fixture.cpp — see redis_fixture.hpp.
#include "tier/redis_fixture.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace activekv::tier::testing {
namespace {

std::uint16_t free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  std::uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

RedisServer::~RedisServer() { stop(); }

bool RedisServer::available() { return std::system("command -v redis-server >/dev/null 2>&1") == 0; }

bool RedisServer::start(std::uint16_t port) {
  port_ = port != 0 ? port : free_port();
  const std::string port_text = std::to_string(port_);
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // a test that aborts takes its server with it
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) {
      dup2(null_fd, 1);
      dup2(null_fd, 2);
    }
    execlp("redis-server", "redis-server", "--port", port_text.c_str(), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--loglevel", "warning", static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 250; ++i) {
    if (command("PING") == "PONG") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void RedisServer::stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGCONT);
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void RedisServer::pause() {
  if (pid_ > 0) kill(pid_, SIGSTOP);
}

void RedisServer::resume() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

std::string RedisServer::command(const std::string& text) {
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
  if (c == nullptr) return "";
  std::string out;
  if (c->err == 0) {
    redisSetTimeout(c, tv);
    auto* reply = static_cast<redisReply*>(redisCommand(c, text.c_str()));
    if (reply != nullptr) {
      if (reply->str != nullptr) out.assign(reply->str, reply->len);
      freeReplyObject(reply);
    }
  }
  redisFree(c);
  return out;
}

}  // namespace activekv::tier::testing
