#include "remote/remote_tier.h"

#include <pthread.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "index/radix_tree.h"
#include "remote/value.h"
#include "store/format.h"
#include "store/record_check.h"
#include "tierkv/elapsed.h"
#include "tierkv/logging.h"

namespace tierkv {

Result<RemoteAdmit> ParseRemoteAdmit(std::string_view name) {
  if (name == "reused") return RemoteAdmit::kReused;
  if (name == "always") return RemoteAdmit::kAlways;
  return Status::InvalidArgument("remote admit '" + std::string(name) + "': expected reused or always");
}

Result<RemoteRead> ParseRemoteRead(std::string_view name) {
  if (name == "whole") return RemoteRead::kWhole;
  if (name == "important") return RemoteRead::kImportant;
  return Status::InvalidArgument("remote read '" + std::string(name) + "': expected whole or important");
}

Status RemoteOptions::Validate() const {
  if (url.empty()) return Status::Ok();
  ASSIGN_OR_RETURN(remote::RedisUrl u, remote::ParseRedisUrl(url));
  RETURN_IF_ERROR(remote::CheckSupported(u));
  if ((!tls_ca_file.empty() || !tls_cert_file.empty() || !tls_key_file.empty()) && !u.tls) {
    return Status::InvalidArgument("remote tls_ca_file/tls_cert_file/tls_key_file given for " + u.ToString() +
                                   ": TLS files need rediss:// or rediss-cluster://");
  }
  if (!tls_key_file.empty() && tls_cert_file.empty()) {
    return Status::InvalidArgument("remote tls_key_file given without tls_cert_file");
  }
  if (timeout_ms == 0 || timeout_ms > 60000) {
    return Status::InvalidArgument("remote timeout_ms " + std::to_string(timeout_ms) + " is not in 1..60000");
  }
  if (queue_chunks == 0) return Status::InvalidArgument("remote queue_chunks must be at least 1");
  if (max_fetch_chunks == 0) return Status::InvalidArgument("remote max_fetch_chunks must be at least 1");
  if (ahead_prompts == 0) return Status::InvalidArgument("remote ahead_prompts must be at least 1");
  return Status::Ok();
}

uint64_t RemoteStats::errors_total() const {
  uint64_t n = 0;
  for (uint64_t e : errors) n += e;
  return n;
}

}  // namespace tierkv

namespace tierkv::remote {
namespace {

// A distinct error message is logged when first seen, then at most this often.
constexpr auto kLogSameEvery = std::chrono::minutes(10);
constexpr size_t kMaxLoggedMessages = 256;

}  // namespace

std::string ChunkKey(uint64_t fingerprint, uint64_t prefix_hash, uint16_t layer) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "tierkv:{%016" PRIx64 ".%016" PRIx64 "}:%u", fingerprint, prefix_hash,
                static_cast<unsigned>(layer));
  return buf;
}

Result<std::unique_ptr<RemoteTier>> RemoteTier::Open(const RemoteOptions& options, RemoteGeometry geometry,
                                                     store::ChunkStore* store) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(RedisUrl url, ResolveRedisUrl(options.url, options.password));
  ASSIGN_OR_RETURN(Sealer sealer, Sealer::Load(options.key_file));
  if (!url.tls && !url.password.empty()) {
    TIERKV_LOG(kWarn) << "remote tier " << url.ToString()
                      << ": the password goes to the server in clear text (redis://): a process that binds the "
                         "port while Redis is down receives it; rediss:// verifies the server first. The values "
                         "stay sealed either way: the password lets no one inject K/V";
  }
  TIERKV_LOG(kInfo) << "remote tier " << url.ToString() << ": values sealed with key " << sealer.seal_key_id()
                    << " (" << sealer.keys() << " key(s) open them; servers sharing values must show the same id)";
  return std::unique_ptr<RemoteTier>(new RemoteTier(options, geometry, std::move(url), std::move(sealer), store));
}

