// Server's state and its parts, shared by http_server.cc (routes, the
// head's checks, the drain) and completions.cc (the inference routes).
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sched/scheduler.h"
#include "server/api.h"
#include "server/http_guard.h"
#include "server/metrics.h"
#include "server/openai_format.h"
#include "server/peer_watch.h"
#include "tierkv/mutex.h"
#include "tierkv/server.h"

namespace tierkv::server {

struct Server::Impl {
  const Model& model;
  const Tokenizer& tok;
  engine::Engine* const engine;
  const ServerOptions opts;
  GuardedHttpServer http;
  std::vector<std::string> allowed_hosts;  // AllowedHostNames (empty: any); set by Bind
  int port = 0;                            // set by Bind
  Metrics metrics;
  sched::Scheduler sched;
  std::atomic<bool> draining{false};
  // Responses not yet written whole: a handler's, or a stream's until its
  // last event. The drain waits for none before it stops the listener.
  std::atomic<int64_t> inflight{0};
  // cpp-httplib 0.11's stop() does nothing until listen_after_bind has begun
  // its loop (cpp-httplib #1645), so a Shutdown between Bind and that moment
  // would be lost and Run would never return. Run and the drain meet here.
  enum class Listen { kNotYet, kEntered, kDone };
  Mutex listen_mu;
  Listen listen TIERKV_GUARDED_BY(listen_mu) = Listen::kNotYet;
  bool stop_asked TIERKV_GUARDED_BY(listen_mu) = false;
  // `tierkv-drain`: started by the first Shutdown, joined by ~Server.
  std::thread drainer TIERKV_GUARDED_BY(listen_mu);

  Impl(const Model& m, const Tokenizer& t, engine::Engine* e, ServerOptions o);
  static ConnectionLimits LimitsOf(const ServerOptions& o);

  void Routes();
  void Reply(httplib::Response& res, const std::string& endpoint, int status,
             const std::string& body, const char* type = "application/json");
  void Fail(httplib::Response& res, const std::string& endpoint, const Status& s);
  void Refuse(httplib::Response& res, int status, const std::string& message);
  bool CheckHead(const httplib::Request& req, httplib::Response& res);
  void AddCorsHeaders(const httplib::Request& req, httplib::Response& res) const;
  std::optional<std::string> ReadBody(const httplib::Request& req, httplib::Response& res,
                                      const httplib::ContentReader& read, const std::string& endpoint);
  Result<sched::GenerationParams> Prepare(const CompletionRequest& r, const httplib::Request& req);
  void Complete(const httplib::Request& req, const std::string& body, httplib::Response& res, bool chat);
  void Stream(const httplib::Request& req, httplib::Response& res, const std::string& endpoint,
              std::shared_ptr<sched::Job> job, ResponseHead head, bool include_usage, PeerWatch peer);
  void Drain();
  // "cmpl-" or "chatcmpl-" and 32 hex digits of a random 128-bit value.
  std::string NewId(bool chat);
  // With API keys, routes whose figures count every key's requests are the
  // operator's: false (401 in `res`) unless the admin token is sent.
  bool OperatorOnly(const httplib::Request& req, httplib::Response& res, const std::string& endpoint);
};

}  // namespace tierkv::server
