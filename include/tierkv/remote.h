// The remote tier: a Redis server or Redis Cluster below the disk tier,
// shared by every tierkv process of one model (docs/remote.md).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv {

// Which chunks go up to the remote tier.
enum class RemoteAdmit {
  kReused,  // a chunk reused from the local store by at least two requests (Dynamo KVBM's filter)
  kAlways,  // every chunk a request stores
};
Result<RemoteAdmit> ParseRemoteAdmit(std::string_view name);  // InvalidArgument naming them

// What a selective reader fetches of a chunk only the remote tier holds.
enum class RemoteRead {
  kWhole,      // every row: the chunk is admitted into the local disk tier and pools
  kImportant,  // the first retention x chunk rows of each layer in the value's importance order
               // (GETRANGE), attended to as they are (CaR's sparsified far tier); nothing is
               // admitted locally. Values without an order (an as-like writer) are fetched whole.
};
Result<RemoteRead> ParseRemoteRead(std::string_view name);  // InvalidArgument naming them

struct RemoteOptions {
  // redis[s]://[[USER:]PASSWORD@]HOST:PORT[/DB] or
  // redis[s]-cluster://[[USER:]PASSWORD@]HOST:PORT[,HOST:PORT...]
  // (src/remote/redis_url.h; rediss: TLS, tls_* below); empty: no remote tier. Printed
  // with the password masked, never as given.
  std::string url;
  // The password when the URL has none (`redis://HOST` or
  // `redis://USER:@HOST`); empty: $TIERKV_REMOTE_PASSWORD, read when the
  // tier opens; both empty: no AUTH. Never printed.
  std::string password;
  // rediss:// only (a TLS file with redis:// is refused by Validate): PEM
  // files. The server's certificate is always verified, against
  // tls_ca_file (empty: the system's CA store), and must name the host
  // connected to (its DNS name, or its IP address for an IP literal).
  // tls_cert_file and tls_key_file: a client certificate and its key for
  // servers that ask for one (mutual TLS; empty: none; key empty: in the
  // certificate's file).
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  // The file holding the servers' shared key(s) that seal and open values
  // (src/remote/seal.h; one per line, the first seals; mode 0600); empty:
  // $TIERKV_REMOTE_KEY. A remote tier without a key does not open: a value
  // anyone who can write to Redis could have made is never served.
  std::string key_file;
  // Bound on one whole pipeline (connect, login, sends, every reply); a
  // slower server is a miss.
  uint32_t timeout_ms = 250;
  RemoteAdmit admit = RemoteAdmit::kReused;
  // Chunks waiting to go up; a write that finds the queue full is dropped
  // (counted): a request never waits for Redis.
  uint32_t queue_chunks = 1024;
  // Chunks one request looks up past its local match.
  uint32_t max_fetch_chunks = 256;
  // Prompts whose lookups run ahead of their requests (a server's queue:
  // Engine::FetchAhead); more are dropped (counted).
  uint32_t ahead_prompts = 64;
  // Selective systems below retention 1 only; the others always read whole values.
  RemoteRead read = RemoteRead::kWhole;
  Status Validate() const;  // InvalidArgument naming the field
};

// What the remote tier did (a process's totals).
struct RemoteStats {
  uint64_t lookups = 0;            // requests that looked past their local match
  uint64_t hits = 0;               // chunks fetched, verified and admitted locally
  uint64_t misses = 0;             // lookups that found no (further) chunk
  uint64_t corrupt = 0;            // values failing any check: seal, checksum, identity (never served)
  uint64_t rejected = 0;           // of those, values whose seal does not match (forged, copied from another
                                   // key, or damaged): also in corrupt
  uint64_t unsealed = 0;           // values without a seal of a key this server holds (another deployment's,
                                   // or an older tierkv's): a miss, not corrupt
  uint64_t bytes_down = 0, bytes_up = 0;
  uint64_t uploads = 0;            // chunks Redis accepted: "OK" to the SET of every layer
  uint64_t upload_refusals = 0;    // chunks Redis answered with an error (OOM, NOAUTH, READONLY, a refused
                                   // login...): not stored; neither is counted when no answer came (errors)
  uint64_t dropped_writes = 0;     // chunks not queued (queue full)
  uint64_t queued = 0;             // chunks waiting now
  // Failed operations by kind: connect, timeout, closed, oom, reply, auth, protocol.
  std::array<uint64_t, 7> errors{};
  uint64_t redirects = 0;          // cluster MOVED and ASK followed
  double fetch_ms_total = 0;       // time spent in lookups and fetches
  // RemoteRead::kImportant: chunks read in part, the bytes that took (also in
  // bytes_down), and what their whole values hold.
  uint64_t important_chunks = 0, important_bytes = 0, important_value_bytes = 0;
  // Lookups run ahead of their requests: fetches done, chunks they admitted
  // (in hits too), and prompts dropped because the ahead queue was full.
  uint64_t ahead_fetches = 0, ahead_chunks = 0, ahead_dropped = 0;
  uint64_t errors_total() const;
};
// The names of RemoteStats::errors' kinds, in order.
inline constexpr std::array<std::string_view, 7> kRemoteErrorKinds = {"connect", "timeout", "closed", "oom",
                                                                       "reply",   "auth",    "protocol"};

// What a remote tier holds for one model (tierkv inspect --remote).
struct RemoteInventory {
  size_t servers = 0;             // answering (a cluster's masters)
  double ping_ms = 0;             // the slowest server's PING
  uint64_t chunks = 0;            // distinct chunks with at least one layer stored
  uint64_t chunk_layers = 0;      // keys (one per chunk layer)
  uint64_t bytes = 0;             // their values' bytes
};
// Scans every server for the keys of `fingerprint` (SCAN, never KEYS).
// Unavailable naming the server when one does not answer within timeout_ms
// or refuses the login (Redis's own text). A URL without a password takes
// $TIERKV_REMOTE_PASSWORD's.
Result<RemoteInventory> InspectRemote(const std::string& url, uint64_t fingerprint, uint32_t timeout_ms = 1000);

}  // namespace tierkv
