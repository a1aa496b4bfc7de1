#include "server/http_guard.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tierkv::server {

namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `ms` (negative: 0) for `events` on fd; true when ready.
bool WaitFor(int fd, short events, int64_t ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(ms, INT32_MAX))));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

void Endpoint(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int r = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (r != 0) return;
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// Who a connection's peer is, for the per-address cap: an IPv4 address's 4
// bytes (also when IPv4-mapped), an IPv6 address's first 8 (a /64: one
// client is commonly given a whole /64); empty when unknown.
std::string AddressKey(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    return std::string(reinterpret_cast<const char*>(&v4.sin_addr), 4);
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    const auto* b = reinterpret_cast<const char*>(&v6.sin6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) return std::string(b + 12, 4);
    return std::string(b, 8);
  }
  return {};
}

// One connection's bytes, read through a small buffer (httplib reads a
// request's head a byte at a time). Every read of a request must happen
// before its deadline; writes wait at most write_timeout for room.
class ConnectionStream final : public httplib::Stream {
 public:
  // `stopping`: true once the server stops listening; a request still
  // being read then ends at once instead of at its deadline.
  ConnectionStream(int fd, std::chrono::milliseconds write_timeout, std::function<bool()> stopping)
      : fd_(fd), write_timeout_ms_(write_timeout.count()), stopping_(std::move(stopping)) {}

  void StartRequest(Clock::time_point deadline) {
    deadline_ = deadline;
    timed_out_ = false;
    head_done_ = false;
    head_too_large_ = false;
    head_bytes_ = 0;
    last4_ = 0;
  }
  bool timed_out() const { return timed_out_; }
  bool head_too_large() const { return head_too_large_; }
  bool buffered() const { return off_ < len_; }