namespace {

// What one reply may hold: a whole sealed value of `g` (GET), with room
// for the protocol's framing. A server announcing more is cut off.
ReplyLimits LimitsFor(const RemoteGeometry& g) {
  const uint32_t pages = store::PagesFor(2ull * g.chunk_tokens * g.row_bytes);
  return ReplyLimits{store::kBlockSize * (1ull + pages) + Sealer::SealBytes(pages) + 1024, 1u << 16};
}

}  // namespace

RemoteTier::RemoteTier(const RemoteOptions& o, RemoteGeometry g, RedisUrl url, Sealer sealer,
                       store::ChunkStore* store)
    : opts_(o), geo_(g), url_(std::move(url)), store_(store), checker_(g.fingerprint, g.row_bytes, g.dtype, g.chunk_tokens),
      sealer_(std::move(sealer)),
      fetch_router_(url_, std::chrono::milliseconds(o.timeout_ms), TlsFiles{o.tls_ca_file, o.tls_cert_file, o.tls_key_file},
                    LimitsFor(g)),
      up_router_(url_, std::chrono::milliseconds(o.timeout_ms), TlsFiles{o.tls_ca_file, o.tls_cert_file, o.tls_key_file},
                 LimitsFor(g)) {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tierkv-remote-up");
    UploadLoop();
  });
  ahead_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "tierkv-remote-ah");  // 15 characters at most
    AheadLoop();
  });
}

RemoteTier::~RemoteTier() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
  ahead_thread_.join();
}

void RemoteTier::CountError(ErrorKind k, const std::string& why, bool log) {
  if (k == ErrorKind::kNone) return;
  MutexLock l(&mu_);
  ++stats_.errors[static_cast<size_t>(k) - 1];
  if (!log) return;
  const std::string text = why.empty() ? std::string(ErrorKindName(k)) + " error" : why;
  const auto now = std::chrono::steady_clock::now();
  if (logged_.size() >= kMaxLoggedMessages && logged_.count(text) == 0) logged_.clear();  // bounded
  auto [it, first] = logged_.try_emplace(text, Logged{now, 0});
  if (!first && now - it->second.at < kLogSameEvery) {
    ++it->second.since;
    return;
  }
  const uint64_t again = it->second.since;
  it->second = Logged{now, 0};
  TIERKV_LOG(kWarn) << "remote tier " << url_.ToString() << ": " << text << " (" << ErrorKindName(k)
                    << (first ? "" : "; " + std::to_string(again) + " more times in the last 10 min")
                    << "; a miss, requests go on with what is local; " << stats_.errors_total()
                    << " remote errors so far; each distinct error logged at most every 10 min)";
}

void RemoteTier::CountErrorReply(const Reply& r) { CountError(KindOfErrorReply(r), "Redis replied: " + r.str); }

void RemoteTier::CountCorrupt(uint64_t prefix_hash, uint16_t layer, const Status& why) {
  MutexLock l(&mu_);
  ++stats_.corrupt;
  TIERKV_LOG(kWarn) << "remote tier: the value of " << ChunkKey(geo_.fingerprint, prefix_hash, layer)
                    << " fails its checks (" << why.ToString() << "): a miss";
}

void RemoteTier::CountSeal(uint64_t prefix_hash, uint16_t layer, SealCheck s, const std::string& why) {
  MutexLock l(&mu_);
  if (s == SealCheck::kUnsealed) {
    ++stats_.unsealed;
    return;  // another deployment's values: expected where a Redis is shared, not worth a line each
  }
  ++stats_.corrupt;
  ++stats_.rejected;
  TIERKV_LOG(kWarn) << "remote tier: the value of " << ChunkKey(geo_.fingerprint, prefix_hash, layer)
                    << " is rejected: " << why << "; a miss (" << stats_.rejected << " rejected so far)";
}

uint32_t RemoteTier::ValuePages() const { return store::PagesFor(2ull * geo_.chunk_tokens * geo_.row_bytes); }

