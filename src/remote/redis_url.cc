#include "remote/redis_url.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

namespace tierkv::remote {
namespace {

struct Scheme {
  std::string_view prefix;
  bool cluster, tls;
};
constexpr Scheme kSchemes[] = {{"redis://", false, false},
                               {"rediss://", false, true},
                               {"redis-cluster://", true, false},
                               {"rediss-cluster://", true, true}};

Status Bad(std::string_view url, const std::string& what) {
  return Status::InvalidArgument("remote " + MaskRedisUrl(url) + ": " + what +
                                 " (expected redis[s]://[[USER:]PASSWORD@]HOST:PORT[/DB] or "
                                 "redis[s]-cluster://[[USER:]PASSWORD@]HOST:PORT[,HOST:PORT...])");
}

bool ParseInt(std::string_view s, int lo, int hi, int* out) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// %XX sequences decoded; false for a '%' not followed by two hex digits.
bool PercentDecode(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (s.size() - i < 3 || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      return false;
    }
    int v = 0;
    std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
    out->push_back(static_cast<char>(v));
    i += 2;
  }
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

// Where the user information ends in `rest` (the URL after "://"): its last
// '@', or npos.
size_t UserInfoEnd(std::string_view rest) { return rest.rfind('@'); }

}  // namespace

std::string MaskRedisUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) {
    // Not a URL at all: whatever precedes an '@' may still be a secret.
    const size_t at = url.rfind('@');
    return at == std::string_view::npos ? std::string(url) : "***" + std::string(url.substr(at));
  }
  const std::string_view rest = url.substr(scheme + 3);
  const size_t at = UserInfoEnd(rest);
  if (at == std::string_view::npos) return std::string(url);
  const std::string_view info = rest.substr(0, at);
  const size_t colon = info.find(':');
  std::string out(url.substr(0, scheme + 3));
  if (colon != std::string_view::npos) out += std::string(info.substr(0, colon + 1));  // the user stays
  out += "***";
  out += rest.substr(at);
  return out;
}

std::string RedisUrl::ToString() const {
  std::string out = std::string(tls ? "rediss" : "redis") + (cluster ? "-cluster" : "") + "://";
  if (!password.empty()) {
    out += (user.empty() ? std::string() : user + ":") + "***@";
  } else if (!user.empty()) {
    out += user + ":@";
  }
  for (size_t i = 0; i < nodes.size(); ++i) out += (i == 0 ? "" : ",") + nodes[i].ToString();
  if (db != 0) out += "/" + std::to_string(db);
  return out;
}

Result<RedisUrl> ParseRedisUrl(std::string_view url) {
  RedisUrl out;
  std::string_view rest;
  bool known = false;
  for (const Scheme& s : kSchemes) {
    if (url.starts_with(s.prefix)) {
      out.cluster = s.cluster;
      out.tls = s.tls;
      rest = url.substr(s.prefix.size());
      known = true;
      break;
    }
  }
  if (!known) return Bad(url, "unknown scheme");
  if (const size_t at = UserInfoEnd(rest); at != std::string_view::npos) {
    const std::string_view info = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = info.find(':');
    const std::string_view user = colon == std::string_view::npos ? std::string_view() : info.substr(0, colon);
    const std::string_view pass = colon == std::string_view::npos ? info : info.substr(colon + 1);
    // Never quote the password in an error: only what is wrong with it.
    // "USER:@": the user's password comes from elsewhere (ResolveRedisUrl).
    if (pass.empty() && user.empty()) return Bad(url, "empty password before '@' (leave out the '@' for none)");
    if (!PercentDecode(user, &out.user)) return Bad(url, "user: '%' not followed by two hex digits");
    if (!PercentDecode(pass, &out.password)) return Bad(url, "password: '%' not followed by two hex digits");
    if (out.user.find_first_of(" \r\n") != std::string::npos) return Bad(url, "user: spaces or line breaks");
  }
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !ParseInt(db, 0, 65535, &out.db)) {
      return Bad(url, "database '" + std::string(db) + "' is not a number in 0..65535");
    }
    if (out.cluster && out.db != 0) {
      return Bad(url, "database " + std::to_string(out.db) + ": a Redis Cluster has database 0 only");
    }
    rest = rest.substr(0, slash);
  }
  if (!out.cluster) {
    ASSIGN_OR_RETURN(Endpoint e, ParseEndpoint(url, rest));
    out.nodes.push_back(std::move(e));
    return out;
  }
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    ASSIGN_OR_RETURN(Endpoint e, ParseEndpoint(url, rest.substr(0, comma)));
    out.nodes.push_back(std::move(e));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  if (out.nodes.empty()) return Bad(url, "no node");
  return out;
}

Status CheckSupported(const RedisUrl& url) {
  if (url.nodes.empty()) return Status::InvalidArgument("remote " + url.ToString() + ": no node");
  return Status::Ok();
}

Result<RedisUrl> ResolveRedisUrl(std::string_view url, const std::string& password) {
  ASSIGN_OR_RETURN(RedisUrl out, ParseRedisUrl(url));
  RETURN_IF_ERROR(CheckSupported(out));
  if (!out.password.empty()) return out;
  out.password = password;
  if (out.password.empty()) {
    const char* env = std::getenv(kRemotePasswordEnv);
    if (env != nullptr) out.password = env;
  }
  if (out.password.empty() && !out.user.empty()) {
    return Status::InvalidArgument("remote " + out.ToString() + ": user '" + out.user + "' has no password: put it in $" +
                                   kRemotePasswordEnv + " (or the URL, USER:PASSWORD@HOST)");
  }
  return out;
}

}  // namespace tierkv::remote
