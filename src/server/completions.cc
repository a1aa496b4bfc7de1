// The inference routes: a body read under its limit, turned into a job
// (tokens, limits, the tenant's namespace), waited on or streamed as
// server-sent events.
#include <openssl/rand.h>
#include <sys/random.h>

#include <chrono>
#include <cstdio>

#include "server/server_impl.h"
#include "server/tenants.h"
#include "tierkv/chat.h"

namespace tierkv::server {

namespace {

constexpr int kDefaultCompletionTokens = 16;  // OpenAI's default for /v1/completions
// How often a waiting worker looks whether its client is still there.
constexpr std::chrono::milliseconds kPeerCheck{100};
// Counted (nobody reads it) for a request whose client hung up: nginx's code.
constexpr int kClientClosed = 499;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

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
  // 128 random bits, nothing derived from a counter: an id tells its
  // holder nothing of other requests (an xxh3 of the request number under a
  // 64-bit seed was invertible: a tenant counted others' requests).
  unsigned char bits[16];
  if (RAND_bytes(bits, sizeof bits) != 1) {
    // OpenSSL's generator failed (it seeds from getrandom): the kernel's directly.
    for (size_t got = 0; got < sizeof bits;) {
      const ssize_t n = ::getrandom(bits + got, sizeof bits - got, 0);
      if (n > 0) got += static_cast<size_t>(n);
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = chat ? "chatcmpl-" : "cmpl-";
  for (unsigned char b : bits) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
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
  const std::string* key = MatchingKey(req.get_header_value("Authorization"), opts.api_keys);
  // The key's number: its share of the queue and of the slots (sched/fair_queue.h).
  p.tenant = key ? static_cast<uint32_t>(key - opts.api_keys.data()) + 1 : 0;
  p.cache_namespace = CacheNamespace(key && !opts.share_prefixes ? *key : std::string(), r.cache_salt);
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

}  // namespace tierkv::server
