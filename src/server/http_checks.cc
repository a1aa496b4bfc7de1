#include "server/http_checks.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace tierkv::server {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

HeadRefusal Refuse(int status, std::string message) { return HeadRefusal{status, std::move(message)}; }

bool MethodHasBody(const std::string& m) { return m == "POST" || m == "PUT" || m == "PATCH"; }
// cpp-httplib reads a body only for these; another method's body would be
// parsed as the connection's next request.
bool MethodMayHaveBody(const std::string& m) { return MethodHasBody(m) || m == "DELETE"; }

}  // namespace

RequestHead HeadOf(const httplib::Request& q) {
  RequestHead h;
  h.method = q.method;
  h.version = q.version;
  const auto values = [&](const char* name) {
    std::vector<std::string> out;
    const size_t n = q.get_header_value_count(name);
    for (size_t i = 0; i < n; ++i) out.push_back(q.get_header_value(name, i));
    return out;
  };
  h.content_length = values("Content-Length");
  h.transfer_encoding = values("Transfer-Encoding");
  const std::vector<std::string> hosts = values("Host");
  if (!hosts.empty()) h.host = hosts.size() == 1 ? hosts[0] : std::string();
  if (q.has_header("Origin")) h.origin = q.get_header_value("Origin");
  if (q.has_header("Content-Type")) h.content_type = q.get_header_value("Content-Type");
  return h;
}

std::variant<BodyFraming, HeadRefusal> CheckFraming(const RequestHead& head, size_t max_body) {
  BodyFraming f;
  if (!head.transfer_encoding.empty()) {
    if (!head.content_length.empty()) {
      return Refuse(400, "Transfer-Encoding: not allowed beside Content-Length");
    }
    if (head.transfer_encoding.size() != 1 || Lower(Trim(head.transfer_encoding[0])) != "chunked") {
      return Refuse(501, "Transfer-Encoding: only \"chunked\" is supported");
    }
    if (head.version == "HTTP/1.0") return Refuse(400, "Transfer-Encoding: not defined in HTTP/1.0");
    if (!MethodMayHaveBody(head.method)) return Refuse(400, "Transfer-Encoding: a " + head.method + " request has no body");
    f.chunked = true;
    return f;
  }
  if (head.content_length.empty()) {
    if (MethodHasBody(head.method)) {
      return Refuse(411, "Content-Length: required (or Transfer-Encoding: chunked)");
    }
    return f;
  }
  std::string_view first = Trim(head.content_length[0]);
  for (const std::string& v : head.content_length) {
    const std::string_view t = Trim(v);
    if (!AllDigits(t)) return Refuse(400, "Content-Length: not a non-negative integer: '" + std::string(t.substr(0, 32)) + "'");
    if (t != first) return Refuse(400, "Content-Length: conflicting values sent");
  }
  uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(first.data(), first.data() + first.size(), n);
  if (ec != std::errc() || ptr != first.data() + first.size() || n > max_body) {
    return Refuse(413, "body: larger than the server's limit of " + std::to_string(max_body) + " bytes");
  }
  if (n > 0 && !MethodMayHaveBody(head.method)) {
    return Refuse(400, "Content-Length: a " + head.method + " request has no body");
  }
  f.length = static_cast<size_t>(n);
  return f;
}