bool RemoteTier::TakeWhole(const ValueIdentity& id, std::string* value) {
  std::string why;
  const SealCheck s = sealer_.OpenWhole(ChunkKey(geo_.fingerprint, id.prefix_hash, id.layer), ValuePages(), value, &why);
  if (s != SealCheck::kOk) {
    CountSeal(id.prefix_hash, id.layer, s, why);
    return false;
  }
  if (Status st = TakeWholeValue(checker_, id, value); !st.ok()) {
    CountCorrupt(id.prefix_hash, id.layer, st);
    return false;
  }
  return true;
}

void RemoteTier::CountErrors(const std::vector<Failure>& failures) {
  // One failed pipeline fails all its commands: counted once, with why.
  // A call failing at once while backing off is counted, not logged: the
  // failure that started the backoff was.
  for (const Failure& f : failures) CountError(f.kind, f.why, /*log=*/!f.backed_off);
}

void RemoteTier::RunCounted(Router* router, std::span<const Command> cmds, std::vector<Reply>* replies,
                            std::vector<ErrorKind>* errors) {
  const RouterCounters before = router->counters();
  std::vector<Failure> failures;
  router->Run(cmds, replies, errors, &failures);
  CountErrors(failures);
  const RouterCounters& after = router->counters();
  MutexLock l(&mu_);
  stats_.redirects += (after.moved - before.moved) + (after.asked - before.asked);
}

std::vector<std::vector<std::string>> RemoteTier::FetchRun(std::span<const int32_t> tokens, size_t start,
                                                           std::span<const uint64_t> hashes,
                                                           uint64_t* bytes) {
  const uint32_t C = geo_.chunk_tokens;
  std::vector<std::vector<std::string>> out;
  std::vector<Reply> replies;
  std::vector<ErrorKind> errors;
  // Which chunks are there: their last layer (written last).
  std::vector<Command> cmds;
  for (uint64_t h : hashes) {
    cmds.push_back({"EXISTS", ChunkKey(geo_.fingerprint, h, static_cast<uint16_t>(geo_.layers - 1))});
  }
  RunCounted(&fetch_router_, cmds, &replies, &errors);
  size_t present = 0;
  while (present < hashes.size() && errors[present] == ErrorKind::kNone &&
         replies[present].type == Reply::Type::kInteger && replies[present].integer == 1) {
    ++present;
  }
  if (present < hashes.size() && replies[present].is_error()) CountErrorReply(replies[present]);
  for (size_t first = 0; first < present; first += kChunksPerPipeline) {
    const size_t last = std::min(present, first + kChunksPerPipeline);
    cmds.clear();
    for (size_t i = first; i < last; ++i) {
      for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
        cmds.push_back({"GET", ChunkKey(geo_.fingerprint, hashes[i], layer)});
      }
    }
    RunCounted(&fetch_router_, cmds, &replies, &errors);
    for (size_t i = first; i < last; ++i) {
      std::vector<std::string> layers(geo_.layers);
      const uint32_t pos = static_cast<uint32_t>(start + i * C);
      for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
        const size_t j = (i - first) * geo_.layers + layer;
        if (errors[j] != ErrorKind::kNone) return out;
        Reply& r = replies[j];
        if (r.is_error()) {
          CountErrorReply(r);
          return out;
        }
        if (r.type != Reply::Type::kString) return out;  // evicted since EXISTS: a miss
        *bytes += r.str.size();
        const ValueIdentity id{layer, hashes[i], pos, C, tokens.subspan(pos, C)};
        if (!TakeWhole(id, &r.str)) return out;
        layers[layer] = std::move(r.str);
      }
      out.push_back(std::move(layers));
    }
  }
  return out;
}

