// Sends keyed commands to the server that holds each key: one server for
// redis://, the owner of the key's hash slot for a Redis Cluster. The
// cluster's routing lives here alone: CRC16 hash slots with hash tags, the
// slot map from CLUSTER SLOTS (asked at the first use and again after a
// MOVED), MOVED (the slot moved: follow it, refresh the map) and ASK (a slot
// being migrated: ASKING, then the command, on the target).
//
// Every connection logs in as the URL says (RedisConn's Login: AUTH on
// each node of a cluster; SELECT for redis:// only), over TLS for rediss://
// and rediss-cluster:// with the same TLS files on every node.
//
// Thread safety: none; one owner at a time (it owns its connections).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "remote/redis_conn.h"
#include "remote/redis_url.h"

namespace tierkv::remote {

inline constexpr int kClusterSlots = 16384;

// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag (the
// part between the first '{' and the next '}', when not empty), mod 16384.
uint16_t KeySlot(std::string_view key);

// Why one pipeline (or one redirected command) got no reply.
struct Failure {
  ErrorKind kind = ErrorKind::kNone;
  std::string why;  // RedisConn::Pipeline's message: the transport's error or Redis's refusal of the login
  bool backed_off = false;  // failed at once while backing off (RedisConn::backed_off): its cause was reported
};

struct RouterCounters {
  uint64_t moved = 0, asked = 0, slot_refreshes = 0;
};

class Router {
 public:
  // `tls`: the CA, certificate and key files of every connection (a TLS URL
  // only); `limits`: what one pipeline's replies may hold (RedisConn).
  Router(RedisUrl url, std::chrono::milliseconds timeout, TlsFiles tls = {}, ReplyLimits limits = {});
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Runs every command (argv[1] is its key) on its key's server, those of
  // one server in one pipeline. (*replies)[i] answers commands[i];
  // (*errors)[i] is kNone with a reply (which may be an error reply the
  // caller judges), or why there is none (the server was unreachable, timed
  // out, or redirected more than three times). `failures`, if given, gets
  // one entry per failed pipeline (a whole server's group) or redirected
  // command that failed.
  void Run(std::span<const Command> commands, std::vector<Reply>* replies,
           std::vector<ErrorKind>* errors, std::vector<Failure>* failures = nullptr);

  const RouterCounters& counters() const { return counters_; }

  // Every server: the one of redis://, a cluster's masters (slot map asked).
  std::vector<Endpoint> Servers();
  // Commands on one server, as RedisConn::Pipeline.
  Status RunOn(const Endpoint& e, std::span<const Command> commands, std::vector<Reply>* replies,
               ErrorKind* kind);

 private:
  RedisConn* Conn(const Endpoint& e);
  // The server of `key` (the first seed for redis://, or while no slot map).
  Endpoint Owner(std::string_view key) const;
  void RefreshSlots();
  // One command on `e` (after ASKING when `asking`), following redirects.
  void RunOne(const Command& c, Endpoint e, bool asking, Reply* reply, ErrorKind* error,
              std::vector<Failure>* failures);

  const RedisUrl url_;
  const std::chrono::milliseconds timeout_;
  const TlsFiles tls_;
  const ReplyLimits limits_;
  std::map<std::string, std::unique_ptr<RedisConn>> conns_;  // by "host:port"
  std::vector<Endpoint> nodes_;                 // the slot map's servers
  std::array<int16_t, kClusterSlots> slots_{};  // index into nodes_, -1: unknown
  bool have_slots_ = false;
  RouterCounters counters_;
};

}  // namespace tierkv::remote
