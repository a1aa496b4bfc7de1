#include "remote/redis_url.h"

#include <charconv>

namespace tierkv::remote {
namespace {

Status Bad(std::string_view url, const std::string& what) {
  return Status::InvalidArgument("remote " + std::string(url) + ": " + what +
                                 " (expected redis://HOST:PORT[/DB] or "
                                 "redis-cluster://HOST:PORT[,HOST:PORT...])");
}

bool ParseInt(std::string_view s, int lo, int hi, int* out) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

Result<Endpoint> ParseEndpoint(std::string_view url, std::string_view hp) {
  const size_t colon = hp.rfind(':');
  Endpoint e;
  e.host = std::string(hp.substr(0, colon));
  if (e.host.empty()) return Bad(url, "empty host");
  if (e.host.find_first_of("/@?#,: ") != std::string::npos) return Bad(url, "host '" + e.host + "'");
  if (colon != std::string_view::npos &&
      !ParseInt(hp.substr(colon + 1), 1, 65535, &e.port)) {
    return Bad(url, "port '" + std::string(hp.substr(colon + 1)) + "' is not in 1..65535");
  }
  return e;
}

}  // namespace

Result<RedisUrl> ParseRedisUrl(std::string_view url) {
  RedisUrl out;
  std::string_view rest;
  if (url.starts_with("redis://")) {
    rest = url.substr(8);
  } else if (url.starts_with("redis-cluster://")) {
    out.cluster = true;
    rest = url.substr(16);
  } else {
    return Bad(url, "unknown scheme");
  }
  if (!out.cluster) {
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos) {
      if (!ParseInt(rest.substr(slash + 1), 0, 65535, &out.db)) {
        return Bad(url, "database '" + std::string(rest.substr(slash + 1)) + "' is not a number");
      }
      rest = rest.substr(0, slash);
    }
    ASSIGN_OR_RETURN(Endpoint e, ParseEndpoint(url, rest));
    out.nodes.push_back(std::move(e));
    return out;
  }
  if (rest.find('/') != std::string_view::npos) return Bad(url, "a cluster has no database number");
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    ASSIGN_OR_RETURN(Endpoint e, ParseEndpoint(url, rest.substr(0, comma)));
    out.nodes.push_back(std::move(e));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (out.nodes.empty()) return Bad(url, "no node");
  return out;
}

}  // namespace tierkv::remote
