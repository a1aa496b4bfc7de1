// Whether the client of an HTTP request is still there. cpp-httplib 0.11
// (Debian's) tells a handler the connection's endpoints but not its socket,
// and a non-streamed handler writes nothing until it is done, so a client
// that hangs up would go unnoticed until its whole generation had run. The
// socket is found by its two endpoints, the first time Gone() is asked
// (most requests end before a worker looks, and never pay for the search):
// its inode in the kernel's TCP
// table (/proc/self/net/tcp, tcp6), then the descriptor whose link names
// that inode (other threads' descriptors are never touched). It stays open
// (and so cannot be reused) while the handler runs, because the worker that
// runs the handler owns it.
#pragma once

#include <string>

namespace tierkv::server {

class PeerWatch {
 public:
  // The connection whose local and remote endpoints are these. Nothing is
  // looked up yet.
  PeerWatch(std::string local_addr, int local_port, std::string remote_addr, int remote_port);
  // True once the peer has closed its side or reset the connection. A peer
  // that sent more bytes (a pipelined request) is still there; a socket
  // that cannot be found (an endpoint httplib left empty) is never gone.
  // Never blocks. Called from the one worker that owns the request.
  bool Gone() const;

 private:
  const std::string local_addr_, remote_addr_;
  const int local_port_, remote_port_;
  // Found on the first Gone(): the socket's descriptor, or -1.
  mutable bool searched_ = false;
  mutable int fd_ = -1;
};

}  // namespace tierkv::server