FillResult RemoteTier::Fill(std::span<const int32_t> tokens, size_t limit, const AdmittedFn& admitted,
                            uint64_t ns) {
  FillResult out;
  const size_t C = geo_.chunk_tokens;
  // The local match under fetch_mu_: a fetch of this prompt running ahead
  // has admitted what it found by now.
  MutexLock fetching(&fetch_mu_);
  const store::LookupResult m = store_->Lookup(tokens, ns);
  out.match = m;
  // From the last whole chunk of the match: a match ending inside a chunk
  // (a stored prompt sharing only the first tokens of that chunk, or a
  // shorter prompt's short last chunk) does not hide the remote chunk there.
  const size_t start = m.matched_tokens / C * C;
  if (limit > tokens.size() || limit < start + C) return out;
  const size_t n = std::min<size_t>((limit - start) / C, opts_.max_fetch_chunks);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint64_t> hashes(n);
  uint64_t h = start == 0 ? ns : m.prefix_hashes[start / C - 1];
  for (size_t i = 0; i < n; ++i) hashes[i] = h = index::ChainHash(h, tokens.subspan(start + i * C, C));
  const auto chunks = FetchRun(tokens, start, hashes, &out.bytes);
  const double fetch_ms = MsSince(t0);
  if (!chunks.empty()) {
    // One Put of the fetched rows, per layer token-major K and V.
    const size_t rows = chunks.size() * C, rb = geo_.row_bytes;
    std::vector<std::string> k(geo_.layers), v(geo_.layers);
    for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
      k[layer].reserve(rows * rb);
      v[layer].reserve(rows * rb);
      for (size_t i = 0; i < chunks.size(); ++i) {
        const char* payload = chunks[i][layer].data() + store::kBlockSize;
        k[layer].append(payload, C * rb);
        v[layer].append(payload + C * rb, C * rb);
      }
    }
    store::KvInput in;
    in.first_row = start;
    in.cache_namespace = ns;
    for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
      in.k.emplace_back(k[layer].data(), k[layer].size());
      in.v.emplace_back(v[layer].data(), v[layer].size());
    }
    const auto t_put = std::chrono::steady_clock::now();
    auto put = store_->Put(tokens.first(start + rows), in);
    if (put.ok() && put->stored_tokens >= start + rows) {
      out.chunks = chunks.size();
      out.match = store_->Lookup(tokens, ns);
      const auto t_pools = std::chrono::steady_clock::now();
      for (size_t i = 0; admitted && i < chunks.size(); ++i) {
        for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
          admitted(hashes[i], layer, std::span(chunks[i][layer]).subspan(store::kBlockSize, 2 * C * rb));
        }
      }
      TIERKV_LOG(kDebug) << "remote tier: " << chunks.size() << " chunks (" << out.bytes
                         << " bytes) fetched and verified in " << fetch_ms << " ms, admitted to the disk tier in "
                         << MsSince(t_put) << " ms (pools included), to the pools in " << MsSince(t_pools) << " ms";
    } else {
      TIERKV_LOG(kWarn) << "remote tier: fetched chunks not admitted locally: "
                        << (put.ok() ? "the disk budget holds fewer" : put.status().ToString());
    }
  }
  out.ms = MsSince(t0);
  MutexLock l(&mu_);
  for (size_t i = 0; i < out.chunks; ++i) sent_.insert(hashes[i]);  // already up there
  ++stats_.lookups;
  stats_.hits += out.chunks;
  if (chunks.size() < n) ++stats_.misses;
  stats_.bytes_down += out.bytes;
  stats_.fetch_ms_total += out.ms;
  return out;
}

void RemoteTier::OnReused(std::span<const int32_t> tokens, const store::LookupResult& m, size_t reused,
                          uint64_t ns) {
  if (opts_.admit != RemoteAdmit::kReused) return;
  const size_t C = geo_.chunk_tokens;
  std::vector<uint32_t> up;
  std::vector<uint64_t> hashes;
  size_t end = 0;  // tokens through the last chunk going up
  {
    MutexLock l(&mu_);
    if (reuses_.size() > (1u << 20)) reuses_.clear();  // bounded: counts restart
    for (size_t i = 0; i < reused / C && i < m.chunks.size(); ++i) {
      const uint64_t h = m.prefix_hashes[i];
      if (m.chunk_tokens[i] != C || sent_.count(h) != 0) continue;
      if (++reuses_[h] < 2) continue;
      up.push_back(static_cast<uint32_t>(i));
      hashes.push_back(h);
      end = (i + 1) * C;
    }
  }
  if (!up.empty()) Enqueue(tokens.first(end), std::move(up), hashes, ns);
}

