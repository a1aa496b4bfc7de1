// RunServeBench: the load generator (tierkv/tools/serve_bench.h) over cpp-httplib's client.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tierkv/elapsed.h"
#include "tierkv/mutex.h"
#include "tierkv/tools/serve_bench.h"

namespace tierkv::bench {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr size_t kMaxInFlightSessions = 256;  // --rate: sessions running at once, at most
constexpr size_t kErrorSamples = 5;

// One streamed request's measurements.
struct Sample {
  bool ok = false;
  std::string error;
  double ttft_ms = 0, e2e_ms = 0, tpot_ms = -1;  // tpot < 0: fewer than 2 tokens
  uint64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  std::string text;  // the answer (a chat's history grows by it)
};

// Server-sent events as they arrive, in pieces of any size.
class EventReader {
 public:
  explicit EventReader(Clock::time_point t0, bool chat) : t0_(t0), chat_(chat) {}
  // False to stop reading (an error event).
  bool Feed(const char* data, size_t n, Sample* s) {
    buf_.append(data, n);
    for (size_t end; (end = buf_.find("\n\n")) != std::string::npos;) {
      const std::string ev = buf_.substr(0, end);
      buf_.erase(0, end + 2);
      if (!Event(ev, s)) return false;
    }
    return true;
  }
  bool done() const { return done_; }

 private:
  bool Event(const std::string& ev, Sample* s) {
    if (ev.rfind("data: ", 0) != 0) return true;  // comments, other fields
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      done_ = true;
      return true;
    }
    const json j = json::parse(data, nullptr, false);
    if (j.is_discarded()) return Fail(s, "an event that is not JSON: " + data.substr(0, 120));
    if (j.contains("error")) return Fail(s, "error event: " + j["error"].value("message", j["error"].dump()));
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      s->prompt_tokens = u.value("prompt_tokens", 0);
      s->completion_tokens = u.value("completion_tokens", 0);
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
        s->cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
      }
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return true;
    const json& c = j["choices"][0];
    const json* text = chat_ ? (c.contains("delta") ? &c["delta"] : nullptr) : &c;
    const char* key = chat_ ? "content" : "text";
    if (text && text->contains(key) && (*text)[key].is_string() && !(*text)[key].get<std::string>().empty()) {
      if (s->text.empty()) s->ttft_ms = MsSince(t0_);
      s->text += (*text)[key].get<std::string>();
    }
    return true;
  }
  bool Fail(Sample* s, std::string why) {
    s->error = std::move(why);
    return false;
  }
  const Clock::time_point t0_;
  const bool chat_;
  std::string buf_;
  bool done_ = false;
};

Sample Send(httplib::Client& client, bool chat, const json& body) {
  Sample s;
  httplib::Request req;
  req.method = "POST";
  req.path = chat ? "/v1/chat/completions" : "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  const auto t0 = Clock::now();
  EventReader reader(t0, chat);
  std::string error_body;
  int status = 0;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min<size_t>(n, 400));
      return true;
    }
    return reader.Feed(data, n, &s);
  };
  auto res = client.send(req);
  s.e2e_ms = MsSince(t0);
  if (!s.error.empty()) return s;
  if (!res) {
    s.error = "no answer: " + httplib::to_string(res.error());
    return s;
  }
  if (status != 200) {
    s.error = "HTTP " + std::to_string(status) + ": " + error_body;
    return s;
  }
  if (!reader.done()) {
    s.error = "the stream ended without [DONE]";
    return s;
  }
  s.ok = true;
  if (s.text.empty()) s.ttft_ms = s.e2e_ms;  // nothing but the end: the answer is empty
  if (s.completion_tokens > 1) s.tpot_ms = (s.e2e_ms - s.ttft_ms) / static_cast<double>(s.completion_tokens - 1);
  return s;
}

