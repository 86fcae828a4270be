// peer_socket_test.cpp — a loopback connection found by its addresses; its client's close and reset seen by a peek.
#include "server/peer_socket.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace activekv::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  EXPECT_EQ(rc, 0);
  return ntohs(a.sin_port);
}

// A listening socket on 127.0.0.1 and one accepted connection: {listener, client, server side}.
struct Connection {
  int listener = -1, client = -1, server = -1;
  Connection() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    a.sin_port = htons(static_cast<std::uint16_t>(port_of(listener, false)));
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server = accept(listener, nullptr, nullptr);
    EXPECT_GE(server, 0);
  }
  ~Connection() {
    for (const int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
};

TEST(PeerSocket, FindsTheServerSideOfAConnectionByItsAddresses) {
  Connection c;
  const int server_port = port_of(c.server, false), client_port = port_of(c.client, false);
  EXPECT_EQ(find_connection_socket("127.0.0.1", server_port, "127.0.0.1", client_port), c.server);
  // The same pair seen from the other end is the client's socket: the match has a direction.
  EXPECT_EQ(find_connection_socket("127.0.0.1", client_port, "127.0.0.1", server_port), c.client);
  EXPECT_EQ(find_connection_socket("127.0.0.1", server_port, "127.0.0.1", client_port == 1 ? 2 : 1), -1);
  EXPECT_EQ(find_connection_socket("127.0.0.2", server_port, "127.0.0.1", client_port), -1);
}

TEST(PeerSocket, SeesAnOrderlyCloseButNotPendingData) {
  Connection c;
  EXPECT_FALSE(peer_closed(c.server));
  ASSERT_EQ(send(c.client, "x", 1, 0), 1);
  EXPECT_FALSE(peer_closed(c.server));  // a pipelined request is not a close, and the peek leaves it there
  char byte = 0;
  ASSERT_EQ(recv(c.server, &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'x');
  close(c.client);
  c.client = -1;
  EXPECT_TRUE(peer_closed(c.server));
}

TEST(PeerSocket, SeesAReset) {
  Connection c;
  linger l{1, 0};  // close with a reset
  ASSERT_EQ(setsockopt(c.client, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
  close(c.client);
  c.client = -1;
  EXPECT_TRUE(peer_closed(c.server));
  EXPECT_TRUE(peer_closed(c.server));  // and keeps seeing it
}

}  // namespace
}  // namespace activekv::server
