// tierkv inspect --remote: what a remote tier holds for one model.
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "remote/remote_tier.h"
#include "remote/router.h"
#include "tierkv/elapsed.h"
#include "tierkv/remote.h"

namespace tierkv {

Result<RemoteInventory> InspectRemote(const std::string& url, uint64_t fingerprint, uint32_t timeout_ms) {
  ASSIGN_OR_RETURN(remote::RedisUrl u, remote::ResolveRedisUrl(url));
  remote::Router router(u, std::chrono::milliseconds(timeout_ms));
  char pattern[64];
  std::snprintf(pattern, sizeof pattern, "tierkv:{%016" PRIx64 ".*", fingerprint);
  RemoteInventory out;
  std::set<std::string> chunks;
  for (const remote::Endpoint& e : router.Servers()) {
    std::vector<remote::Reply> r;
    remote::ErrorKind kind;
    const std::vector<remote::Command> ping = {{"PING"}};
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(router.RunOn(e, ping, &r, &kind));
    out.ping_ms = std::max(out.ping_ms,
                           MsSince(t0));
    ++out.servers;
    std::string cursor = "0";
    do {
      const std::vector<remote::Command> scan = {{"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}};
      RETURN_IF_ERROR(router.RunOn(e, scan, &r, &kind));
      if (r[0].type != remote::Reply::Type::kArray || r[0].elements.size() != 2) {
        return Status::Unavailable("redis " + e.ToString() + ": SCAN: " + r[0].str);
      }
      cursor = r[0].elements[0].str;
      std::vector<remote::Command> lens;
      for (const remote::Reply& k : r[0].elements[1].elements) {
        lens.push_back({"STRLEN", k.str});
        chunks.insert(k.str.substr(0, k.str.rfind(':')));
      }
      if (lens.empty()) continue;
      std::vector<remote::Reply> n;
      RETURN_IF_ERROR(router.RunOn(e, lens, &n, &kind));
      for (const remote::Reply& x : n) out.bytes += static_cast<uint64_t>(x.integer);
      out.chunk_layers += lens.size();
    } while (cursor != "0");
  }
  out.chunks = chunks.size();
  return out;
}

}  // namespace tierkv