std::optional<HeadRefusal> CheckHeaderSyntax(const httplib::Headers& headers) {
  static const std::string_view kTokenPunct = "!#$%&'*+-.^_`|~";
  for (const auto& [name, value] : headers) {
    if (name.empty()) return Refuse(400, "headers: a header without a name");
    for (unsigned char c : name) {
      if (!std::isalnum(c) && kTokenPunct.find(static_cast<char>(c)) == std::string_view::npos) {
        return Refuse(400, "headers: '" + name.substr(0, 64) + "' is not a header name (no spaces before the colon)");
      }
    }
    for (unsigned char c : value) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        return Refuse(400, "headers: " + name.substr(0, 64) + ": a control character in the value");
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> HostName(std::string_view authority) {
  authority = Trim(authority);
  if (authority.empty()) return std::nullopt;
  std::string_view name;
  std::string_view rest;
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    name = authority.substr(1, close - 1);
    rest = authority.substr(close + 1);
  } else {
    const size_t colon = authority.find(':');
    name = authority.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : authority.substr(colon);
  }
  if (!rest.empty() && (rest.front() != ':' || !AllDigits(rest.substr(1)))) return std::nullopt;
  if (name.empty()) return std::nullopt;
  for (unsigned char c : name) {
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '_')) return std::nullopt;
  }
  return Lower(name);
}

bool IsLoopbackHost(const std::string& host) {
  const std::string h = Lower(host);
  return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0;
}

std::vector<std::string> AllowedHostNames(const std::string& listen_host,
                                          const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  for (const std::string& e : extra) {
    if (Trim(e) == "*") return {};
    if (auto n = HostName(e)) out.push_back(*n);
  }
  const std::string h = Lower(listen_host);
  const bool wildcard = h == "0.0.0.0" || h == "::" || h.empty();
  if (wildcard) {
    // Any address of this machine: its names are not known here. Without
    // --allowed-hosts every Host is accepted (the server's own docs say so).
    if (extra.empty()) return {};
  } else {
    if (auto n = HostName(h.find(':') != std::string::npos && h.front() != '[' ? "[" + h + "]" : h)) {
      out.push_back(*n);
    }
  }
  if (wildcard || IsLoopbackHost(h)) {
    for (const char* n : {"localhost", "127.0.0.1", "::1"}) out.push_back(n);
  }
  return out;
}

std::optional<HeadRefusal> CheckHostAndOrigin(const RequestHead& head,
                                              const std::vector<std::string>& allowed, int port,
                                              const std::string& cors_origin) {
  const auto listed = [&](const std::string& name) {
    return allowed.empty() || std::find(allowed.begin(), allowed.end(), name) != allowed.end();
  };
  if (!head.host) {
    if (head.version != "HTTP/1.0") return Refuse(400, "Host: required in HTTP/1.1");
  } else {
    const auto name = HostName(*head.host);
    if (!name) return Refuse(400, "Host: malformed");
    if (!listed(*name)) {
      return Refuse(403, "Host: '" + *name +
                             "' is not a name of this server (tierkv serve --allowed-hosts adds one)");
    }
  }
  if (head.origin) {
    const std::string origin(Trim(*head.origin));
    if (!cors_origin.empty() && origin == cors_origin) return std::nullopt;
    // Same origin: http://<an allowed name>:<our port>.
    const std::string_view scheme = "http://";
    if (origin.rfind(scheme, 0) == 0) {
      const std::string_view authority = std::string_view(origin).substr(scheme.size());
      const auto name = HostName(authority);
      const size_t colon = authority.rfind(':');
      const bool port_ok = colon != std::string_view::npos && authority.back() != ']' &&
                           authority.substr(colon + 1) == std::to_string(port);
      if (name && port_ok && !allowed.empty() && listed(*name)) return std::nullopt;
    }
    return Refuse(403, "Origin: '" + origin.substr(0, 100) +
                           "' may not use this server (tierkv serve --cors-origin allows one)");
  }
  return std::nullopt;
}

std::optional<HeadRefusal> CheckJsonBody(const RequestHead& head) {
  const std::string type = head.content_type ? Lower(Trim(head.content_type->substr(
                                                   0, head.content_type->find(';'))))
                                             : "";
  if (type == "application/json") return std::nullopt;
  return Refuse(415, "Content-Type: must be application/json, got '" +
                         (head.content_type ? head.content_type->substr(0, 100) : std::string("none")) +
                         "'");
}

}  // namespace tierkv::server
