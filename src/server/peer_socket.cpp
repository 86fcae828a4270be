// peer_socket.cpp — finding a connection's socket by its addresses; peeking for the peer's close (see peer_socket.hpp).
#include "server/peer_socket.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>

namespace activekv::server {

bool socket_address(int fd, bool peer, std::string* host, int* port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return false;
  if (a.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  } else if (a.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  } else {
    return false;
  }
  std::array<char, NI_MAXHOST> buf{};
  if (getnameinfo(sa, len, buf.data(), static_cast<socklen_t>(buf.size()), nullptr, 0, NI_NUMERICHOST) != 0) return false;
  *host = buf.data();
  return true;
}

int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  std::string host;
  int port = 0;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (!socket_address(static_cast<int>(fd), false, &host, &port) || port != local_port || host != local_addr) continue;
    if (!socket_address(static_cast<int>(fd), true, &host, &port) || port != remote_port || host != remote_addr) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  char byte = 0;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // more to read (a pipelined request): still there
  if (n == 0) return true;  // the peer's FIN
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // a reset, or the socket is gone
}

}  // namespace activekv::server
