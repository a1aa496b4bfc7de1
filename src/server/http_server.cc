// Server: the routes (cpp-httplib) over the scheduler, what is decided from
// a request's head, and the drain; the inference routes are completions.cc.
#include <httplib.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <variant>

#include "server/http_checks.h"
#include "server/server_impl.h"
#include "server/tenants.h"
#include "tierkv/logging.h"

namespace tierkv::server {

namespace {

// GET /v1/cache: the disk tier's and the pools' figures.
std::string CacheStatsJson(const store::StoreStats& s, const cache::CacheStats& p) {
  const nlohmann::json j{{"store",
                          {{"live_chunks", s.live_chunks},
                           {"live_bytes", s.live_bytes},
                           {"dead_bytes", s.dead_bytes},
                           {"segments", s.segments},
                           {"puts", s.puts},
                           {"bytes_written", s.bytes_written},
                           {"bytes_read", s.bytes_read},
                           {"records_read", s.records_read},
                           {"corrupt_records", s.corrupt_records},
                           {"read_errors", s.read_errors},
                           {"evicted_chunks", s.evicted_chunks},
                           {"budget_bytes", s.budget_bytes},
                           {"put_failures", s.put_failures},
                           {"nospace_retries", s.nospace_retries},
                           {"dropped_chunks", s.dropped_chunks},
                           {"recovered_chunks", s.recovered_chunks},
                           {"compactions", s.compactions},
                           {"reordered_chunks", s.reordered_chunks},
                           {"directory_lost", s.directory_lost}}},
                         {"pools",
                          {{"accesses", p.accesses},
                           {"device_hits", p.hits[0]},
                           {"host_hits", p.hits[1]},
                           {"misses", p.hits[2]},
                           {"device_used_bytes", p.device_used},
                           {"host_used_bytes", p.host_used},
                           {"device_chunks", p.device_chunks},
                           {"host_chunks", p.host_chunks},
                           {"promotions", p.promotions},
                           {"demotions", p.demotions},
                           {"offloads", p.offloads},
                           {"device_hit_ratio", p.device_hit_ratio()}}}};
  return j.dump();
}


// The routes API keys guard (with keys, GET /v1/cache needs the admin token).
bool NeedsApiKey(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 && path != "/v1/cache";
}

bool IsInferencePath(const std::string& path) {
  return path == "/v1/completions" || path == "/v1/chat/completions";
}

// The methods some route of this server answers.
bool KnownMethod(const std::string& m) {
  return m == "GET" || m == "HEAD" || m == "POST" || m == "DELETE" || m == "OPTIONS";
}

// The scheduler's options within the server's; InvalidArgument naming the field.
Result<sched::SchedulerOptions> SchedulerOptionsOf(const ServerOptions& o) {
  sched::SchedulerOptions s;
  s.max_queue = o.max_queue;
  s.max_running = o.max_running;
  ASSIGN_OR_RETURN(s.kind, sched::ParseScheduler(o.scheduler));
  s.window = o.window;
  s.prefetch = o.prefetch;
  RETURN_IF_ERROR(s.Validate());
  return s;
}

// Every key and the admin token can be sent in a header, and the admin
// token is no key's: a tenant holding it would get /metrics and the flush.
// Keys are named by their position (1 first), never quoted.
Status CheckCredentials(const ServerOptions& o) {
  for (size_t i = 0; i < o.api_keys.size(); ++i) {
    RETURN_IF_ERROR(CheckCredential("api_keys: key " + std::to_string(i + 1), o.api_keys[i]));
    if (o.api_keys[i] == o.admin_token) {
      return Status::InvalidArgument("admin_token: equals API key " + std::to_string(i + 1) +
                                     "; that key's holder would be the operator (choose another token)");
    }
  }
  if (!o.admin_token.empty()) RETURN_IF_ERROR(CheckCredential("admin_token", o.admin_token));
  return Status::Ok();
}

}  // namespace

bool IsLoopbackAddress(const std::string& host) { return IsLoopbackHost(host); }

Status ServerOptions::Validate() const {
  if (port < 0 || port > 65535) return Status::InvalidArgument("port: must be in [0, 65535]");
  RETURN_IF_ERROR(SchedulerOptionsOf(*this).status());
  if (max_body_bytes == 0) return Status::InvalidArgument("max_body_bytes: must be at least 1");
  if (grace_ms < 0) return Status::InvalidArgument("grace_ms: must not be negative");
  if (max_connections == 0) return Status::InvalidArgument("max_connections: must be at least 1");
  if (request_timeout_ms <= 0) return Status::InvalidArgument("request_timeout_ms: must be positive");
  return CheckCredentials(*this);
}


Server::Impl::Impl(const Model& m, const Tokenizer& t, engine::Engine* e, ServerOptions o)
    : model(m),
      tok(t),
      engine(e),
      opts(std::move(o)),
      http(LimitsOf(opts)),
      sched(m, t, e, *SchedulerOptionsOf(opts),
            [this](const sched::Outcome& o, double seconds) { metrics.ObserveOutcome(o, seconds); }) {}

ConnectionLimits Server::Impl::LimitsOf(const ServerOptions& o) {
  ConnectionLimits l;
  // 256 descriptors kept for the store's segments, the model and Redis.
  l.max_connections = FitConnectionsToFileLimit(o.max_connections, 256);
  if (l.max_connections < o.max_connections) {
    TIERKV_LOG(kWarn) << "--max-connections " << o.max_connections << " is more than the open-file limit allows; "
                      << l.max_connections << " connections will be served (raise `ulimit -n`)";
  }
  l.max_per_address = o.max_connections_per_address > 0 ? std::min(o.max_connections_per_address, l.max_connections)
                                                        : std::max<size_t>(1, l.max_connections / 4);
  l.request_timeout = std::chrono::milliseconds(o.request_timeout_ms);
  return l;
}

bool Server::Impl::OperatorOnly(const httplib::Request& req, httplib::Response& res, const std::string& endpoint) {
  if (opts.api_keys.empty() ||
      (!opts.admin_token.empty() && TokenMatches(req.get_header_value("Authorization"), opts.admin_token))) {
    return true;
  }
  res.set_header("WWW-Authenticate", "Bearer");
  Reply(res, endpoint, 401,
        ErrorBody(401, Status::InvalidArgument("Authorization: with API keys, " + endpoint +
                                               " needs the admin token (its figures count every key's requests)")));
  return false;
}

void Server::Impl::Reply(httplib::Response& res, const std::string& endpoint, int status,
                         const std::string& body, const char* type) {
  res.status = status;
  res.set_content(body, type);
  metrics.CountRequest(endpoint, status);
}

void Server::Impl::Fail(httplib::Response& res, const std::string& endpoint, const Status& s) {
  const int code = HttpStatusOf(s);
  if (code == 429 || code == 503) res.set_header("Retry-After", "1");
  Reply(res, endpoint, code, ErrorBody(code, s));
}

// A refusal from the request's head: its body (if any) is never read, so
// the connection closes after the answer.
void Server::Impl::Refuse(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  const Status s = status >= 500 ? Status::Unavailable(message) : Status::InvalidArgument(message);
  res.set_content(ErrorBody(status, s), "application/json");
  if (status == 401) res.set_header("WWW-Authenticate", "Bearer");
  GuardedHttpServer::CloseAfterResponse();
}

// Everything decided from the head, before the body is read: Host and
// Origin, CORS preflight, the body's framing and size, JSON, the API key.
// False when `res` holds the answer.
bool Server::Impl::CheckHead(const httplib::Request& req, httplib::Response& res) {
  if (draining) GuardedHttpServer::CloseAfterResponse();
  if (auto r = CheckHeaderSyntax(req.headers)) {
    Refuse(res, r->status, r->message);
    return false;
  }
  const RequestHead head = HeadOf(req);
  if (auto r = CheckHostAndOrigin(head, allowed_hosts, port, opts.cors_origin)) {
    Refuse(res, r->status, r->message);
    return false;
  }
  if (req.method == "OPTIONS") {
    // A preflight: only the --cors-origin page gets one (CheckHostAndOrigin let it through).
    if (opts.cors_origin.empty() || !head.origin) {
      Refuse(res, 405, "OPTIONS: no cross-origin access (tierkv serve --cors-origin allows one origin)");
      return false;
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
    res.set_header("Access-Control-Max-Age", "600");
    return false;
  }
  if (!KnownMethod(req.method)) {
    Refuse(res, 405, "method: " + req.method.substr(0, 16) + " is not served here");
    return false;
  }
  const auto framing = CheckFraming(head, opts.max_body_bytes);
  if (const auto* r = std::get_if<HeadRefusal>(&framing)) {
    Refuse(res, r->status, r->message);
    return false;
  }
  const BodyFraming& body = std::get<BodyFraming>(framing);
  const bool reads_body = req.method == "POST" && IsInferencePath(req.path);
  if (!reads_body && (body.chunked || body.length > 0)) {
    // Only the inference routes read a body under the limit; cpp-httplib
    // would read any other whole (and a chunked DELETE's not at all).
    Refuse(res, 400, "body: " + req.method + " " + req.path.substr(0, 64) + " takes none");
    return false;
  }
  if (reads_body) {
    if (auto r = CheckJsonBody(head)) {
      Refuse(res, r->status, r->message);
      return false;
    }
    // cpp-httplib's chunked reader is lenient (a chunk without its CRLF ends
    // the body early): nothing after a chunked body is taken as a request.
    if (body.chunked) GuardedHttpServer::CloseAfterResponse();
  }
  if (!opts.api_keys.empty() && NeedsApiKey(req.path) &&
      !MatchingKey(req.get_header_value("Authorization"), opts.api_keys)) {
    Refuse(res, 401, "Authorization: missing or not an API key of this server ('Bearer KEY')");
    return false;
  }
  return true;
}

void Server::Impl::AddCorsHeaders(const httplib::Request& req, httplib::Response& res) const {
  if (opts.cors_origin.empty() || req.get_header_value("Origin") != opts.cors_origin) return;
  res.set_header("Access-Control-Allow-Origin", opts.cors_origin);
  res.set_header("Vary", "Origin");
}


void Server::Impl::Routes() {
  http.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
    return CheckHead(q, r) ? httplib::Server::HandlerResponse::Unhandled
                           : httplib::Server::HandlerResponse::Handled;
  });
  // A client that waits for "100 Continue" before its body gets the head's
  // refusal instead.
  http.set_expect_100_continue_handler([this](const httplib::Request& q, httplib::Response& r) {
    return CheckHead(q, r) ? 100 : r.status;
  });
  http.set_post_routing_handler([this](const httplib::Request& q, httplib::Response& r) {
    AddCorsHeaders(q, r);
    if (draining) GuardedHttpServer::CloseAfterResponse();
    if (r.get_header_value("Connection") == "close" || GuardedHttpServer::ClosingAfterResponse()) {
      r.headers.erase("Keep-Alive");
      r.headers.erase("Connection");
      r.set_header("Connection", "close");
    }
  });
  for (const bool chat : {false, true}) {
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    http.Post(path, [this, chat, path](const httplib::Request& q, httplib::Response& r,
                                       const httplib::ContentReader& read) {
      // Counted once the body is in: a slow upload must not hold the drain.
      if (auto body = ReadBody(q, r, read, path)) {
        ++inflight;
        Complete(q, *body, r, chat);
        --inflight;
      }
    });
  }
  const auto model_json = [this] {
    return nlohmann::json{{"id", opts.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "tierkv"}};
  };
  http.Get("/v1/models", [this, model_json](const httplib::Request&, httplib::Response& r) {
    const nlohmann::json j{{"object", "list"}, {"data", {model_json()}}};
    Reply(r, "/v1/models", 200, j.dump());
  });
  http.Get("/v1/models/(.+)", [this, model_json](const httplib::Request& q, httplib::Response& r) {
    if (q.matches[1] != opts.model_id) {
      return Reply(r, "/v1/models", 404,
                   ErrorBody(404, Status::NotFound("model: '" + std::string(q.matches[1]).substr(0, 200) +
                                                   "' is not served here (GET /v1/models lists it)")));
    }
    Reply(r, "/v1/models", 200, model_json().dump());
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    if (draining) return Reply(r, "/health", 503, R"({"status":"shutting down"})");
    // A lost cache directory (removed or replaced while serving) stops the
    // disk tier's writes, not the server: requests are still answered
    // (reads of what the store indexed go on from its open files, the rest
    // is computed), so 200 keeps a load balancer sending them, and the body
    // tells the operator, who must restart the server on a directory.
    if (engine->StoreStatistics().directory_lost) {
      return Reply(r, "/health", 200,
                   R"({"status":"degraded","store":"cache directory was removed or replaced; storing stopped"})");
    }
    // Likewise a disk that has not finished a write for seconds (hung,
    // frozen, dying): the store writer holds it, requests go on (prompts are
    // not stored meanwhile), and the body says so.
    if (const engine::StoreBehindStats b = engine->StoreBehindStatistics(); b.stalled) {
      return Reply(r, "/health", 200,
                   R"({"status":"degraded","store":"a write has not finished for )" +
                       std::to_string(static_cast<long long>(b.running_ms / 1000)) +
                       R"( s (a hung or slow disk); prompts are not stored meanwhile"})");
    }
    Reply(r, "/health", 200, R"({"status":"ok"})");
  });
  http.Get("/metrics", [this](const httplib::Request& q, httplib::Response& r) {
    // Request and token counts move with each key's requests: a key polling
    // them would learn another's prompt sizes and reuse.
    if (!OperatorOnly(q, r, "/metrics")) return;
    const ConnectionCounts conns = http.counts();
    const Snapshot now{sched.queued(),
                       sched.running(),
                       engine->StoreStatistics(),
                       engine->PoolStatistics(),
                       sched.stats(),
                       engine->RemoteStatistics(),
                       !engine->options().remote.url.empty(),
                       conns.open,
                       conns.refused,
                       conns.refused_per_address,
                       conns.timed_out,
                       engine->StoreBehindStatistics()};
    Reply(r, "/metrics", 200, metrics.Render(now), "text/plain; version=0.0.4");
  });
  http.Get("/v1/cache", [this](const httplib::Request& q, httplib::Response& r) {
    if (!OperatorOnly(q, r, "/v1/cache")) return;
    Reply(r, "/v1/cache", 200, CacheStatsJson(engine->StoreStatistics(), engine->PoolStatistics()));
  });
  http.Delete("/v1/cache", [this](const httplib::Request& q, httplib::Response& r) {
    if (opts.admin_token.empty()) {
      return Reply(r, "/v1/cache", 403,
                   ErrorBody(403, Status::InvalidArgument(
                                      "the cache flush is off: start the server with --admin-token")));
    }
    if (!TokenMatches(q.get_header_value("Authorization"), opts.admin_token)) {
      r.set_header("WWW-Authenticate", "Bearer");
      return Reply(r, "/v1/cache", 401,
                   ErrorBody(401, Status::InvalidArgument("Authorization: not the admin token")));
    }
    auto dropped = engine->Flush();
    if (!dropped.ok()) return Fail(r, "/v1/cache", dropped.status());
    TIERKV_LOG(kInfo) << "cache flushed: " << *dropped << " chunks dropped";
    Reply(r, "/v1/cache", 200, nlohmann::json{{"flushed_chunks", *dropped}}.dump());
  });
  // Errors cpp-httplib raises itself (400, 404, 405, 408) get OpenAI's error body.
  http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
    // A request the connection cut (its deadline, its head's size) reaches
    // here as httplib's 400.
    const int cut = GuardedHttpServer::RequestTimedOut() ? 408 : GuardedHttpServer::HeadTooLarge() ? 431 : 0;
    if (cut != 0 && r.status == 400) {
      r.status = cut;
      r.body.clear();
      GuardedHttpServer::CloseAfterResponse();
    }
    if (!r.body.empty()) return;
    const std::string why = r.status == 413 ? "body: larger than the server's limit of " +
                                                  std::to_string(opts.max_body_bytes) + " bytes"
                            : r.status == 408 ? "request: not received within " +
                                                    std::to_string(opts.request_timeout_ms / 1000.0) + " s"
                            : r.status == 431 ? "headers: the request line and headers exceed " +
                                                    std::to_string(GuardedHttpServer::kMaxHeadBytes) + " bytes"
                            : r.status == 404 ? "no route " + q.method + " " + q.path
                                              : "the request could not be handled";
    if (r.status == 400 || r.status == 413) GuardedHttpServer::CloseAfterResponse();
    r.set_content(
        ErrorBody(r.status, r.status >= 500 ? Status::IOError(why) : Status::InvalidArgument(why)),
        "application/json");
    // Routes only, not paths: a scanner must not grow the label set.
    static const std::set<std::string> kRoutes = {"/v1/completions", "/v1/chat/completions",
                                                  "/v1/models",      "/health",
                                                  "/metrics",        "/v1/cache"};
    metrics.CountRequest(kRoutes.count(q.path) ? q.path : "other", r.status);
  });
}

