// Server: the HTTP routes (cpp-httplib) over the scheduler.
#include <httplib.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <optional>
#include <variant>
#include <pthread.h>

#include <xxhash.h>

#include "sched/scheduler.h"
#include "server/api.h"
#include "server/http_checks.h"
#include "server/http_guard.h"
#include "tierkv/chat.h"
#include "server/metrics.h"
#include "server/openai_format.h"
#include "server/peer_watch.h"
#include "tierkv/logging.h"
#include "tierkv/mutex.h"
#include "tierkv/server.h"

namespace tierkv::server {

namespace {

constexpr int kDefaultCompletionTokens = 16;  // OpenAI's default for /v1/completions
// How often a waiting worker looks whether its client is still there.
constexpr std::chrono::milliseconds kPeerCheck{100};
// Counted (nobody reads it) for a request whose client hung up: nginx's code.
constexpr int kClientClosed = 499;

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
                           {"reordered_chunks", s.reordered_chunks}}},
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

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Whether an Authorization header is "Bearer <token>" (the scheme in any
// case, then one or more spaces: RFC 9110), the token compared in time
// independent of where they first differ.
bool TokenMatches(const std::string& header, const std::string& token) {
  static const std::string kBearer = "bearer";
  if (header.size() <= kBearer.size() || header[kBearer.size()] != ' ') return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return false;
  }
  const size_t at = header.find_first_not_of(' ', kBearer.size());
  if (at == std::string::npos || header.size() - at != token.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(header[at + i] ^ token[i]);
  return diff == 0;
}

// The API key an Authorization header carries, from `keys` (every key is
// compared, so the time does not tell which matched); null when none.
const std::string* MatchingKey(const std::string& header, const std::vector<std::string>& keys) {
  const std::string* found = nullptr;
  for (const std::string& k : keys) {
    if (TokenMatches(header, k)) found = &k;
  }
  return found;
}

// The namespace of a request's prefixes: its tenant (the API key, or ""
// when keys are shared or absent) and its cache_salt, hashed with a domain
// tag; 0 (the shared namespace, that of stores written before tenants
// existed) when both are empty. Stable across restarts: the store keeps it.
uint64_t CacheNamespace(const std::string& tenant, const std::string& salt) {
  if (tenant.empty() && salt.empty()) return 0;
  const std::string material = "tierkv-ns:" + std::to_string(tenant.size()) + ":" + tenant + salt;
  const uint64_t ns = XXH3_64bits(material.data(), material.size());
  return ns == 0 ? 1 : ns;
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

}  // namespace

bool IsLoopbackAddress(const std::string& host) { return IsLoopbackHost(host); }

Status ServerOptions::Validate() const {
  if (port < 0 || port > 65535) return Status::InvalidArgument("port: must be in [0, 65535]");
  RETURN_IF_ERROR(SchedulerOptionsOf(*this).status());
  if (max_body_bytes == 0) return Status::InvalidArgument("max_body_bytes: must be at least 1");
  if (grace_ms < 0) return Status::InvalidArgument("grace_ms: must not be negative");
  if (max_connections == 0) return Status::InvalidArgument("max_connections: must be at least 1");
  if (request_timeout_ms <= 0) return Status::InvalidArgument("request_timeout_ms: must be positive");
  for (const std::string& k : api_keys) {
    if (k.empty()) return Status::InvalidArgument("api_keys: a key is empty");
  }
  return Status::Ok();
}

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
  std::atomic<uint64_t> next_id{1};
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
  const uint64_t id_salt = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();

  Impl(const Model& m, const Tokenizer& t, engine::Engine* e, ServerOptions o)
      : model(m),
        tok(t),
        engine(e),
        opts(std::move(o)),
        http(LimitsOf(opts)),
        sched(m, t, e, *SchedulerOptionsOf(opts),
              [this](const sched::Outcome& o, double seconds) {
                metrics.ObserveOutcome(o, seconds);
              }) {}

  static ConnectionLimits LimitsOf(const ServerOptions& o) {
    ConnectionLimits l;
    // 256 descriptors kept for the store's segments, the model and Redis.
    l.max_connections = FitConnectionsToFileLimit(o.max_connections, 256);
    if (l.max_connections < o.max_connections) {
      TIERKV_LOG(kWarn) << "--max-connections " << o.max_connections << " is more than the open-file limit allows; "
                        << l.max_connections << " connections will be served (raise `ulimit -n`)";
    }
    l.request_timeout = std::chrono::milliseconds(o.request_timeout_ms);
    return l;
  }

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
  std::string NewId(bool chat);
};

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

