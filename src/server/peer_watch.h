// Whether the client of an HTTP request is still there. cpp-httplib 0.11
// (Debian's) tells a handler the connection's endpoints but not its socket,
// and a non-streamed handler writes nothing until it is done, so a client
// that hangs up would go unnoticed until its whole generation had run. The
// socket is found once by its two endpoints: its inode in the kernel's TCP
// table (/proc/self/net/tcp, tcp6), then the descriptor whose link names
// that inode (other threads' descriptors are never touched). It stays open
// (and so cannot be reused) while the handler runs, because the worker that
// runs the handler owns it.
#pragma once

#include <string>

namespace tierkv::server {

class PeerWatch {
 public:
  // The connected socket whose local and remote endpoints are these; when
  // none is found (an endpoint httplib left empty), Gone() is always false.
  PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
            int remote_port);
  // True once the peer has closed its side or reset the connection. A peer
  // that sent more bytes (a pipelined request) is still there. Never blocks.
  bool Gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace tierkv::server
