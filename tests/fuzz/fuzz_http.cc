// libFuzzer target: the server's HTTP framing. The input is a connection's
// bytes (request lines, headers, Content-Length or chunked bodies, several
// requests in a row), fed over a socketpair to GuardedHttpServer's
// connection loop (cpp-httplib's parser with the server's deadline), with
// the server's head checks (http_checks.h) and a body read as the server
// reads it, under a 4 KiB limit. Traps: a handler saw a body over the
// limit, a head the checks refused reached a handler, or an answer that is
// not an HTTP/1.1 status line.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "server/http_checks.h"
#include "server/http_guard.h"

namespace {

constexpr size_t kLimit = 4096;


bool Refused(const httplib::Request& q) {
  const auto head = tierkv::server::HeadOf(q);
  static const auto allowed = tierkv::server::AllowedHostNames("127.0.0.1", {});
  if (tierkv::server::CheckHostAndOrigin(head, allowed, 8080, "").has_value()) return true;
  return std::holds_alternative<tierkv::server::HeadRefusal>(tierkv::server::CheckFraming(head, kLimit));
}

tierkv::server::GuardedHttpServer* MakeServer() {
  tierkv::server::ConnectionLimits l;
  l.request_timeout = std::chrono::milliseconds(200);
  l.keep_alive = std::chrono::milliseconds(20);
  l.write_timeout = std::chrono::milliseconds(200);
  auto* s = new tierkv::server::GuardedHttpServer(l);
  s->set_payload_max_length(kLimit);
  s->set_pre_routing_handler([](const httplib::Request& q, httplib::Response& r) {
    if (!Refused(q)) return httplib::Server::HandlerResponse::Unhandled;
    r.status = 400;
    tierkv::server::GuardedHttpServer::CloseAfterResponse();
    return httplib::Server::HandlerResponse::Handled;
  });
  s->Post("/v1/completions", [](const httplib::Request& q, httplib::Response& r,
                                const httplib::ContentReader& read) {
    if (Refused(q)) __builtin_trap();
    std::string body;
    bool over = false;
    const bool ok = read([&](const char* d, size_t n) {
      if (n > kLimit - body.size()) {
        over = true;
        return false;
      }
      body.append(d, n);
      return true;
    });
    if (body.size() > kLimit) __builtin_trap();
    if (!ok || over) tierkv::server::GuardedHttpServer::CloseAfterResponse();
    r.status = over ? 413 : ok ? 200 : 400;
    r.set_content(std::to_string(body.size()), "text/plain");
  });
  s->Get("/health", [](const httplib::Request&, httplib::Response& r) { r.set_content("ok", "text/plain"); });
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static tierkv::server::GuardedHttpServer* server = MakeServer();
  if (size > 65536) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return 0;
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fds[0], data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fds[0], SHUT_WR);
  server->ServeConnection(fds[1]);  // closes fds[1]
  std::string answer;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fds[0], buf, sizeof buf, MSG_DONTWAIT)) > 0;) answer.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  if (!answer.empty() && answer.rfind("HTTP/1.1 ", 0) != 0) __builtin_trap();
  return 0;
}
