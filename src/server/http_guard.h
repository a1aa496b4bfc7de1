// The server's connections, on cpp-httplib 0.11's request parser and routes
// but with the limits it lacks:
//   - a deadline for reading a whole request (head and body), so a client
//     that sends a byte every few seconds holds a worker for at most
//     `request_timeout` (httplib's own timeout is per read) and then gets 408;
//   - at most `max_connections` connections served at once, each on its own
//     worker (started as needed, kept); one more is answered 503 at once
//     on the accepting thread and closed, never queued behind slow ones;
//   - at most `max_per_address` of them from one client address (an IPv6
//     client's /64), so that one client's idle or dripping sockets never
//     take every worker: one more is answered 503 at once and closed;
//   - a request head (line and headers) of at most kMaxHeadBytes (431);
//     cpp-httplib grows a line until it ends and counts no headers;
//   - a listening socket without SO_REUSEPORT (httplib sets it), so a
//     second server on the same port fails with "address in use" instead of
//     sharing the port;
//   - a connection closes after any response that did not read the request's
//     body (a refusal from the head), so unread bytes are never parsed as
//     the next request.
// Threads: the caller's (Run: httplib's accept loop), one `tierkv-http`
// worker per connection in service.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "tierkv/mutex.h"

namespace tierkv::server {

struct ConnectionLimits {
  size_t max_connections = 256;
  size_t max_per_address = 64;                       // of max_connections, from one address
  std::chrono::milliseconds request_timeout{30000};  // head and body of one request
  std::chrono::milliseconds keep_alive{2000};        // idle wait for the next request
  size_t keep_alive_requests = 100;                  // requests per connection
  std::chrono::milliseconds write_timeout{10000};    // a client that stops reading
};

struct ConnectionCounts {
  uint64_t open = 0;        // connections in service now
  uint64_t refused = 0;     // answered 503 because max_connections were open
  uint64_t refused_per_address = 0;  // answered 503: their address held max_per_address
  uint64_t timed_out = 0;   // requests not received within request_timeout (408)
};

// Raises the process's open-file limit (the soft one, up to the hard one)
// so that `connections` sockets fit beside `reserve` other descriptors (the
// store's files, the model); the connections that fit (`connections` when
// all do). Beyond the limit accept() fails and new clients hang instead of
// getting the 503.
size_t FitConnectionsToFileLimit(size_t connections, size_t reserve);

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(ConnectionLimits limits);
  ~GuardedHttpServer() override;

  ConnectionCounts counts() const;
  // After bind: a listen backlog of `n` (cpp-httplib 0.11 listens with 5, so
  // a burst of clients overflowed the accept queue and some saw their
  // request go unanswered); Linux takes a second listen() as the new size.
  void WidenBacklog(int n);
  const ConnectionLimits& limits() const { return limits_; }

  // Serves one connection on the calling thread until it closes, as a
  // worker does (requests in turn, keep-alive, the deadline), then closes
  // `fd`. The fuzzer drives the parser through it over a socketpair.
  // `address`, when given, is left (LeaveAddress) once the last response is
  // written, before the lingering close: a client that saw its answer end
  // and connects again is never refused for the connection it closed.
  void ServeConnection(int fd, const std::string* address = nullptr);

  // For a handler: the connection of the request this thread is answering
  // closes after the response (its body was not read, or the server drains).
  static void CloseAfterResponse();
  static bool ClosingAfterResponse();
  // For the error handler: whether this thread's current request ran out of
  // its deadline while being read.
  static bool RequestTimedOut();
  // Whether this thread's current request's head (request line and
  // headers) passed kMaxHeadBytes before it ended (431).
  static bool HeadTooLarge();
  static constexpr size_t kMaxHeadBytes = 64 * 1024;

 private:
  class Pool;
  bool process_and_close_socket(socket_t sock) override;
  // Answers 503 with `message`, without reading, and closes.
  void Refuse(int fd, const char* message);
  // Counts a connection against its address; false (nothing counted) when
  // the address already holds max_per_address.
  bool EnterAddress(const std::string& address) TIERKV_EXCLUDES(addr_mu_);
  void LeaveAddress(const std::string& address) TIERKV_EXCLUDES(addr_mu_);

  const ConnectionLimits limits_;
  std::atomic<uint64_t> open_{0}, refused_{0}, refused_per_address_{0}, timed_out_{0};
  Mutex addr_mu_;
  // Connections in service by client address (AddressKey); none at 0.
  std::unordered_map<std::string, size_t> per_address_ TIERKV_GUARDED_BY(addr_mu_);
};

}  // namespace tierkv::server