// What every client thread adds to.
class Collector {
 public:
  void Add(Sample s) TIERKV_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    if (!s.ok && errors_.size() < kErrorSamples) errors_.push_back(s.error);
    samples_.push_back(std::move(s));
    done_ = samples_.size();
    failed_ += samples_.back().ok ? 0 : 1;
  }
  std::vector<Sample> Take(std::vector<std::string>* errors) TIERKV_EXCLUDES(mu_) {
    MutexLock l(&mu_);
    *errors = errors_;
    return std::move(samples_);
  }
  std::atomic<size_t> done_{0}, failed_{0};

 private:
  Mutex mu_;
  std::vector<Sample> samples_ TIERKV_GUARDED_BY(mu_);
  std::vector<std::string> errors_ TIERKV_GUARDED_BY(mu_);
};

// One session's turns in order, until the deadline.
void RunSession(const ServeBenchOptions& o, const Session& s, Clock::time_point deadline, Collector* out) {
  httplib::Client client(o.url);
  client.set_read_timeout(static_cast<time_t>(o.request_timeout_s));
  client.set_connection_timeout(10);
  json history = json::array();
  if (s.chat) history.push_back({{"role", "system"}, {"content", s.system}});
  for (const std::string& turn : s.turns) {
    if (Clock::now() >= deadline) return;
    json body{{"max_tokens", s.max_tokens > 0 ? s.max_tokens : o.max_tokens},
              {"temperature", 0},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}},
              {"ignore_eos", o.ignore_eos}};
    if (s.chat) {
      history.push_back({{"role", "user"}, {"content", turn}});
      body["messages"] = history;
    } else {
      body["prompt"] = s.prefix + turn;
    }
    Sample sample = Send(client, s.chat, body);
    const bool ok = sample.ok;
    if (s.chat && ok) history.push_back({{"role", "assistant"}, {"content", sample.text}});
    out->Add(std::move(sample));
    if (!ok) return;  // the session's history is broken
  }
}

void ClosedLoop(const ServeBenchOptions& o, const std::vector<Session>& sessions, Clock::time_point deadline,
                Collector* out) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; ++c) {
    clients.emplace_back([&] {
      while (Clock::now() < deadline) RunSession(o, sessions[next++ % sessions.size()], deadline, out);
    });
  }
  for (auto& t : clients) t.join();
}

void OpenLoop(const ServeBenchOptions& o, const std::vector<Session>& sessions, Clock::time_point deadline,
              Collector* out) {
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate);
  std::atomic<size_t> in_flight{0};
  std::vector<std::thread> running;
  auto at = Clock::now();
  for (size_t i = 0;; ++i) {
    at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    if (at >= deadline) break;
    std::this_thread::sleep_until(at);
    if (in_flight >= kMaxInFlightSessions) continue;  // the server is far behind: this arrival is dropped
    ++in_flight;
    running.emplace_back([&, i] {
      RunSession(o, sessions[i % sessions.size()], deadline, out);
      --in_flight;
    });
  }
  for (auto& t : running) t.join();
}

}  // namespace

Status ServeBenchOptions::Validate() const {
  if (url.rfind("http://", 0) != 0) return Status::InvalidArgument("--url: must begin with http://, got " + url);
  if ((rate > 0) == (concurrency > 0)) return Status::InvalidArgument("--rate or --concurrency: give exactly one");
  if (rate < 0) return Status::InvalidArgument("--rate: must be positive");
  if (!(duration_s > 0)) return Status::InvalidArgument("--duration: must be positive");
  if (max_tokens < 1) return Status::InvalidArgument("--max-tokens: must be at least 1");
  return Status::Ok();
}

