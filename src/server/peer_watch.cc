#include "server/peer_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace tierkv::server {

namespace {

// "addr:port" of a socket address, the form httplib's strings are compared in.
bool SameEndpoint(const sockaddr_storage& a, const std::string& addr, int port) {
  char text[INET6_ADDRSTRLEN] = {};
  int p = -1;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    p = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    p = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  return p == port && addr == text;
}

bool Matches(int fd, const std::string& la, int lp, const std::string& ra, int rp) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage local{}, remote{};
  socklen_t ll = sizeof local, rl = sizeof remote;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &rl) != 0) return false;
  return SameEndpoint(local, la, lp) && SameEndpoint(remote, ra, rp);
}

}  // namespace

PeerWatch::PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port) {
  if (local_addr.empty() || remote_addr.empty() || local_port < 0 || remote_port < 0) return;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(d)) continue;
    if (Matches(static_cast<int>(fd), local_addr, local_port, remote_addr, remote_port)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(d);
}

bool PeerWatch::Gone() const {
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
