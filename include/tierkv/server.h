// tierkv serve: an OpenAI-compatible HTTP server over one engine.
//
//   POST /v1/completions, POST /v1/chat/completions  (stream: server-sent events, "[DONE]" last)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text),
//        /v1/cache (store and pool statistics)
//   DELETE /v1/cache  (drops every stored prefix; needs the admin token)
//
// Who may call: with api_keys, the /v1/ routes need "Authorization: Bearer
// KEY" (401 otherwise) and each key's prefixes live in a namespace of its
// own (a request's cache_salt splits it further); GET /v1/cache then needs
// the admin token. Every request's Host must name this server and a
// cross-site Origin is refused (browsers and DNS rebinding); inference
// bodies must be JSON; a body over max_body_bytes is refused however it is
// framed (server/http_checks.h, server/http_guard.h).
//
// Threads: `tierkv-http` workers, one per connection in service, read,
// tokenize and wait on their request (or stream its text as it comes); the
// scheduler's `tierkv-sched` thread runs every request on the engine
// (sched/scheduler.h); `tierkv-drain` waits out a shutdown; the engine's
// own load, offload and maintenance threads serve it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tierkv/chat.h"
#include "tierkv/engine.h"
#include "tierkv/model.h"
#include "tierkv/status.h"
#include "tierkv/tokenizer.h"

namespace tierkv::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (Bind says which)
  std::string model_id = "tierkv";  // what /v1/models lists and responses name
  // Requests waiting beyond the max_running slots; more get 429, as do a
  // key's beyond max_queue / (keys waiting) while other keys wait.
  size_t max_queue = 64;
  size_t max_running = 8;           // requests generating at once
  std::string scheduler = "fcfs";   // fcfs or car (CaR's window and prefetcher)
  size_t window = 8;                // car: the shuffled window's size
  bool prefetch = true;             // car: the timed prefetcher
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int grace_ms = 10000;             // on Shutdown, running requests may finish this long
  // Connections served at once (each on a worker); one more is answered 503.
  size_t max_connections = 256;
  // Of those, what one client address (an IPv6 client's /64) may hold; one
  // more from it is answered 503 at once. 0: a quarter of max_connections
  // (at least 1), so one address never takes every worker.
  size_t max_connections_per_address = 0;
  // Reading one request (head and body) must end within this; else 408.
  int request_timeout_ms = 30000;
  // API keys for the /v1/ routes (empty: no authentication). Each key's
  // stored prefixes are its own unless share_prefixes.
  std::vector<std::string> api_keys;
  bool share_prefixes = false;
  // Host names requests may carry beyond the listen address's own ("*": any).
  std::vector<std::string> allowed_hosts;
  // The one browser origin allowed to call (CORS); empty: none.
  std::string cors_origin;
  // DELETE /v1/cache (drop every stored prefix) needs "Authorization:
  // Bearer <admin_token>"; empty: the flush is refused (403).
  std::string admin_token;
  // How /v1/chat/completions writes a conversation (tierkv/chat.h);
  // ChooseChatTemplate picks it from the model.
  ChatTemplate chat;
  Status Validate() const;
};

// Whether `host` is a loopback address or name (127.0.0.0/8, ::1,
// localhost): serving anything else without API keys earns a warning.
bool IsLoopbackAddress(const std::string& host);

class Server {
 public:
  // model, tokenizer and engine must outlive the server.
  static Result<std::unique_ptr<Server>> Create(const Model& model, const Tokenizer& tokenizer,
                                                engine::Engine* engine, ServerOptions options);
  ~Server();
  // Binds the listening socket; the port bound.
  Result<int> Bind();
  // Serves until Shutdown, then returns once every request has ended.
  Status Run();
  // From any thread (a signal's); returns at once. New requests get 503
  // (the listener stays open for that), queued and running ones may finish
  // within the grace period, then are cancelled (a stream ends with an
  // error event and [DONE]); Run returns once the last response is written.
  void Shutdown();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv::server
