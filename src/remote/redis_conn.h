// One connection to one Redis server: pipelined commands with a deadline
// for the whole pipeline (every connect, send and reply of it), replies
// bounded in bytes and array elements before they are held, and a backoff
// after a failure, so that a dead, slow or hostile server costs callers a
// miss and at most the timeout, never memory. hiredis formats the commands
// and parses the replies (into Reply objects directly, through its object
// factory, which refuses oversized arrays); a Link carries the bytes, plain
// or TLS (rediss://: Login::tls, OpenSSL).
//
// Thread safety: none; one owner at a time (RemoteTier gives the request
// path and the upload thread a connection each).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "remote/redis_url.h"
#include "remote/link.h"
#include "tierkv/status.h"

struct redisReader;

namespace tierkv::remote {

// What went wrong talking to Redis (counted by kind: RemoteStats).
enum class ErrorKind : uint8_t {
  kNone = 0,
  kConnect,   // refused, unreachable, or still backing off after a failure
  kTimeout,   // no reply within the timeout
  kClosed,    // the server closed the connection (killed, restarted)
  kOom,       // "OOM command not allowed when used memory > 'maxmemory'"
  kReply,     // any other error reply (CLUSTERDOWN, TRYAGAIN, LOADING, READONLY, a SELECT refused, ...)
  kAuth,      // the server refused the login (AUTH: WRONGPASS) or a command for want of one (NOAUTH,
              // NOPERM); a connection whose AUTH failed backs off as kAuth, not kConnect
  kProtocol,  // not Redis's protocol, or a reply larger than ReplyLimits allow (a lying or hostile server)
  kCount
};
std::string_view ErrorKindName(ErrorKind k);  // "connect", "timeout", ...

// A reply, copied out of hiredis's.
struct Reply {
  enum class Type : uint8_t { kNil, kString, kInteger, kStatus, kError, kArray };
  Type type = Type::kNil;
  std::string str;        // kString, kStatus, kError
  long long integer = 0;  // kInteger
  std::vector<Reply> elements;  // kArray
  bool is_error() const { return type == Type::kError; }
};
// The kind of an error reply ("OOM ..." is kOom; "NOAUTH", "WRONGPASS",
// "NOPERM" kAuth; anything else kReply).
ErrorKind KindOfErrorReply(const Reply& r);

using Command = std::vector<std::string>;  // argv, binary-safe

// What every (re)connect does before the first command.
struct Login {
  std::string user;      // empty: the default user
  std::string password;  // non-empty: AUTH [user] password
  int db = 0;            // non-zero: SELECT db
  bool tls = false;      // connect over TLS (Link): the server verified before the login is sent
  TlsFiles tls_files;    // tls only: the CA file (empty: the system's), the client certificate and key
  // Builds one from a URL (its user, password, database, TLS; database 0
  // for a cluster) and the TLS files (used when the URL is rediss).
  static Login Of(const RedisUrl& url, TlsFiles tls_files = {});
};

// What one pipeline's replies may hold at most. A server that announces or
// sends more is cut off (kProtocol) with at most these bytes held: a reply
// of the announced length is never allocated ahead of its bytes.
struct ReplyLimits {
  uint64_t bytes_per_command = 64ull << 20;  // the replies: commands x this, plus 64 KiB
  uint64_t elements = 1u << 16;              // array elements in all (nested ones included)
};

// Every (re)connect logs in before the first command, in one round trip
// (over TLS: after the handshake verified the server; a failed handshake or
// verification is kConnect with OpenSSL's reason, and nothing is sent):
// AUTH when there is a password (a refusal fails the connect as kAuth with
// Redis's text), else a PING (NOAUTH fails it as kAuth: the server wants a
// password), then SELECT when db != 0 (a refusal fails it as kReply).
class RedisConn {
 public:
  // `timeout` bounds a whole Pipeline call: the connect and login when
  // needed, every send, every reply.
  RedisConn(Endpoint endpoint, std::chrono::milliseconds timeout, Login login = {}, ReplyLimits limits = {});
  ~RedisConn();
  RedisConn(const RedisConn&) = delete;
  RedisConn& operator=(const RedisConn&) = delete;

  // Sends `commands` in one pipeline and reads their replies (in order) into
  // *replies. Error replies are replies (the caller decides); a transport
  // failure, a reply past the deadline or past the limits fails the whole call with Unavailable, sets *kind, closes the
  // connection and starts a backoff (50 ms doubling to 2 s) during which
  // calls fail at once with kConnect (kAuth after a refused login). The
  // Unavailable's message names the server and says why: the transport's
  // error or Redis's own text (an AUTH or SELECT refused), never the password.
  Status Pipeline(std::span<const Command> commands, std::vector<Reply>* replies, ErrorKind* kind);

  const Endpoint& endpoint() const { return endpoint_; }
  // Whether the last Pipeline failed at once, backing off: no connect was
  // tried (its cause was reported by the call that started the backoff).
  bool backed_off() const { return backed_off_; }

 private:
  Status Connect(Deadline deadline, ErrorKind* kind);
  Status Open(Deadline deadline, ErrorKind* kind);  // the transport and the reader
  bool connected() const { return link_.open(); }
  Status Exchange(std::span<const Command> commands, Deadline deadline, std::vector<Reply>* replies,
                  ErrorKind* kind);
  Status Fail(ErrorKind kind, const std::string& what, ErrorKind* out);

  const Endpoint endpoint_;
  const std::chrono::milliseconds timeout_;
  const Login login_;
  const ReplyLimits limits_;
  Link link_;                      // plain or TLS, with reader_ parsing its replies
  redisReader* reader_ = nullptr;
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
  ErrorKind backoff_kind_ = ErrorKind::kConnect;  // what calls fail with while backing off
  std::string last_failure_;                      // why the backoff started
  bool backed_off_ = false;
};

}  // namespace tierkv::remote