void RemoteTier::OnStored(std::span<const int32_t> tokens, uint64_t ns) {
  if (opts_.admit != RemoteAdmit::kAlways) return;
  const size_t C = geo_.chunk_tokens;
  std::vector<uint32_t> up;
  std::vector<uint64_t> hashes;
  uint64_t h = ns;
  size_t end = 0;
  MutexLock l(&mu_);
  for (size_t i = 0; i < tokens.size() / C; ++i) {
    h = index::ChainHash(h, tokens.subspan(i * C, C));
    if (sent_.count(h) != 0) continue;
    up.push_back(static_cast<uint32_t>(i));
    hashes.push_back(h);
    end = (i + 1) * C;
  }
  if (!up.empty()) EnqueueLocked(tokens.first(end), std::move(up), hashes, ns);
}

void RemoteTier::Enqueue(std::span<const int32_t> tokens, std::vector<uint32_t> chunks,
                         const std::vector<uint64_t>& hashes, uint64_t ns) {
  MutexLock l(&mu_);
  EnqueueLocked(tokens, std::move(chunks), hashes, ns);
}

void RemoteTier::EnqueueLocked(std::span<const int32_t> tokens, std::vector<uint32_t> chunks,
                               const std::vector<uint64_t>& hashes, uint64_t ns) {
  if (queued_chunks_ + chunks.size() > opts_.queue_chunks) {
    stats_.dropped_writes += chunks.size();
    return;
  }
  if (sent_.size() > (1u << 20)) sent_.clear();  // bounded: a chunk may go up twice
  sent_.insert(hashes.begin(), hashes.end());
  queued_chunks_ += chunks.size();
  queue_.push_back(Upload{std::make_shared<const std::vector<int32_t>>(tokens.begin(), tokens.end()),
                          std::move(chunks), ns});
  cv_.SignalAll();  // the ahead thread waits on it too
}

