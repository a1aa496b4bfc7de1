// What the server checks of a request's head before it reads the body or
// routes it: the body's framing (cpp-httplib 0.11 reads a chunked body,
// or one without a length, whole and without a limit, and skips an
// oversized Content-Length body byte by byte), the Host a browser page
// could forge by DNS rebinding, the Origin of a cross-site page, and the
// media type of an inference body. Pure functions over the parsed head:
// the fuzzer and the unit tests call them without a socket.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tierkv::server {

// A refusal: the HTTP status and a message naming the header.
struct HeadRefusal {
  int status = 400;
  std::string message;
};

// The parts of a request head the checks look at. Header names are
// matched case-insensitively by the caller (httplib does); `content_length`
// holds every Content-Length value sent, in order.
struct RequestHead {
  std::string method;
  std::string version;  // "HTTP/1.1", "HTTP/1.0"
  std::vector<std::string> content_length;
  std::vector<std::string> transfer_encoding;
  std::optional<std::string> host;
  std::optional<std::string> origin;
  std::optional<std::string> content_type;
};

// How a request's body arrives, once its framing is accepted.
struct BodyFraming {
  bool chunked = false;
  size_t length = 0;  // Content-Length (0 when chunked or absent on a method without a body)
};

// The head of a parsed request. A Host sent more than once is kept as
// malformed (an empty name).
RequestHead HeadOf(const httplib::Request& q);

// Content-Length: digits only, one value (repeats must agree), at most
// max_body (413 otherwise, before a byte of the body is read);
// Transfer-Encoding: "chunked" alone (501 for another coding), never beside
// a Content-Length (400: the pair request smuggling relies on). A POST, PUT
// or PATCH with neither gets 411; a body on a method that has none (GET,
// HEAD, OPTIONS) gets 400, since it would be read as the next request.
std::variant<BodyFraming, HeadRefusal> CheckFraming(const RequestHead& head, size_t max_body);

// Header names must be tokens and values free of control characters (but
// tab): "Transfer-Encoding : chunked" (a space before the colon) or an
// obs-fold line is refused (400), not taken for another header, since a
// proxy in front may read it the other way (request smuggling).
std::optional<HeadRefusal> CheckHeaderSyntax(const httplib::Headers& headers);

// The names a Host header may carry for a server listening on `listen_host`:
// the listen address and, on a loopback address, localhost, 127.0.0.1 and
// ::1; plus `extra` (--allowed-hosts). Empty: any name (a wildcard listen
// address without --allowed-hosts, or "*" among them).
std::vector<std::string> AllowedHostNames(const std::string& listen_host,
                                          const std::vector<std::string>& extra);
// The name of a Host header or an Origin's authority without its port,
// lower-cased ("[::1]:8080" -> "::1"); nullopt when malformed.
std::optional<std::string> HostName(std::string_view authority);

// Host must name one of `allowed` (any when empty); HTTP/1.1 requests must
// send one. Origin, when sent, must be `cors_origin` or this server itself
// (a name in `allowed` at `port`): another site's page is refused (403).
std::optional<HeadRefusal> CheckHostAndOrigin(const RequestHead& head,
                                              const std::vector<std::string>& allowed, int port,
                                              const std::string& cors_origin);

// An inference body must be JSON: Content-Type application/json (any
// parameters); 415 otherwise, so a page's form or text/plain post (which a
// browser sends cross-site without asking) is refused.
std::optional<HeadRefusal> CheckJsonBody(const RequestHead& head);

// Whether `host` is a loopback address or name (127.0.0.0/8, ::1, localhost).
bool IsLoopbackHost(const std::string& host);

}  // namespace tierkv::server
