// Where the remote tier lives: `redis://HOST:PORT[/DB]` (one server) or
// `redis-cluster://HOST:PORT[,HOST:PORT...]` (seed nodes of a Redis Cluster;
// the slot map is asked of them).
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
  std::vector<Endpoint> nodes;  // one for redis://, the seeds for redis-cluster://
  int db = 0;                   // redis:// only (a cluster has database 0 only)
};

// InvalidArgument naming the bad part (scheme, host, port, database).
Result<RedisUrl> ParseRedisUrl(std::string_view url);

}  // namespace tierkv::remote
