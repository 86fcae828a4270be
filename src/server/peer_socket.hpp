// peer_socket.hpp — the socket a cpp-httplib handler's connection runs on, and whether its client has gone.
//
// cpp-httplib 0.11.4 hands a handler the connection's addresses but not its
// socket, and tells it of a closed connection only when it writes. A
// non-streamed answer is written once, at the end, so its handler finds the
// socket by those addresses and peeks at it while the request runs.
// Invariant: the descriptor found is the handler's own connection — a TCP
// connection's (local, peer) address pair is unique among open sockets, and
// cpp-httplib closes the connection only after its handler returns, so the
// descriptor cannot be closed and reused while the handler holds it.
#pragma once

#include <string>

namespace activekv::server {

// The descriptor of this process's socket whose local and peer addresses are these (numeric
// hosts as cpp-httplib writes them); -1 when there is none, or /proc/self/fd cannot be read.
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port);

// True once the peer has closed its side of the connection (an orderly close, half-close
// included, or a reset); false while it is open, including when it has sent more to read.
bool peer_closed(int fd);

// The numeric host (as cpp-httplib writes it) and port of a socket's local end, or its peer's with
// `peer`; false when the socket has no such address (closed, or not IPv4/IPv6).
bool socket_address(int fd, bool peer, std::string* host, int* port);

}  // namespace activekv::server
