// Where the remote tier lives and how to log in:
//
//   redis://[[USER:]PASSWORD@]HOST[:PORT][/DB]          one server
//   rediss://...                                        the same over TLS
//   redis-cluster://[[USER:]PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/0]
//   rediss-cluster://...                                a cluster over TLS
//
// A cluster's hosts are seed nodes (the slot map is asked of them); a
// cluster has database 0 only. One word before '@' is a password (Redis's
// `requirepass`, AUTH with one argument), two words are an ACL user and its
// password (`USER:@`: the user, its password from ResolveRedisUrl). USER and PASSWORD may be percent-encoded (%40 for '@'); the last
// '@' ends them, so a raw '@' or '/' in a password works too.
//
// A password is never printed: ToString() and MaskRedisUrl() write "***"
// in its place, and every error here names the URL masked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::remote {

struct Endpoint {
  std::string host;
  int port = 6379;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  bool operator==(const Endpoint&) const = default;
};

struct RedisUrl {
  bool cluster = false;
  bool tls = false;             // rediss:// or rediss-cluster://
  std::vector<Endpoint> nodes;  // one for redis://, the seeds for redis-cluster://
  int db = 0;                   // redis:// only (a cluster has database 0 only)
  std::string user;             // empty: the default user (AUTH PASSWORD)
  std::string password;         // empty: no AUTH
  // The URL with the password as "***" (never the password itself).
  std::string ToString() const;
};

// InvalidArgument naming the bad part (scheme, user, password, host, port,
// database), with the URL masked.
Result<RedisUrl> ParseRedisUrl(std::string_view url);

// `url` with whatever stands between "://" and the last '@' of its hosts
// replaced by "***" (a user name kept): for printing a URL that may not
// parse. A URL without '@' comes back unchanged.
std::string MaskRedisUrl(std::string_view url);

// OK when this build can reach `url`: every scheme, rediss:// and
// rediss-cluster:// included (TLS through OpenSSL: RedisConn and TlsLink;
// the server is verified before the login, so a password never goes out
// in clear text). Kept as the one place a scheme would be refused.
Status CheckSupported(const RedisUrl& url);

// ParseRedisUrl and CheckSupported, then the password when the URL has none: `password`, else
// $TIERKV_REMOTE_PASSWORD (empty or unset: no AUTH). InvalidArgument when
// the URL names a user (USER:@HOST) and no password comes from either.
Result<RedisUrl> ResolveRedisUrl(std::string_view url, const std::string& password = {});

// The environment variable a password may come from instead of the URL
// (a URL is visible in `ps` output; the environment is not).
inline constexpr const char* kRemotePasswordEnv = "TIERKV_REMOTE_PASSWORD";

}  // namespace tierkv::remote
