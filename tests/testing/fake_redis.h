// A hostile Redis for tests (issue 57): it answers the login and EXISTS as
// Redis does, then answers every GET or GETRANGE the way an attacker or a
// broken server might: a byte every 100 ms (kDrip), a bulk string announced
// at 1 GB then zeros as fast as the client takes them (kHugeBulk), an array
// announced with 2^31-1 elements then elements (kHugeArray), or never
// (kSilent). Loopback, an ephemeral port, a thread per connection; stopped
// when it goes away.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tierkv::testing {

// A listening socket on an ephemeral loopback port (*port gets it): the
// server side of the tests' Redis stand-ins.
inline int ListenOnLoopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  ::listen(fd, 64);
  return fd;
}

class FakeRedis {
 public:
  enum class Mode { kDrip, kHugeBulk, kHugeArray, kSilent };

  explicit FakeRedis(Mode mode) : mode_(mode) {
    fd_ = ListenOnLoopback(&port_);
    accept_ = std::thread([this] { AcceptLoop(); });
  }
  ~FakeRedis() {
    stop_ = true;
    accept_.join();
    std::lock_guard<std::mutex> l(mu_);
    for (auto& t : conns_) t.join();
    ::close(fd_);
  }
  FakeRedis(const FakeRedis&) = delete;
  FakeRedis& operator=(const FakeRedis&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int hostile_replies() const { return hostile_; }  // GETs answered with mischief

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard<std::mutex> l(mu_);
      conns_.emplace_back([this, c] { Serve(c); ::close(c); });
    }
  }

  // Sends all of `s`; false once the client is gone or we stop.
  bool Send(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size() && !stop_) {
      pollfd p{c, POLLOUT, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return !stop_;
  }

  // The next whole command in `buf` (RESP arrays of bulk strings), removed;
  // its name upper-cased, or "" when none is whole yet.
  static std::string NextCommand(std::string* buf, size_t* argc_out) {
    size_t pos = 0;
    auto line = [&](std::string* out) {
      const size_t e = buf->find("\r\n", pos);
      if (e == std::string::npos) return false;
      *out = buf->substr(pos, e - pos);
      pos = e + 2;
      return true;
    };
    std::string l;
    if (!line(&l) || l.empty() || l[0] != '*') return "";
    const size_t argc = std::stoul(l.substr(1));
    std::string name;
    for (size_t i = 0; i < argc; ++i) {
      if (!line(&l) || l.empty() || l[0] != '$') return "";
      const size_t n = std::stoul(l.substr(1));
      if (buf->size() < pos + n + 2) return "";
      if (i == 0) name = buf->substr(pos, n);
      pos += n + 2;
    }
    buf->erase(0, pos);
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    *argc_out = argc;
    return name;
  }

  void Serve(int c) {
    std::string buf;
    char tmp[65536];
    while (!stop_) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return;
      buf.append(tmp, static_cast<size_t>(n));
      size_t argc = 0;
      for (std::string cmd = NextCommand(&buf, &argc); !cmd.empty(); cmd = NextCommand(&buf, &argc)) {
        if (cmd == "GET" || cmd == "GETRANGE") {
          ++hostile_;
          Mischief(c);
          return;  // the reply never ends: the client gives up
        }
        const std::string reply = cmd == "EXISTS" ? ":1\r\n" : cmd == "PING" ? "+PONG\r\n" : "+OK\r\n";
        if (!Send(c, reply)) return;
      }
    }
  }

  void Mischief(int c) {
    switch (mode_) {
      case Mode::kDrip:
        if (!Send(c, "$49152\r\n")) return;
        while (!stop_ && Send(c, "x")) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return;
      case Mode::kHugeBulk: {
        if (!Send(c, "$1000000000\r\n")) return;
        const std::string zeros(1 << 16, '\0');
        while (Send(c, zeros)) {
        }
        return;
      }
      case Mode::kHugeArray: {
        if (!Send(c, "*2147483647\r\n")) return;
        std::string elems;
        for (int i = 0; i < 8192; ++i) elems += ":1\r\n";
        while (Send(c, elems)) {
        }
        return;
      }
      case Mode::kSilent:
        while (!stop_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return;
    }
  }

  const Mode mode_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> hostile_{0};
  std::thread accept_;
  std::mutex mu_;
  std::vector<std::thread> conns_;
};

}  // namespace tierkv::testing