// The body, read as it arrives (chunked or not) and never past the limit:
// a longer one is 413 and the connection closes. nullopt when `res` holds
// the answer.
std::optional<std::string> Server::Impl::ReadBody(const httplib::Request& req, httplib::Response& res,
                                                  const httplib::ContentReader& read,
                                                  const std::string& endpoint) {
  std::string body;
  bool over = false;
  const bool ok = read([&](const char* data, size_t n) {
    if (n > opts.max_body_bytes - body.size()) {
      over = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (ok && !over) return body;
  GuardedHttpServer::CloseAfterResponse();
  if (draining) {
    Reply(res, endpoint, 503, ErrorBody(503, Status::Unavailable("the server is shutting down")));
  } else if (over) {
    Reply(res, endpoint, 413,
          ErrorBody(413, Status::InvalidArgument("body: larger than the server's limit of " +
                                                 std::to_string(opts.max_body_bytes) + " bytes")));
  } else if (GuardedHttpServer::RequestTimedOut()) {
    Reply(res, endpoint, 408,
          ErrorBody(408, Status::InvalidArgument("body: not received within " +
                                                 std::to_string(opts.request_timeout_ms / 1000.0) + " s")));
  } else {
    Reply(res, endpoint, 400,
          ErrorBody(400, Status::InvalidArgument("body: incomplete, or its chunked framing is malformed")));
  }
  return std::nullopt;
}

std::string Server::Impl::NewId(bool chat) {
  // Keyed by a 64-bit secret: ids neither repeat nor count the server's requests.
  const uint64_t n = next_id++;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(XXH3_64bits_withSeed(&n, sizeof n, id_salt)));
  return buf;
}

// The request's tokens and limits, checked against the model.
Result<sched::GenerationParams> Server::Impl::Prepare(const CompletionRequest& r,
                                                      const httplib::Request& req) {
  const engine::System system = engine->options().system;
  if (r.retention && *r.retention != 1 && !engine::TraitsOf(system).selective) {
    return Status::InvalidArgument(std::string("retention: this server's system, ") +
                                   std::string(engine::SystemName(system)) +
                                   ", reads every prefix row (only 1 is accepted); a selective "
                                   "system (tierkv serve --system impress) reads a share");
  }
  sched::GenerationParams p;
  p.retention = r.retention.value_or(-1);
  const std::string* key = opts.share_prefixes ? nullptr
                                                : MatchingKey(req.get_header_value("Authorization"), opts.api_keys);
  p.cache_namespace = CacheNamespace(key ? *key : std::string(), r.cache_salt);
  if (r.chat) {
    ASSIGN_OR_RETURN(p.prompt, ChatPromptTokens(tok, opts.chat, r.messages));
    if (auto eot = ChatEndOfTurnToken(tok, opts.chat)) p.stop_tokens.push_back(*eot);
  } else if (!r.prompt_tokens.empty()) {
    for (int32_t t : r.prompt_tokens) {
      if (t < 0 || t >= model.config().vocab_size) {
        return Status::InvalidArgument("prompt: token id " + std::to_string(t) +
                                       " is outside the vocabulary [0, " +
                                       std::to_string(model.config().vocab_size) + ")");
      }
    }
    p.prompt = r.prompt_tokens;
  } else {
    ASSIGN_OR_RETURN(p.prompt, tok.Encode(r.prompt, /*add_bos=*/true));
  }
  const int context = model.config().context_length;
  const int n = static_cast<int>(p.prompt.size());
  if (n >= context) {
    return Status::InvalidArgument(std::string(r.chat ? "messages" : "prompt") + ": " +
                                   std::to_string(n) + " tokens, the model's context is " +
                                   std::to_string(context) + " tokens (leave at least one to generate)");
  }
  p.max_tokens = r.max_tokens.value_or(r.chat ? context - n : kDefaultCompletionTokens);
  if (n + p.max_tokens > context) {
    return Status::InvalidArgument("max_tokens: the prompt's " + std::to_string(n) +
                                   " tokens plus max_tokens " + std::to_string(p.max_tokens) +
                                   " exceed the model's context of " + std::to_string(context) +
                                   " tokens");
  }
  p.sampler = r.sampler;
  p.stop = r.stop;
  p.ignore_eos = r.ignore_eos;
  return p;
}

void Server::Impl::Complete(const httplib::Request& req, const std::string& body,
                            httplib::Response& res, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto parsed = ParseCompletionRequest(body, chat);
  if (!parsed.ok()) return Fail(res, endpoint, parsed.status());
  auto params = Prepare(*parsed, req);
  if (!params.ok()) return Fail(res, endpoint, params.status());
  const size_t prompt_tokens = params->prompt.size();
  auto job = std::make_shared<sched::Job>(std::move(*params));
  if (Status s = sched.Submit(job); !s.ok()) return Fail(res, endpoint, s);
  ResponseHead head{NewId(chat), UnixNow(), opts.model_id, chat};
  const PeerWatch peer(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (parsed->stream)
    return Stream(req, res, endpoint, std::move(job), std::move(head), parsed->include_usage, peer);
  while (!job->WaitFor(kPeerCheck)) {
    if (peer.Gone()) job->Cancel();
  }
  const sched::Outcome o = job->Wait();
  if (o.reason == sched::FinishReason::kError) return Fail(res, endpoint, o.status);
  if (o.reason == sched::FinishReason::kCancelled) {
    if (peer.Gone())
      return Reply(res, endpoint, kClientClosed,
                   ErrorBody(kClientClosed, Status::Cancelled("the client went away")));
    return Fail(res, endpoint,
                Status::Unavailable("the server shut down before the request finished"));
  }
  Reply(res, endpoint, 200, CompletionBody(head, o, UsageOf(o, prompt_tokens)));
}

// Streams the job's text as server-sent events. The provider runs on this
// request's HTTP worker after the handler returns; a client that went away
// (seen while no text comes, or as a failed write) ends it, and the
// releaser then cancels the job. A job the drain cancels still ends with an
// error event and [DONE]. An HTTP/1.0 client gets the events without
// chunked framing, ended by closing the connection.
void Server::Impl::Stream(const httplib::Request& req, httplib::Response& res,
                          const std::string& endpoint, std::shared_ptr<sched::Job> job,
                          ResponseHead head, bool include_usage, PeerWatch peer) {
  metrics.CountRequest(endpoint, 200);
  auto first = std::make_shared<bool>(true);
  res.set_header("Cache-Control", "no-cache");
  ++inflight;  // until the releaser: the stream's last event is written (or the client left)
  auto provider = [job, head, include_usage, first, peer](size_t, httplib::DataSink& sink) {
    bool ended = false;
    const std::string text = job->Next(kPeerCheck, &ended);
    if (text.empty() && !ended && peer.Gone()) return false;
    if (!text.empty()) {
      const std::string ev = ChunkEvent(head, text, *first, nullptr);
      *first = false;
      if (!sink.write(ev.data(), ev.size())) return false;
    }
    if (!ended) return true;
    const sched::Outcome o = job->Wait();
    std::string tail;
    if (o.reason == sched::FinishReason::kError || o.reason == sched::FinishReason::kCancelled) {
      const Status s = o.reason == sched::FinishReason::kError
                           ? o.status
                           : Status::Unavailable("the server shut down before the request finished");
      tail = "data: " + ErrorBody(HttpStatusOf(s), s) + "\n\n";
    } else {
      tail = ChunkEvent(head, "", *first, sched::FinishReasonName(o.reason));
      if (include_usage) tail += UsageEvent(head, UsageOf(o, job->params().prompt.size()));
    }
    tail += kDoneEvent;
    if (!sink.write(tail.data(), tail.size())) return false;
    sink.done();
    return true;
  };
  auto releaser = [this, job](bool success) {
    // The client left (or a write failed): the scheduler drops the job at
    // its next step.
    if (!success) job->Cancel();
    --inflight;
  };
  if (req.version == "HTTP/1.0") {
    GuardedHttpServer::CloseAfterResponse();
    res.set_content_provider("text/event-stream", std::move(provider), std::move(releaser));
  } else {
    res.set_chunked_content_provider("text/event-stream", std::move(provider), std::move(releaser));
  }
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
    Reply(r, "/health", 200, R"({"status":"ok"})");
  });
  http.Get("/metrics", [this](const httplib::Request& q, httplib::Response& r) {
    // With tenants, request and token counts move with each key's requests:
    // a key polling them would learn another's prompt sizes and reuse.
    if (!opts.api_keys.empty() && (opts.admin_token.empty() ||
                                   !TokenMatches(q.get_header_value("Authorization"), opts.admin_token))) {
      r.set_header("WWW-Authenticate", "Bearer");
      return Reply(r, "/metrics", 401,
                   ErrorBody(401, Status::InvalidArgument(
                                      "Authorization: with API keys, /metrics needs the admin token")));
    }
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
                       conns.timed_out};
    Reply(r, "/metrics", 200, metrics.Render(now), "text/plain; version=0.0.4");
  });
  http.Get("/v1/cache", [this](const httplib::Request& q, httplib::Response& r) {
    // With tenants, the store's totals are the operator's: they count every key's prefixes.
    if (!opts.api_keys.empty() && (opts.admin_token.empty() ||
                                   !TokenMatches(q.get_header_value("Authorization"), opts.admin_token))) {
      r.set_header("WWW-Authenticate", "Bearer");
      return Reply(r, "/v1/cache", 401,
                   ErrorBody(401, Status::InvalidArgument(
                                      "Authorization: with API keys, the cache's figures need the admin token")));
    }
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
    if (GuardedHttpServer::RequestTimedOut() && r.status == 400) {
      r.status = 408;
      r.body.clear();
      GuardedHttpServer::CloseAfterResponse();
    }
    if (GuardedHttpServer::HeadTooLarge() && r.status == 400) {
      r.status = 431;
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
