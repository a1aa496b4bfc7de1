#include "server/peer_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace tierkv::server {

namespace {

// An address as /proc/net/tcp{,6} prints it (each 32-bit word of the
// network-order address in host order, hex) back to text.
std::string ProcAddress(const std::string& hex) {
  char text[INET6_ADDRSTRLEN] = {};
  if (hex.size() == 8) {
    in_addr a{};
    a.s_addr = static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16));
    inet_ntop(AF_INET, &a, text, sizeof text);
  } else if (hex.size() == 32) {
    in6_addr a{};
    for (int w = 0; w < 4; ++w) {
      const uint32_t v =
          static_cast<uint32_t>(std::strtoul(hex.substr(8 * w, 8).c_str(), nullptr, 16));
      std::memcpy(&a.s6_addr[4 * w], &v, 4);
    }
    inet_ntop(AF_INET6, &a, text, sizeof text);
  }
  return text;
}

// The inode of the TCP socket with these endpoints, from the kernel's table
// (no descriptor of another thread is touched); 0 when none.
unsigned long SocketInode(const char* table, const std::string& la, int lp, const std::string& ra,
                          int rp) {
  std::ifstream f(table);
  std::string line;
  std::getline(f, line);  // the column names
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string slot, local, remote, state, queues, timer, retr, uid, timeout;
    unsigned long inode = 0;
    if (!(in >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode))
      continue;
    const size_t lc = local.find(':'), rc = remote.find(':');
    if (lc == std::string::npos || rc == std::string::npos) continue;
    if (std::strtol(local.c_str() + lc + 1, nullptr, 16) != lp ||
        std::strtol(remote.c_str() + rc + 1, nullptr, 16) != rp) {
      continue;
    }
    if (ProcAddress(local.substr(0, lc)) == la && ProcAddress(remote.substr(0, rc)) == ra)
      return inode;
  }
  return 0;
}

// The descriptor of ours that is socket `inode`: /proc/self/fd's links are
// read (a path operation), never the descriptors themselves.
int DescriptorOf(unsigned long inode) {
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    char link[64];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(path.c_str(), link, sizeof link);
    if (n > 0 && std::string(link, static_cast<size_t>(n)) == want) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace

PeerWatch::PeerWatch(std::string local_addr, int local_port, std::string remote_addr,
                     int remote_port)
    : local_addr_(std::move(local_addr)),
      remote_addr_(std::move(remote_addr)),
      local_port_(local_port),
      remote_port_(remote_port) {}

bool PeerWatch::Gone() const {
  if (!searched_) {
    searched_ = true;
    const std::string &la = local_addr_, &ra = remote_addr_;
    if (la.empty() || ra.empty() || local_port_ < 0 || remote_port_ < 0) return false;
    unsigned long inode = SocketInode("/proc/self/net/tcp", la, local_port_, ra, remote_port_);
    if (inode == 0) inode = SocketInode("/proc/self/net/tcp6", la, local_port_, ra, remote_port_);
    if (inode != 0) fd_ = DescriptorOf(inode);
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;  // end of stream; n > 0 is a pipelined request
  }
  return false;
}

}  // namespace tierkv::server