void RemoteTier::UploadLoop() {
  for (;;) {
    Upload u;
    {
      MutexLock l(&mu_);
      while (queue_.empty() && !stop_) cv_.Wait(&mu_);
      if (stop_) return;
      u = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    WriteChunks(u);
    MutexLock l(&mu_);
    busy_ = false;
    queued_chunks_ -= u.chunks.size();
    cv_.SignalAll();
  }
}

void RemoteTier::WriteChunks(const Upload& u) {
  const uint32_t C = geo_.chunk_tokens;
  const size_t half = size_t{C} * geo_.row_bytes;  // K (or V) of one chunk layer
  const store::LookupResult m = store_->Lookup(*u.tokens, u.ns);
  for (uint32_t i : u.chunks) {
    if (i >= m.chunks.size() || m.chunk_tokens[i] != C) continue;  // evicted meanwhile
    // Every layer in one batch, each straight into its record's payload (K then V).
    std::vector<std::string> payloads(geo_.layers, std::string(2 * half, '\0'));
    std::vector<store::ChunkRead> reads;
    for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
      reads.push_back({m.chunks[i], m.prefix_hashes[i], layer, payloads[layer].data(), payloads[layer].data() + half});
    }
    if (!store_->Read(reads).ok() ||
        !std::all_of(reads.begin(), reads.end(), [](const store::ChunkRead& r) { return r.status.ok(); })) {
      continue;  // the local copy failed its checks: nothing goes up
    }
    // The local store's importance order, when it has one: the values go
    // up ordered, so that a reader of the important part fetches a prefix.
    std::vector<std::vector<uint16_t>> order = store_->RowOrder(m.chunks[i], m.prefix_hashes[i]);
    for (auto& o : order) o = UnitOrder(o, geo_.unit_rows);
    std::vector<Command> cmds;
    for (uint16_t layer = 0; layer < geo_.layers; ++layer) {
      store::RecordHeader h;
      h.fingerprint = geo_.fingerprint;
      h.kind = store::RecordKind::kKeyValue;
      h.dtype = geo_.dtype;
      h.layer = layer;
      h.first_token = i * C;
      h.token_count = C;
      h.row_bytes = geo_.row_bytes;
      h.prefix_hash = m.prefix_hashes[i];
      h.parent_hash = i == 0 ? 0 : m.prefix_hashes[i - 1];
      h.tokens.assign(u.tokens->begin() + i * C, u.tokens->begin() + (i + 1) * C);
      std::string record;
      EncodeValue(std::move(h), payloads[layer],
                  layer < order.size() ? std::span<const uint16_t>(order[layer]) : std::span<const uint16_t>(), &record);
      std::string name = ChunkKey(geo_.fingerprint, m.prefix_hashes[i], layer);
      sealer_.Seal(name, &record);
      cmds.push_back({"SET", std::move(name), std::move(record)});
    }
    std::vector<Reply> replies;
    std::vector<ErrorKind> errors;
    RunCounted(&up_router_, cmds, &replies, &errors);
    // Accepted: "OK" to every layer's SET. Refused: Redis answered one with
    // an error (or refused the login of the connection that would carry
    // it). Neither: no answer came (a transport error, counted as such).
    uint64_t bytes = 0;
    size_t accepted = 0;
    bool refused = false;
    for (size_t j = 0; j < cmds.size(); ++j) {
      if (errors[j] == ErrorKind::kAuth) {
        refused = true;  // counted by RunCounted
      } else if (errors[j] != ErrorKind::kNone) {
        // counted by RunCounted
      } else if (replies[j].type == Reply::Type::kStatus && replies[j].str == "OK") {
        ++accepted;
        bytes += cmds[j][2].size();
      } else {
        refused = true;
        if (replies[j].is_error()) {
          CountErrorReply(replies[j]);
        } else {
          CountError(ErrorKind::kReply, "SET answered with something other than OK");
        }
      }
    }
    const bool ok = accepted == cmds.size();
    MutexLock l(&mu_);
    stats_.bytes_up += bytes;
    if (ok) ++stats_.uploads;
    if (refused) ++stats_.upload_refusals;
    if (!ok) sent_.erase(m.prefix_hashes[i]);  // may go up again later
  }
}

std::shared_ptr<const std::atomic<bool>> RemoteTier::FetchAhead(std::span<const int32_t> tokens, size_t limit,
                                                                AdmittedFn admitted, uint64_t ns) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  MutexLock l(&mu_);
  if (ahead_.size() >= opts_.ahead_prompts || stop_) {
    ++stats_.ahead_dropped;
    done->store(true);
    return done;
  }
  ahead_.push_back(Ahead{std::vector<int32_t>(tokens.begin(), tokens.end()), limit, std::move(admitted), ns, done});
  cv_.SignalAll();
  return done;
}

void RemoteTier::AheadLoop() {
  for (;;) {
    Ahead a;
    {
      MutexLock l(&mu_);
      while (ahead_.empty() && !stop_) cv_.Wait(&mu_);
      if (stop_) {
        for (Ahead& left : ahead_) left.done->store(true);  // nobody waits for a fetch that will not run
        return;
      }
      a = std::move(ahead_.front());
      ahead_.pop_front();
      ahead_busy_ = true;
    }
    const FillResult f = Fill(a.tokens, a.limit, a.admitted, a.ns);
    a.done->store(true);
    MutexLock l(&mu_);
    ahead_busy_ = false;
    ++stats_.ahead_fetches;
    stats_.ahead_chunks += f.chunks;
    cv_.SignalAll();
  }
}

void RemoteTier::Drain() {
  MutexLock l(&mu_);
  while (queued_chunks_ > 0 || busy_ || !ahead_.empty() || ahead_busy_) cv_.Wait(&mu_);
}

RemoteStats RemoteTier::stats() const {
  MutexLock l(&mu_);
  RemoteStats s = stats_;
  s.queued = queued_chunks_;
  return s;
}

}  // namespace tierkv::remote
