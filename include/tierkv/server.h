// tierkv serve: an OpenAI-compatible HTTP server over one engine.
//
//   POST /v1/completions, POST /v1/chat/completions  (stream: server-sent events, "[DONE]" last)
//   GET  /v1/models, /health, /metrics (Prometheus text), /v1/cache (store and pool statistics)
//   DELETE /v1/cache  (drops every stored prefix; needs the admin token)
//
// Threads: cpp-httplib's workers parse, tokenize and wait on their request
// (or stream its text as it comes); the scheduler's `tierkv-sched` thread
// runs every request on the engine (sched/scheduler.h); the engine's own
// load, offload and maintenance threads serve it.
#pragma once

#include <memory>
#include <string>

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
  size_t max_queue = 64;            // requests waiting; more get 429
  size_t max_running = 8;           // requests generating at once
  std::string scheduler = "fcfs";   // fcfs or car (CaR's window and prefetcher)
  size_t window = 8;                // car: the shuffled window's size
  bool prefetch = true;             // car: the timed prefetcher
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int grace_ms = 10000;             // on Shutdown, running requests may finish this long
  // DELETE /v1/cache (drop every stored prefix) needs "Authorization:
  // Bearer <admin_token>"; empty: the flush is refused (403).
  std::string admin_token;
  // How /v1/chat/completions writes a conversation (tierkv/chat.h);
  // ChooseChatTemplate picks it from the model.
  ChatTemplate chat;
  Status Validate() const;
};

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
  // From any thread (a signal's): new requests get 503, queued and running
  // ones may finish within the grace period (then are cancelled), Run returns.
  void Shutdown();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv::server
