// Server: the HTTP routes (cpp-httplib) over the scheduler.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "sched/scheduler.h"
#include "server/api.h"
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

// Whether an Authorization header is "Bearer <token>", compared in time
// independent of where they first differ.
bool TokenMatches(const std::string& header, const std::string& token) {
  static const std::string kBearer = "Bearer ";
  if (header.size() != kBearer.size() + token.size() || header.rfind(kBearer, 0) != 0) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(header[kBearer.size() + i] ^ token[i]);
  return diff == 0;
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

Status ServerOptions::Validate() const {
  if (port < 0 || port > 65535) return Status::InvalidArgument("port: must be in [0, 65535]");
  RETURN_IF_ERROR(SchedulerOptionsOf(*this).status());
  if (max_body_bytes == 0) return Status::InvalidArgument("max_body_bytes: must be at least 1");
  if (grace_ms < 0) return Status::InvalidArgument("grace_ms: must not be negative");
  return Status::Ok();
}

struct Server::Impl {
  const Model& model;
  const Tokenizer& tok;
  engine::Engine* const engine;
  const ServerOptions opts;
  httplib::Server http;
  Metrics metrics;
  sched::Scheduler sched;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_id{1};
  // cpp-httplib 0.11's stop() does nothing until listen_after_bind has begun
  // its loop (cpp-httplib #1645), so a Shutdown between Bind and that moment
  // would be lost and Run would never return. Run and Shutdown meet here.
  enum class Listen { kNotYet, kEntered, kDone };
  Mutex listen_mu;
  Listen listen TIERKV_GUARDED_BY(listen_mu) = Listen::kNotYet;
  bool stop_asked TIERKV_GUARDED_BY(listen_mu) = false;
  const uint64_t id_salt = std::random_device{}();

  Impl(const Model& m, const Tokenizer& t, engine::Engine* e, ServerOptions o)
      : model(m),
        tok(t),
        engine(e),
        opts(std::move(o)),
        sched(m, t, e, *SchedulerOptionsOf(opts),
              [this](const sched::Outcome& o, double seconds) {
                metrics.ObserveOutcome(o, seconds);
              }) {}

  void Routes();
  void Reply(httplib::Response& res, const std::string& endpoint, int status,
             const std::string& body, const char* type = "application/json");
  void Fail(httplib::Response& res, const std::string& endpoint, const Status& s);
  Result<sched::GenerationParams> Prepare(const CompletionRequest& r);
  void Complete(const httplib::Request& req, httplib::Response& res, bool chat);
  void Stream(httplib::Response& res, const std::string& endpoint, std::shared_ptr<sched::Job> job,
              ResponseHead head, bool include_usage, PeerWatch peer);
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
  if (code == 429) res.set_header("Retry-After", "1");
  Reply(res, endpoint, code, ErrorBody(code, s));
}

std::string Server::Impl::NewId(bool chat) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(id_salt ^ (next_id++ * 0x9e3779b97f4a7c15ULL)));
  return buf;
}