  bool is_readable() const override { return buffered() || WaitFor(fd_, POLLIN, LeftMs()); }
  bool is_writable() const override { return WaitFor(fd_, POLLOUT, write_timeout_ms_); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      // In slices, so that a stopping server is noticed.
      for (;;) {
        const int64_t left = LeftMs();
        if (left <= 0) {
          timed_out_ = true;
          return -1;
        }
        if (stopping_()) return -1;
        if (WaitFor(fd_, POLLIN, std::min<int64_t>(left, 200))) break;
      }
      ssize_t n;
      do {
        n = ::recv(fd_, buf_, sizeof buf_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - off_);
    if (!head_done_) {
      // The head (request line and headers) ends at its first empty line;
      // cpp-httplib grows a line until its end before it checks its length,
      // and counts no headers, so a head that does not end is cut here.
      for (size_t i = 0; i < n; ++i) {
        last4_ = (last4_ << 8) | static_cast<unsigned char>(buf_[off_ + i]);
        if (last4_ == 0x0d0a0d0au) {  // CRLF CRLF, as cpp-httplib ends a head
          head_done_ = true;
          n = i + 1;  // the rest is the body's, counted from here
          break;
        }
      }
      head_bytes_ += n;
      if (!head_done_ && head_bytes_ > GuardedHttpServer::kMaxHeadBytes) {
        head_too_large_ = true;
        return -1;
      }
    }
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!WaitFor(fd_, POLLOUT, write_timeout_ms_)) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { Endpoint(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { Endpoint(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  int64_t LeftMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
  }

  const int fd_;
  const int64_t write_timeout_ms_;
  const std::function<bool()> stopping_;
  bool head_done_ = false, head_too_large_ = false;
  size_t head_bytes_ = 0;
  uint32_t last4_ = 0;  // the last bytes of the head read, newest lowest
  Clock::time_point deadline_ = Clock::now();
  bool timed_out_ = false;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

// What the thread serving a connection knows of it (a worker serves one
// connection at a time; handlers run on the same thread).
struct ThreadConnection {
  ConnectionStream* stream = nullptr;
  bool close_after = false;
};
thread_local ThreadConnection t_conn;
// Set on the accepting thread while it refuses a connection inline.
thread_local bool t_refusing = false;

// httplib listens with SO_REUSEPORT, which lets a second process bind the
// same port and take half the connections. Only SO_REUSEADDR here (a
// restart may bind while old connections sit in TIME_WAIT).
void ListenSocketOptions(socket_t sock) {
  int yes = 1;
  ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

// Closes a connection the way a client still sending (a body the server
// refused unread) sees the answer: the write side first, then what the
// client sends is read and dropped for up to 1 s or 1 MiB, then the socket
// closes. Closing with unread bytes would reset the connection, and a reset
// can reach the client before it has read the refusal.
void LingeringClose(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + std::chrono::seconds(1);
  size_t dropped = 0;
  char buf[16384];
  while (dropped < (1u << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0 || !WaitFor(fd, POLLIN, left)) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

size_t FitConnectionsToFileLimit(size_t connections, size_t reserve) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return connections;
  const rlim_t want = static_cast<rlim_t>(connections + reserve);
  if (r.rlim_cur < want) {
    rlimit raised = r;
    raised.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  if (r.rlim_cur >= want) return connections;
  return r.rlim_cur > reserve + 16 ? static_cast<size_t>(r.rlim_cur - reserve) : 16;
}

// Workers started as connections arrive, up to max_connections, then kept
// idle for the next ones. A connection beyond them is refused on the
// accepting thread (httplib calls enqueue there).
class GuardedHttpServer::Pool final : public httplib::TaskQueue {
 public:
  explicit Pool(size_t max) : max_(max) {}
  ~Pool() override = default;

  void enqueue(std::function<void()> fn) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (busy_ + jobs_.size() < max_) {
        jobs_.push_back(std::move(fn));
        // A worker for each waiting connection: idle_ counts the workers
        // waiting (or woken and not yet running), each of which takes one.
        if (jobs_.size() > idle_ && threads_.size() < max_) threads_.emplace_back([this] { Work(); });
        cv_.notify_one();
        return;
      }
    }
    // Every worker is in use: fn runs here, and process_and_close_socket
    // answers 503 without reading (a write to a fresh socket does not block).
    t_refusing = true;
    fn();
    t_refusing = false;
  }

  void shutdown() override {
    {
      std::unique_lock<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    pthread_setname_np(pthread_self(), "tierkv-http");
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(l, [&] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stop_, and nothing left to serve
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
      l.unlock();
      fn();
      l.lock();
      --busy_;
    }
  }

  const size_t max_;
  // std::mutex, not util/mutex.h's: the condition variable waits on it.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  std::vector<std::thread> threads_;        // guarded by mu_ (grown in enqueue, joined in shutdown)
  size_t busy_ = 0, idle_ = 0;              // guarded by mu_
  bool stop_ = false;                       // guarded by mu_
};

GuardedHttpServer::GuardedHttpServer(ConnectionLimits limits) : limits_(limits) {
  set_socket_options(ListenSocketOptions);
  const size_t max = limits_.max_connections;
  new_task_queue = [max] { return new Pool(max); };
  set_keep_alive_max_count(limits_.keep_alive_requests);
  // Only what the Keep-Alive header says: the wait itself is ServeConnection's.
  set_keep_alive_timeout(
      std::max<time_t>(1, std::chrono::duration_cast<std::chrono::seconds>(limits_.keep_alive).count()));
}

GuardedHttpServer::~GuardedHttpServer() = default;

ConnectionCounts GuardedHttpServer::counts() const {
  return ConnectionCounts{open_.load(), refused_.load(), refused_per_address_.load(), timed_out_.load()};
}

void GuardedHttpServer::WidenBacklog(int n) {
  if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, n);
}

void GuardedHttpServer::CloseAfterResponse() { t_conn.close_after = true; }

bool GuardedHttpServer::ClosingAfterResponse() { return t_conn.close_after; }

bool GuardedHttpServer::RequestTimedOut() { return t_conn.stream && t_conn.stream->timed_out(); }

bool GuardedHttpServer::HeadTooLarge() { return t_conn.stream && t_conn.stream->head_too_large(); }

void GuardedHttpServer::Refuse(int fd, const char* message) {
  const std::string body = std::string(R"({"error":{"message":")") + message +
                           R"(","type":"server_error","param":null,"code":503}})";
  const std::string resp = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                           "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)::send(fd, resp.data(), resp.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

bool GuardedHttpServer::EnterAddress(const std::string& address) {
  MutexLock l(&addr_mu_);
  size_t& n = per_address_[address];
  if (n >= limits_.max_per_address) {
    if (n == 0) per_address_.erase(address);
    return false;
  }
  ++n;
  return true;
}

void GuardedHttpServer::LeaveAddress(const std::string& address) {
  MutexLock l(&addr_mu_);
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  if (t_refusing) {
    ++refused_;
    Refuse(sock, "the server is serving its maximum of connections; retry later");
    return false;
  }
  // On the worker: the accepting thread never waits on the address lock.
  const std::string address = AddressKey(sock);
  if (!EnterAddress(address)) {
    ++refused_per_address_;
    Refuse(sock, "this address holds its maximum of connections; retry later");
    return false;
  }
  ServeConnection(sock, &address);
  return true;
}

void GuardedHttpServer::ServeConnection(int fd, const std::string* address) {
  ++open_;
  ConnectionStream stream(fd, limits_.write_timeout,
                          [this] { return is_running() && svr_sock_ == INVALID_SOCKET; });
  t_conn = ThreadConnection{&stream, false};
  // A stopped listener ends its connections between requests (a server
  // that never listened, the fuzzer's, serves the one it is given).
  for (size_t left = limits_.keep_alive_requests; left > 0; --left) {
    if (is_running() && svr_sock_ == INVALID_SOCKET) break;
    if (!stream.buffered() && !WaitFor(fd, POLLIN, limits_.keep_alive.count())) break;
    stream.StartRequest(Clock::now() + limits_.request_timeout);
    bool closed = false;
    const bool ok = process_request(stream, left == 1, closed, nullptr);
    if (stream.timed_out()) ++timed_out_;
    // Cut inside the request line: httplib wrote nothing (a cut in the
    // headers or the body is answered 431 or 408 by the error handler).
    const char* cut = stream.timed_out() ? "408 Request Timeout"
                      : stream.head_too_large() ? "431 Request Header Fields Too Large"
                                                : nullptr;
    if (!ok && cut != nullptr) {
      const std::string answer =
          std::string("HTTP/1.1 ") + cut + "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
      (void)stream.write(answer.data(), answer.size());
    }
    if (!ok || closed || t_conn.close_after || stream.timed_out() || stream.head_too_large()) break;
  }
  t_conn = ThreadConnection{};
  if (address != nullptr) LeaveAddress(*address);
  LingeringClose(fd);
  --open_;
}

}  // namespace tierkv::server