Result<ServeBenchReport> RunServeBench(const ServeBenchOptions& o, const std::vector<Session>& sessions,
                                       const std::function<void(size_t, size_t)>& progress) {
  RETURN_IF_ERROR(o.Validate());
  if (sessions.empty()) return Status::InvalidArgument("workload: no sessions");
  {
    httplib::Client probe(o.url);
    probe.set_connection_timeout(5);
    auto h = probe.Get("/health");
    if (!h) return Status::Unavailable("--url: no server answers at " + o.url + " (" + httplib::to_string(h.error()) + ")");
  }
  Collector out;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  std::atomic<bool> finished{false};
  std::thread reporter([&] {
    for (int tick = 1; !finished; ++tick) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (progress && tick % 5 == 0) progress(out.done_, out.failed_);
    }
  });
  if (o.concurrency > 0) {
    ClosedLoop(o, sessions, deadline, &out);
  } else {
    OpenLoop(o, sessions, deadline, &out);
  }
  finished = true;
  reporter.join();
  ServeBenchReport r;
  r.wall_s = SecondsSince(t0);
  std::vector<double> ttft, tpot, e2e;
  for (const Sample& s : out.Take(&r.error_samples)) {
    ++r.requests;
    if (!s.ok) {
      ++r.errors;
      continue;
    }
    ++r.ok;
    ttft.push_back(s.ttft_ms);
    e2e.push_back(s.e2e_ms);
    if (s.tpot_ms >= 0) tpot.push_back(s.tpot_ms);
    r.prompt_tokens += s.prompt_tokens;
    r.cached_tokens += s.cached_tokens;
    r.completion_tokens += s.completion_tokens;
  }
  r.ttft = Summarize(std::move(ttft));
  r.tpot = Summarize(std::move(tpot));
  r.e2e = Summarize(std::move(e2e));
  r.requests_per_s = static_cast<double>(r.ok) / r.wall_s;
  r.output_tokens_per_s = static_cast<double>(r.completion_tokens) / r.wall_s;
  return r;
}

std::string FormatServeBench(const ServeBenchReport& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "requests %zu (ok %zu, errors %zu) in %.1f s: %.2f req/s, %.1f output tokens/s\n",
                r.requests, r.ok, r.errors, r.wall_s, r.requests_per_s, r.output_tokens_per_s);
  out += line;
  std::snprintf(line, sizeof line, "prompt tokens %llu, of them reused (cached_tokens) %llu (%.1f%%)\n",
                static_cast<unsigned long long>(r.prompt_tokens), static_cast<unsigned long long>(r.cached_tokens),
                r.prompt_tokens ? 100.0 * static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens) : 0);
  out += line;
  out += "               n      mean       p50       p90       p99       max   (ms)\n";
  for (const auto& [name, s] : {std::pair<const char*, const LatencySummary&>{"ttft", r.ttft},
                                {"tpot", r.tpot},
                                {"e2e", r.e2e}}) {
    std::snprintf(line, sizeof line, "%-8s %8zu %9.2f %9.2f %9.2f %9.2f %9.2f\n", name, s.n, s.mean, s.p50, s.p90,
                  s.p99, s.max);
    out += line;
  }
  for (const std::string& e : r.error_samples) out += "error: " + e + "\n";
  return out;
}

std::string ServeBenchJson(const ServeBenchReport& r) {
  auto lat = [](const LatencySummary& s) {
    return json{{"n", s.n}, {"mean_ms", s.mean}, {"p50_ms", s.p50}, {"p90_ms", s.p90}, {"p99_ms", s.p99}, {"max_ms", s.max}};
  };
  const json j{{"wall_s", r.wall_s},
               {"requests", r.requests},
               {"ok", r.ok},
               {"errors", r.errors},
               {"error_samples", r.error_samples},
               {"ttft", lat(r.ttft)},
               {"tpot", lat(r.tpot)},
               {"e2e", lat(r.e2e)},
               {"prompt_tokens", r.prompt_tokens},
               {"cached_tokens", r.cached_tokens},
               {"completion_tokens", r.completion_tokens},
               {"requests_per_s", r.requests_per_s},
               {"output_tokens_per_s", r.output_tokens_per_s}};
  return j.dump(2);
}

}  // namespace tierkv::bench
