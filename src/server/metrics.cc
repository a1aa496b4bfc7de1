#include "server/metrics.h"

#include <cinttypes>
#include <cstdio>

namespace tierkv::server {

namespace {

void Line(std::string* out, const std::string& name, const std::string& labels, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.17g\n", v);
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += buf;
}

void Head(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void One(std::string* out, const std::string& name, const char* type, const char* help, double v) {
  Head(out, name, type, help);
  Line(out, name, "", v);
}

void ByTier(std::string* out, const std::string& name, const char* type, const char* help,
            const std::array<double, 3>& v) {
  static const char* kTiers[3] = {"device", "host", "disk"};
  Head(out, name, type, help);
  for (int t = 0; t < 3; ++t) Line(out, name, std::string("tier=\"") + kTiers[t] + "\"", v[t]);
}

void ByPlace(std::string* out, const std::string& name, const char* type, const char* help,
             const std::array<double, 3>& v) {
  Head(out, name, type, help);
  for (int p = 0; p < 3; ++p) {
    const std::string place(engine::PrefixPlaceName(static_cast<engine::PrefixPlace>(p)));
    Line(out, name, "place=\"" + place + "\"", v[p]);
  }
}

std::vector<double> LatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
}

// The remote tier's series (docs/remote.md).
void RenderRemote(const RemoteStats& r, std::string* out) {
  One(out, "tierkv_remote_hits_total", "counter", "Chunks fetched from the remote tier, verified and admitted locally.",
      double(r.hits));
  One(out, "tierkv_remote_misses_total", "counter", "Remote lookups that found no further chunk.", double(r.misses));
  One(out, "tierkv_remote_corrupt_values_total", "counter",
      "Remote values failing any check: seal, checksum or identity (never served).", double(r.corrupt));
  One(out, "tierkv_remote_rejected_values_total", "counter",
      "Remote values whose seal does not match: forged, copied from another key, or damaged (never served).",
      double(r.rejected));
  One(out, "tierkv_remote_unsealed_values_total", "counter",
      "Remote values without a seal of a key this server holds (another deployment's): misses.",
      double(r.unsealed));
  One(out, "tierkv_remote_bytes_down_total", "counter", "Bytes fetched from the remote tier.", double(r.bytes_down));
  One(out, "tierkv_remote_important_chunks_total", "counter",
      "Chunks read in part (--remote-read important): their important rows only.", double(r.important_chunks));
  One(out, "tierkv_remote_important_bytes_total", "counter",
      "Bytes those partial reads fetched (in bytes_down too).", double(r.important_bytes));
  One(out, "tierkv_remote_important_value_bytes_total", "counter",
      "What the whole values of the chunks read in part hold.", double(r.important_value_bytes));
  One(out, "tierkv_remote_ahead_fetches_total", "counter",
      "Remote lookups run ahead of their requests (while they waited in the queue).", double(r.ahead_fetches));
  One(out, "tierkv_remote_ahead_chunks_total", "counter", "Chunks those lookups admitted (in hits too).",
      double(r.ahead_chunks));
  One(out, "tierkv_remote_ahead_dropped_total", "counter", "Lookups ahead not run: their queue was full.",
      double(r.ahead_dropped));
  One(out, "tierkv_remote_bytes_up_total", "counter", "Bytes written to the remote tier.", double(r.bytes_up));
  One(out, "tierkv_remote_uploads_total", "counter", "Chunks written to the remote tier (Redis replied OK to every layer).",
      double(r.uploads));
  One(out, "tierkv_remote_upload_refusals_total", "counter",
      "Chunks Redis refused to store (an error reply: OOM, NOAUTH, READONLY, a refused login).",
      double(r.upload_refusals));
  One(out, "tierkv_remote_dropped_writes_total", "counter", "Chunks not written: the upload queue was full.",
      double(r.dropped_writes));
  One(out, "tierkv_remote_queued_chunks", "gauge", "Chunks waiting to go up.", double(r.queued));
  One(out, "tierkv_remote_redirects_total", "counter", "Redis Cluster MOVED and ASK redirections followed.",
      double(r.redirects));
  One(out, "tierkv_remote_fetch_seconds_total", "counter", "Time requests spent looking up and fetching remotely.",
      r.fetch_ms_total / 1000);
  Head(out, "tierkv_remote_errors_total", "counter", "Remote operations that failed (a miss), by kind.");
  for (size_t k = 0; k < r.errors.size(); ++k) {
    Line(out, "tierkv_remote_errors_total", "kind=\"" + std::string(kRemoteErrorKinds[k]) + "\"", double(r.errors[k]));
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

void Histogram::Observe(double x) {
  size_t i = 0;
  while (i < bounds_.size() && x > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += x;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    char le[32];
    std::snprintf(le, sizeof le, "le=\"%g\"", bounds_[i]);
    Line(out, name + "_bucket", le, static_cast<double>(cumulative));
  }
  Line(out, name + "_bucket", "le=\"+Inf\"", static_cast<double>(count_));
  Line(out, name + "_sum", "", sum_);
  Line(out, name + "_count", "", static_cast<double>(count_));
}

Metrics::Metrics() : ttft_(LatencyBounds()), tpot_(LatencyBounds()), queue_(LatencyBounds()), e2e_(LatencyBounds()) {}

void Metrics::CountRequest(const std::string& endpoint, int http_status) {
  MutexLock l(&mu_);
  ++requests_[{endpoint, http_status}];
}

void Metrics::ObserveOutcome(const sched::Outcome& o, double request_seconds) {
  const engine::RequestStats& s = o.prefill;
  MutexLock l(&mu_);
  ++finished_[sched::FinishReasonName(o.reason)];
  e2e_.Observe(request_seconds);
  queue_.Observe(o.queue_ms / 1000);
  if (o.reason == sched::FinishReason::kError || o.reason == sched::FinishReason::kCancelled) {
    if (s.prompt_tokens == 0) return;  // never reached the engine
  }
  ttft_.Observe(o.ttft_ms / 1000);
  if (o.completion_tokens > 1) tpot_.Observe(o.decode_ms / 1000 / static_cast<double>(o.completion_tokens - 1));
  Totals& t = totals_;
  t.prompt_tokens += s.prompt_tokens;
  t.reused_tokens += s.reused_tokens;
  t.completion_tokens += o.completion_tokens;
  t.decode_seconds += o.decode_ms / 1000;
  t.hits[0] += s.device_hits;
  t.hits[1] += s.host_hits;
  t.hits[2] += s.disk_reads;
  t.bytes[0] += s.device_bytes_read;
  t.bytes[1] += s.host_bytes_read;
  t.bytes[2] += s.disk_bytes_read;
  if (s.reused_tokens > 0) {
    for (const engine::LayerTrace& lt : s.layers) {
      t.rows_used += static_cast<double>(lt.rows);
      t.rows_offered += lt.retention > 0 ? static_cast<double>(lt.rows) / lt.retention : 0;
    }
    t.reuse_layers += s.layers.size();
  }
  t.fallback_layers += static_cast<uint64_t>(s.fallback_layers);
  const int w = static_cast<int>(o.waited_as);
  ++t.waited[w];
  t.load_wait_seconds[w] += s.load_wait_ms / 1000;
  if (o.prefetched) ++t.prefetched[static_cast<int>(o.started_as)];
  if (s.attempts > 1) ++t.retried;
}

std::string Metrics::Render(const Snapshot& now) const {
  std::string out;
  MutexLock l(&mu_);
  Head(&out, "tierkv_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [key, n] : requests_) {
    Line(&out, "tierkv_requests_total",
         "endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"", static_cast<double>(n));
  }
  Head(&out, "tierkv_generations_total", "counter",
       "Generations that ended, by reason (stop, length, cancelled: the client left or the server shut down, error).");
  for (const auto& [reason, n] : finished_) {
    Line(&out, "tierkv_generations_total", "reason=\"" + reason + "\"", static_cast<double>(n));
  }
  Head(&out, "tierkv_ttft_seconds", "histogram", "Arrival to the first generated token.");
  ttft_.Render("tierkv_ttft_seconds", &out);
  Head(&out, "tierkv_time_per_output_token_seconds", "histogram", "Decode time per token after the first.");
  tpot_.Render("tierkv_time_per_output_token_seconds", &out);
  Head(&out, "tierkv_queue_wait_seconds", "histogram", "Arrival to the start of the prompt's pass.");
  queue_.Render("tierkv_queue_wait_seconds", &out);
  Head(&out, "tierkv_request_seconds", "histogram", "Arrival to the last token.");
  e2e_.Render("tierkv_request_seconds", &out);
  const Totals& t = totals_;
  One(&out, "tierkv_prompt_tokens_total", "counter", "Prompt tokens.", static_cast<double>(t.prompt_tokens));
  One(&out, "tierkv_reused_prompt_tokens_total", "counter", "Prompt tokens whose K/V was reused.",
      static_cast<double>(t.reused_tokens));
  One(&out, "tierkv_completion_tokens_total", "counter", "Generated tokens.", static_cast<double>(t.completion_tokens));
  One(&out, "tierkv_decode_tokens_per_second", "gauge", "Generated tokens per second of decoding, over all requests.",
      t.decode_seconds > 0 ? static_cast<double>(t.completion_tokens) / t.decode_seconds : 0);
  ByTier(&out, "tierkv_prefix_hits_total", "counter", "Chunk-layer accesses of reused prefixes, by the tier that served them.",
         {double(t.hits[0]), double(t.hits[1]), double(t.hits[2])});
  ByTier(&out, "tierkv_prefix_bytes_read_total", "counter", "Bytes of reused prefix K/V read, by tier.",
         {double(t.bytes[0]), double(t.bytes[1]), double(t.bytes[2])});
  One(&out, "tierkv_important_row_ratio", "gauge", "Prefix rows attended, of those stored (1: everything loaded).",
      t.rows_offered > 0 ? t.rows_used / t.rows_offered : 1);
  One(&out, "tierkv_probe_fallback_layers_total", "counter", "Layers whose probe heads disagreed and read all keys.",
      static_cast<double>(t.fallback_layers));
  One(&out, "tierkv_reuse_layers_total", "counter", "Layers of requests that reused a prefix.", static_cast<double>(t.reuse_layers));
  One(&out, "tierkv_requests_retried_total", "counter", "Requests computed again after stored data failed its checks.",
      static_cast<double>(t.retried));
  One(&out, "tierkv_queue_length", "gauge", "Requests waiting to start.", static_cast<double>(now.queued));
  One(&out, "tierkv_running_requests", "gauge", "Requests generating.", static_cast<double>(now.running));
  One(&out, "tierkv_http_connections", "gauge", "Connections in service (each on a worker).",
      static_cast<double>(now.http_open));
  One(&out, "tierkv_http_connections_refused_total", "counter",
      "Connections answered 503 at once: --max-connections were in service.", static_cast<double>(now.http_refused));
  One(&out, "tierkv_http_connections_refused_per_address_total", "counter",
      "Connections answered 503 at once: their address held --max-connections-per-address.",
      static_cast<double>(now.http_refused_per_address));
  One(&out, "tierkv_http_request_timeouts_total", "counter",
      "Requests not received whole within --request-timeout-seconds (408).", static_cast<double>(now.http_timed_out));
  One(&out, "tierkv_store_corrupt_records_total", "counter", "Stored records that failed verification (served as misses).",
      static_cast<double>(now.store.corrupt_records));
  One(&out, "tierkv_store_evicted_chunks_total", "counter", "Chunks evicted from the disk tier for its budget.",
      static_cast<double>(now.store.evicted_chunks));
  One(&out, "tierkv_store_live_bytes", "gauge", "Bytes of live records on disk.", static_cast<double>(now.store.live_bytes));
  One(&out, "tierkv_store_dead_bytes", "gauge", "Bytes of dead records on disk (awaiting compaction).",
      static_cast<double>(now.store.dead_bytes));
  One(&out, "tierkv_store_budget_bytes", "gauge", "The bound on live plus dead bytes on disk (0: unlimited).",
      static_cast<double>(now.store.budget_bytes));
  One(&out, "tierkv_store_put_failures_total", "counter", "Prompts that could not be stored (a full disk after evicting and retrying, an I/O error).",
      static_cast<double>(now.store.put_failures));
  One(&out, "tierkv_store_nospace_retries_total", "counter", "Stores that met a full file system and tried again after evicting and compacting.",
      static_cast<double>(now.store.nospace_retries));
  One(&out, "tierkv_store_directory_lost", "gauge",
      "1 when the cache directory was removed or replaced while serving: the disk tier stopped storing (restart on a directory).",
      now.store.directory_lost ? 1.0 : 0.0);
  One(&out, "tierkv_store_behind_queued", "gauge", "Prompts waiting for the store writer.",
      static_cast<double>(now.behind.queued));
  One(&out, "tierkv_store_behind_dropped_total", "counter",
      "Prompts not stored: the store writer stalled (a write running over 2 s) or its queue full.",
      static_cast<double>(now.behind.dropped));
  One(&out, "tierkv_store_behind_stalled", "gauge", "1 while a store write has run for more than 2 s (a hung or slow disk).",
      now.behind.stalled ? 1.0 : 0.0);
  One(&out, "tierkv_store_live_chunks", "gauge", "Chunks the disk tier holds.", static_cast<double>(now.store.live_chunks));
  ByTier(&out, "tierkv_tier_used_bytes", "gauge", "Bytes each tier holds (device and host pools, live records on disk).",
         {double(now.pools.device_used), double(now.pools.host_used), double(now.store.live_bytes)});
  One(&out, "tierkv_pool_device_hit_ratio", "gauge", "Pool accesses served by the device pool.", now.pools.device_hit_ratio());
  ByPlace(&out, "tierkv_waited_requests_total", "counter",
          "Requests that reached the engine, by where their prefix K/V was while they waited.",
          {double(t.waited[0]), double(t.waited[1]), double(t.waited[2])});
  ByPlace(&out, "tierkv_prefix_load_wait_seconds_total", "counter",
          "Time prefills waited for prefix reads, by where the prefix was while the request waited.",
          {t.load_wait_seconds[0], t.load_wait_seconds[1], t.load_wait_seconds[2]});
  const sched::SchedulerStats& ss = now.scheduler;
  ByPlace(&out, "tierkv_started_requests_total", "counter",
          "Requests started, by where their prefix K/V was when they started.",
          {double(ss.started[0]), double(ss.started[1]), double(ss.started[2])});
  ByPlace(&out, "tierkv_prefetched_requests_total", "counter",
          "Requests whose prefix the prefetcher loaded while they waited (car), by where it was when they "
          "started (disk: evicted again, or started before the prefetch ended).",
          {double(t.prefetched[0]), double(t.prefetched[1]), double(t.prefetched[2])});
  One(&out, "tierkv_prefetches_total", "counter", "Prefetches finished (car).", static_cast<double>(ss.prefetch.prefetches));
  One(&out, "tierkv_prefetch_failures_total", "counter", "Prefetches whose reads failed (the request loads itself).",
      static_cast<double>(ss.prefetch.failed));
  One(&out, "tierkv_prefetch_bytes_total", "counter", "Bytes prefetches read from disk.",
      static_cast<double>(ss.prefetch.bytes));
  if (now.has_remote) RenderRemote(now.remote, &out);
  return out;
}

}  // namespace tierkv::server