Result<std::unique_ptr<Server>> Server::Create(const Model& model, const Tokenizer& tokenizer,
                                               engine::Engine* engine, ServerOptions options) {
  RETURN_IF_ERROR(options.Validate());
  // A key given twice (a flag and the environment) is one tenant.
  std::vector<std::string> keys;
  for (std::string& k : options.api_keys) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  options.api_keys = std::move(keys);
  auto impl = std::make_unique<Impl>(model, tokenizer, engine, std::move(options));
  Impl& im = *impl;
  im.http.set_payload_max_length(im.opts.max_body_bytes);
  im.Routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() {
  std::thread drainer;
  {
    MutexLock l(&impl_->listen_mu);
    drainer = std::move(impl_->drainer);
  }
  if (drainer.joinable()) drainer.join();
  impl_->sched.Shutdown(std::chrono::milliseconds(0));
}

Result<int> Server::Bind() {
  Impl& im = *impl_;
  const int port = im.opts.port == 0
                       ? im.http.bind_to_any_port(im.opts.host)
                       : (im.http.bind_to_port(im.opts.host, im.opts.port) ? im.opts.port : -1);
  if (port < 0) {
    return Status::IOError("cannot listen on " + im.opts.host + ":" + std::to_string(im.opts.port) +
                           " (address in use, or not an address of this machine)");
  }
  im.port = port;
  im.allowed_hosts = AllowedHostNames(im.opts.host, im.opts.allowed_hosts);
  im.http.WidenBacklog(static_cast<int>(std::min<size_t>(im.opts.max_connections + 64, 4096)));
  return port;
}

Status Server::Run() {
  Impl& im = *impl_;
  {
    MutexLock l(&im.listen_mu);
    if (im.stop_asked) return Status::Ok();
    im.listen = Impl::Listen::kEntered;
  }
  const bool listened = im.http.listen_after_bind();
  {
    MutexLock l(&im.listen_mu);
    im.listen = Impl::Listen::kDone;
  }
  if (!listened && !im.draining) return Status::IOError("the server stopped listening");
  return Status::Ok();
}

// On `tierkv-drain`: the scheduler finishes or cancels every job, then the
// responses are written (streams end with their last event), then the
// listener stops. Until then new requests are answered 503.
void Server::Impl::Drain() {
  pthread_setname_np(pthread_self(), "tierkv-drain");
  const auto grace = std::chrono::milliseconds(opts.grace_ms);
  sched.Drain(grace);
  // After the grace period jobs are cancelled at the scheduler's next round;
  // their responses then need at most a write timeout each to go out.
  const auto limit = std::chrono::steady_clock::now() + grace + http.limits().write_timeout +
                     std::chrono::seconds(5);
  while ((inflight > 0 || sched.queued() + sched.running() > 0) &&
         std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    MutexLock l(&listen_mu);
    stop_asked = true;
  }
  // While Run is in, or about to enter, httplib's loop: stop it once it is
  // there. Not entered: Run sees stop_asked and returns. Done: nothing to stop.
  for (;;) {
    {
      MutexLock l(&listen_mu);
      if (listen != Listen::kEntered) return;
    }
    if (http.is_running()) {
      http.stop();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Server::Shutdown() {
  Impl& im = *impl_;
  im.draining = true;
  MutexLock l(&im.listen_mu);
  if (im.drainer.joinable()) return;
  im.drainer = std::thread([&im] { im.Drain(); });
}

}  // namespace tierkv::server