// The request's tokens and limits, checked against the model.
Result<sched::GenerationParams> Server::Impl::Prepare(const CompletionRequest& r) {
  const engine::System system = engine->options().system;
  if (r.retention && *r.retention != 1 && !engine::TraitsOf(system).selective) {
    return Status::InvalidArgument(std::string("retention: this server's system, ") +
                                   std::string(engine::SystemName(system)) +
                                   ", reads every prefix row (only 1 is accepted); a selective "
                                   "system (tierkv serve --system impress) reads a share");
  }
  sched::GenerationParams p;
  p.retention = r.retention.value_or(-1);
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
  p.max_tokens = r.max_tokens.value_or(r.chat ? context - n : kDefaultCompletionTokens);
  if (n >= context || p.max_tokens < 1 || n + p.max_tokens > context) {
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

void Server::Impl::Complete(const httplib::Request& req, httplib::Response& res, bool chat) {
  const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto parsed = ParseCompletionRequest(req.body, chat);
  if (!parsed.ok()) return Fail(res, endpoint, parsed.status());
  auto params = Prepare(*parsed);
  if (!params.ok()) return Fail(res, endpoint, params.status());
  const size_t prompt_tokens = params->prompt.size();
  auto job = std::make_shared<sched::Job>(std::move(*params));
  if (Status s = sched.Submit(job); !s.ok()) return Fail(res, endpoint, s);
  ResponseHead head{NewId(chat), UnixNow(), opts.model_id, chat};
  const PeerWatch peer(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  if (parsed->stream)
    return Stream(res, endpoint, std::move(job), std::move(head), parsed->include_usage, peer);
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
// releaser then cancels the job.
void Server::Impl::Stream(httplib::Response& res, const std::string& endpoint,
                          std::shared_ptr<sched::Job> job, ResponseHead head, bool include_usage,
                          PeerWatch peer) {
  metrics.CountRequest(endpoint, 200);
  auto first = std::make_shared<bool>(true);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, head, include_usage, first, peer](size_t, httplib::DataSink& sink) {
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
        if (o.reason == sched::FinishReason::kError ||
            o.reason == sched::FinishReason::kCancelled) {
          const Status s =
              o.reason == sched::FinishReason::kError
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
      },
      [job](bool success) {
        // The client left (or a write failed): the scheduler drops the job at
        // its next step.
        if (!success) job->Cancel();
      });
}

void Server::Impl::Routes() {
  http.Post("/v1/completions",
            [this](const httplib::Request& q, httplib::Response& r) { Complete(q, r, false); });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& q, httplib::Response& r) { Complete(q, r, true); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
    const nlohmann::json j{
        {"object", "list"},
        {"data",
         {{{"id", opts.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "tierkv"}}}}};
    Reply(r, "/v1/models", 200, j.dump());
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    if (draining) return Reply(r, "/health", 503, R"({"status":"shutting down"})");
    Reply(r, "/health", 200, R"({"status":"ok"})");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    const Snapshot now{sched.queued(), sched.running(), engine->StoreStatistics(), engine->PoolStatistics(),
                       sched.stats(), engine->RemoteStatistics(), !engine->options().remote.url.empty()};
    Reply(r, "/metrics", 200, metrics.Render(now), "text/plain; version=0.0.4");
  });
  http.Get("/v1/cache", [this](const httplib::Request&, httplib::Response& r) {
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
  // Errors cpp-httplib raises itself (413, 404, 405) get OpenAI's error body.
  http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    const std::string why = r.status == 413 ? "body: larger than the server's limit of " +
                                                  std::to_string(opts.max_body_bytes) + " bytes"
                            : r.status == 404 ? "no route " + q.method + " " + q.path
                                              : "the request could not be handled";
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
  im.http.set_keep_alive_timeout(2);
  // A worker per request in flight (a stream holds its worker), plus room
  // for the refusals and the metrics scrapes.
  const size_t workers = im.opts.max_queue + im.opts.max_running + 4;
  im.http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  im.Routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { impl_->sched.Shutdown(std::chrono::milliseconds(0)); }

Result<int> Server::Bind() {
  Impl& im = *impl_;
  const int port = im.opts.port == 0
                       ? im.http.bind_to_any_port(im.opts.host)
                       : (im.http.bind_to_port(im.opts.host, im.opts.port) ? im.opts.port : -1);
  if (port < 0) {
    return Status::IOError("cannot listen on " + im.opts.host + ":" + std::to_string(im.opts.port) +
                           " (in use, or not an address of this machine)");
  }
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

void Server::Shutdown() {
  Impl& im = *impl_;
  im.draining = true;
  im.sched.Drain(std::chrono::milliseconds(im.opts.grace_ms));
  {
    MutexLock l(&im.listen_mu);
    im.stop_asked = true;
  }
  // While Run is in, or about to enter, httplib's loop: stop it once it is
  // there. Not entered: Run sees stop_asked and returns. Done: nothing to stop.
  for (;;) {
    {
      MutexLock l(&im.listen_mu);
      if (im.listen != Impl::Listen::kEntered) return;
    }
    if (im.http.is_running()) {
      im.http.stop();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace tierkv::server
