#include "engine/engine.h"

#include <pthread.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "cache/tiered_cache.h"
#include "kernels/attention.h"
#include "select/identify.h"
#include "select/importance.h"
#include "select/profile.h"
#include "tierkv/filesystem.h"
#include <nlohmann/json.hpp>
#include "store/chunk_store.h"
#include "store/fingerprint.h"
#include "tierkv/logging.h"
#include "util/thread_pool.h"

namespace tierkv::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

constexpr System kAll[] = {System::kRecompute, System::kAsLike,     System::kAsH2oLru,
                           System::kAsH2oLfu,  System::kImpress,    System::kImpressItf,
                           System::kImpressRo, System::kSpec,       System::kCar};

// The pools key a chunk layer by the chunk's identity (prefix hash) and layer.
uint64_t PoolKey(uint64_t prefix_hash, int layer) {
  return XXH3_64bits_withSeed(&prefix_hash, sizeof prefix_hash, static_cast<uint64_t>(layer) + 1);
}
// The selective systems' pool entries: some rows of one chunk layer, and
// the probe heads' keys of one chunk layer (other seeds: other keys).
uint64_t RowsKey(uint64_t prefix_hash, int layer) {
  return XXH3_64bits_withSeed(&prefix_hash, sizeof prefix_hash, (uint64_t{1} << 32) + layer);
}
uint64_t ProbeKey(uint64_t prefix_hash, int layer) {
  return XXH3_64bits_withSeed(&prefix_hash, sizeof prefix_hash, (uint64_t{2} << 32) + layer);
}

// A selective system's pool entry: the K rows and the V rows of one chunk
// layer that requests have read so far (selection reads only some rows, so
// the pools cache what was read, and a later request that needs other rows
// reads only those). Layout: u32 nk, u32 nv, nk + nv u16 row numbers
// (ascending), padded to 8 bytes, then nk K rows and nv V rows.
struct RowEntryView {
  std::span<const uint16_t> krows, vrows;
  const char* k = nullptr;
  const char* v = nullptr;
  // Where row r's K (or V) is in the entry, or null.
  const char* K(uint32_t r, size_t row_bytes) const { return Find(krows, k, r, row_bytes); }
  const char* V(uint32_t r, size_t row_bytes) const { return Find(vrows, v, r, row_bytes); }
  static const char* Find(std::span<const uint16_t> rows, const char* base, uint32_t r,
                          size_t row_bytes) {
    auto it = std::lower_bound(rows.begin(), rows.end(), r);
    if (it == rows.end() || *it != r) return nullptr;
    return base + static_cast<size_t>(it - rows.begin()) * row_bytes;
  }
};

size_t RowEntryHeader(size_t nk, size_t nv) { return (8 + 2 * (nk + nv) + 7) / 8 * 8; }

RowEntryView ParseRowEntry(const std::vector<char>& e, size_t row_bytes) {
  RowEntryView out;
  uint32_t nk = 0, nv = 0;
  std::memcpy(&nk, e.data(), 4);
  std::memcpy(&nv, e.data() + 4, 4);
  const auto* rows = reinterpret_cast<const uint16_t*>(e.data() + 8);
  out.krows = {rows, nk};
  out.vrows = {rows + nk, nv};
  out.k = e.data() + RowEntryHeader(nk, nv);
  out.v = out.k + nk * row_bytes;
  return out;
}

// An entry holding `krows` and `vrows` (ascending); `kof(r)`/`vof(r)` give
// row r's bytes.
template <typename KOf, typename VOf>
cache::Buffer BuildRowEntry(const std::vector<uint16_t>& krows, const std::vector<uint16_t>& vrows,
                            size_t row_bytes, KOf kof, VOf vof) {
  const size_t nk = krows.size(), nv = vrows.size();
  auto e = std::make_shared<std::vector<char>>(RowEntryHeader(nk, nv) + (nk + nv) * row_bytes);
  const uint32_t n32[2] = {static_cast<uint32_t>(nk), static_cast<uint32_t>(nv)};
  std::memcpy(e->data(), n32, 8);
  std::memcpy(e->data() + 8, krows.data(), 2 * nk);
  std::memcpy(e->data() + 8 + 2 * nk, vrows.data(), 2 * nv);
  char* k = e->data() + RowEntryHeader(nk, nv);
  char* v = k + nk * row_bytes;
  for (size_t i = 0; i < nk; ++i) std::memcpy(k + i * row_bytes, kof(krows[i]), row_bytes);
  for (size_t i = 0; i < nv; ++i) std::memcpy(v + i * row_bytes, vof(vrows[i]), row_bytes);
  return e;
}

// Rows 0..R-1: every row of R.
std::vector<int32_t> AllRows(size_t R) {
  std::vector<int32_t> all(R);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// The union of two ascending row lists.
std::vector<uint16_t> Union(std::span<const uint16_t> a, std::span<const uint16_t> b) {
  std::vector<uint16_t> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

std::string_view SystemName(System s) {
  switch (s) {
    case System::kRecompute: return "recompute";
    case System::kAsLike: return "as-like";
    case System::kAsH2oLru: return "as-h2o-lru";
    case System::kAsH2oLfu: return "as-h2o-lfu";
    case System::kImpress: return "impress";
    case System::kImpressItf: return "impress-itf";
    case System::kImpressRo: return "impress-ro";
    case System::kSpec: return "spec";
    case System::kCar: return "car";
  }
  return "?";
}

Result<System> ParseSystem(std::string_view name) {
  std::string known;
  for (System s : kAll) {
    if (name == SystemName(s)) return s;
    known += (known.empty() ? "" : ", ") + std::string(SystemName(s));
  }
  return Status::InvalidArgument("unknown system '" + std::string(name) + "' (known: " + known + ")");
}

bool Implemented(System s) {
  return s == System::kRecompute || s == System::kAsLike || s == System::kAsH2oLru ||
         s == System::kAsH2oLfu || s == System::kImpress || s == System::kImpressItf ||
         s == System::kImpressRo || s == System::kCar ||
         s == System::kSpec;
}

namespace {
bool Selective(System s) {
  return s != System::kRecompute && s != System::kAsLike;
}
// The systems whose requests report importance for KV reordering: impress's
// +RO and spec, which builds on impress (DESIGN: "spec adds" speculation).
bool Reorders(System s) {
  return s == System::kImpressRo || s == System::kImpress || s == System::kSpec;
}
// The systems that read all of R's keys and keep each head's top-k (H2O):
// the as-h2o baselines, and car with its per-layer retention.
bool ReadsAllKeys(System s) {
  return s == System::kAsH2oLru || s == System::kAsH2oLfu || s == System::kCar;
}
// The pools' policy when the options name none: the papers' configuration
// of each system.
cache::PolicyKind DefaultPolicy(System s) {
  switch (s) {
    case System::kAsH2oLfu: return cache::PolicyKind::kLfu;
    case System::kImpress:
    case System::kSpec: return cache::PolicyKind::kScore;
    case System::kCar: return cache::PolicyKind::kCar;
    default: return cache::PolicyKind::kLru;
  }
}
}  // namespace

Status EngineOptions::Validate() const {
  if (!(retention > 0 && retention <= 1)) {
    return Status::InvalidArgument("retention " + std::to_string(retention) + " is outside (0, 1]");
  }
  if (chunk_tokens < 1 || chunk_tokens > 4096) {
    return Status::InvalidArgument("chunk_tokens " + std::to_string(chunk_tokens) +
                                   " is outside 1..4096");
  }
  if (!(alpha >= 0 && alpha <= 16)) {
    return Status::InvalidArgument("alpha " + std::to_string(alpha) + " is outside [0, 16]");
  }
  RETURN_IF_ERROR(select::ParseAggregation(aggregation).status());
  if (!(spec_min_recall >= 0 && spec_min_recall <= 1)) {
    return Status::InvalidArgument("spec_min_recall " + std::to_string(spec_min_recall) +
                                   " is outside [0, 1]");
  }
  if (!policy.empty()) RETURN_IF_ERROR(cache::ParsePolicy(policy).status().WithContext("policy"));
  if (system != System::kRecompute && cache_dir.empty()) {
    return Status::InvalidArgument("system " + std::string(SystemName(system)) +
                                   " needs a cache directory (cache_dir)");
  }
  return Status::Ok();
}

double RequestStats::device_hit_ratio() const {
  const uint64_t all = device_hits + host_hits + disk_reads;
  return all == 0 ? 0.0 : static_cast<double>(device_hits) / static_cast<double>(all);
}

// One request's layer loads, shared by the compute thread and the loader.
struct LoadState {
  struct Layer {
    bool done = false;
    Status status;
    std::string k, v;  // rows [0, R) of every KV head, token-major, fp16: the "device" copy
    double issued_ms = 0, completed_ms = 0;
    uint64_t device_hits = 0, host_hits = 0, disk_reads = 0, disk_bytes = 0;
    uint64_t device_bytes = 0, host_bytes = 0;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Layer> layers;
  Clock::time_point t0;
};

// ---- Selective systems: identification and loading of the selected rows ----

// What a selective read cost: disk bytes and records, and where each chunk
// layer it touched was found.
struct IoCounts {
  uint64_t bytes = 0, records = 0;  // from the disk
  uint64_t device_hits = 0, host_hits = 0, disk_reads = 0;  // chunk-layer accesses by tier
  uint64_t device_bytes = 0, host_bytes = 0;  // copied out of each pool
  void FromPool(cache::Tier t, uint64_t n) {
    (t == cache::Tier::kDevice ? device_bytes : host_bytes) += n;
  }
  void Add(const IoCounts& o) {
    device_bytes += o.device_bytes;
    host_bytes += o.host_bytes;
    bytes += o.bytes;
    records += o.records;
    device_hits += o.device_hits;
    host_hits += o.host_hits;
    disk_reads += o.disk_reads;
  }
};

// Per-layer state of a selective request; the rows the attention reads live
// here until the request ends.
struct SelectiveLayer {
  std::string k, v;                 // shared set: |S| rows of every KV head, token-major, fp16
  std::vector<int32_t> positions;   // the shared set's absolute positions
  std::vector<std::string> hk, hv;  // per-head sets (fallback, H2O): |S_h| rows of head_dim
  std::vector<std::vector<int32_t>> hpos;
};

// spec: one layer's speculative reads, filled by the load thread.
struct Prefetch {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::vector<int32_t> rows;  // the predicted set (the previous layer's)
  std::string probe_keys, k, v;
  IoCounts io;
  Status status;
  double issued_ms = 0, completed_ms = 0;
};

struct SelectiveRequest {
  const store::LookupResult* m = nullptr;
  size_t R = 0;  // a multiple of the chunk size; every chunk below it is full
  Clock::time_point t0;
  std::vector<SelectiveLayer> layers;
  std::vector<std::shared_ptr<Prefetch>> prefetch;     // by layer (spec): predicted rows
  std::vector<std::vector<int32_t>> predicted;         // by layer (spec): the prediction
  std::vector<bool> speculate;                         // by layer (spec): prefetch it
  std::vector<std::shared_ptr<Prefetch>> probe_fetch;  // by layer: probe keys, read at the start
  std::vector<std::shared_ptr<Prefetch>> key_fetch;    // by layer: all of R's keys, read at the start
  double identify_ms = 0, load_ms = 0;
  IoCounts io;
  int fallbacks = 0;
  std::vector<double> layer_retention;  // car
};

namespace {

// Waits for a load-thread job, counts its reads as the request's, adds the
// wait to *io_ms (unless null: the caller times it), and returns the job's
// status.
Status Await(Prefetch& p, SelectiveRequest& rq, double* io_ms) {
  const auto a = Clock::now();
  {
    std::unique_lock<std::mutex> l(p.mu);
    p.cv.wait(l, [&] { return p.done; });
  }
  if (io_ms) *io_ms += Ms(a, Clock::now());
  rq.io.Add(p.io);
  return p.status;
}

// Column sums of the new tokens' attention over `rows` prefix keys of KV
// head `head`, given as fp16 rows at keys + j * stride (elements): the
// engine's own H2O importance for that head, its query group summed.
std::vector<float> HeadScores(const LayerView& view, const ModelConfig& c, int head,
                              const uint16_t* keys, size_t stride, size_t rows,
                              kernels::AttentionScratch* scratch) {
  const int hd = c.head_dim(), group = c.group();
  std::vector<float> colsum(static_cast<size_t>(group) * rows, 0.0f);
  kernels::AttentionArgs a;
  a.n_new = view.n_new;
  a.head_dim = hd;
  a.group = group;
  a.q = view.q + static_cast<size_t>(head) * group * hd;
  a.q_stride = view.q_stride;
  a.k_new = view.k + static_cast<size_t>(head) * hd;
  a.v_new = view.v + static_cast<size_t>(head) * hd;
  a.kv_new_stride = view.kv_stride;
  // Only the weights: no output, no values read.
  a.prefix = KvRows{keys, keys, KvDType::kF16, rows, stride, stride, nullptr};
  a.out = nullptr;
  a.colsum = colsum.data();
  kernels::AttendKvGroup(a, scratch);
  std::vector<float> score(rows, 0.0f);
  for (int g = 0; g < group; ++g) {
    for (size_t j = 0; j < rows; ++j) score[j] += colsum[g * rows + j];
  }
  return score;
}

// HeadScores of KV heads [0, n), whose rows are at keys + h * head_dim with
// `stride` elements per row, on the compute threads (one task per head, as
// the model's attention): H2O scoring of every head reads all of R's keys,
// as much work as the attention itself.
std::vector<std::vector<float>> AllHeadScores(const LayerView& view, const ModelConfig& c, int n,
                                              const uint16_t* keys, size_t stride, size_t rows) {
  std::vector<std::vector<float>> out(n);
  ThreadPool::Compute()->ParallelFor(n, [&](int h) {
    thread_local kernels::AttentionScratch scratch;
    out[h] = HeadScores(view, c, h, keys + static_cast<size_t>(h) * c.head_dim(), stride, rows,
                        &scratch);
  });
  return out;
}

}  // namespace


struct Engine::Impl {
  const Model& model;
  EngineOptions opts;
  ModelConfig c;
  uint32_t row_bytes = 0;  // one token's K (all KV heads), fp16
  select::Aggregation aggregation = select::Aggregation::kSum;
  std::unique_ptr<store::ChunkStore> store;
  std::unique_ptr<cache::TieredCache> pools;

  // Per layer: whether its identification fell back in the last request
  // (impress, spec): such layers get all of R's keys requested at the start.
  std::mutex hint_mu;
  std::vector<bool> fell_back_last;
  std::vector<double> spec_recall;  // spec: per layer, moving average of the prediction's recall

  // A saved profile of this model (the store's fingerprint), if any; a
  // missing, damaged or foreign one is measured again on first use.
  void LoadProfile() {
    auto text = ReadFileToString(FileSystem::Default(), ProfilePath());
    if (!text.ok()) return;
    const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    std::string bad;
    if (j.is_discarded() || !j.is_object()) {
      bad = "not a JSON object";
    } else if (!j.contains("fingerprint") || !j["fingerprint"].is_number_unsigned()) {
      bad = "field 'fingerprint' missing or not a number";
    } else if (j["fingerprint"].get<uint64_t>() != fingerprint) {
      bad = "field 'fingerprint' names another model";
    } else if (!j.contains("sparsity") || !j["sparsity"].is_array() ||
               j["sparsity"].size() != static_cast<size_t>(c.n_layers)) {
      bad = "field 'sparsity' is not an array of " + std::to_string(c.n_layers) + " numbers";
    } else {
      std::vector<double> s;
      for (const auto& x : j["sparsity"]) {
        if (!x.is_number() || !(x.get<double>() >= 0 && x.get<double>() <= 1)) {
          bad = "field 'sparsity' holds a value outside [0, 1]";
          break;
        }
        s.push_back(x.get<double>());
      }
      if (bad.empty()) {
        std::lock_guard<std::mutex> l(profile_mu);
        sparsity = s;
        layer_retention = select::LayerRetention(s, opts.retention);
        return;
      }
    }
    TIERKV_LOG(kWarn) << "car: ignoring " << ProfilePath() << ": " << bad
                      << "; the profile is measured again";
  }

  // car: per-layer retention from the sparsity profile (empty until profiled).
  std::mutex profile_mu;
  std::vector<double> sparsity, layer_retention;
  uint64_t fingerprint = 0;
  std::string ProfilePath() const { return opts.cache_dir + "/car-profile.json"; }  // see Open
  std::vector<double> LayerRetention() {
    std::lock_guard<std::mutex> l(profile_mu);
    return layer_retention;
  }

  std::mutex q_mu;
  std::condition_variable q_cv;
  // Load jobs, served nearest layer first, then in order of submission: a
  // request submits every layer's reads at its start, and spec's read for
  // layer l+1, submitted during layer l, must not wait behind them.
  struct Job {
    int layer = 0;
    uint64_t seq = 0;
    std::function<void()> fn;
  };
  std::vector<Job> queue;
  uint64_t next_seq = 0;
  bool stop = false;
  std::thread loader;
  std::thread maint;  // maintain_interval_ms > 0; sleeps on its own cv, stops with `stop`
  std::condition_variable maint_cv;  // not q_cv: a Submit's notify_one must reach the loader

  Impl(const Model& m, EngineOptions o) : model(m), opts(std::move(o)), c(m.config()) {}

  // Rows another read already has (spec's read ahead): `rows` ascending,
  // their K and V at k/v->data() + i * row_bytes, to be looked at only
  // after `ready` returned OK (another thread fills them).
  struct Supplied {
    std::span<const int32_t> rows;
    const std::string* k = nullptr;
    const std::string* v = nullptr;
    std::function<Status()> ready;
  };
  // Who reads: the layer that needs the rows now; the load thread, ahead,
  // for rows the request will use (all keys at its start); or spec's read
  // ahead, which may turn out unused.
  enum class ReadFor { kDemand, kAhead, kSpeculation };
  // Rows `rows` (ascending, below R) of `layer`, K and/or V, into k/v
  // (|rows| x row_bytes each, in that order): from the pools, from
  // `supplied`, and only the rest's pages from disk. A speculation looks at
  // the pools but neither counts an access nor changes them.
  Status ReadSelected(const store::LookupResult& m, int layer, std::span<const int32_t> rows,
                      char* k, char* v, ReadFor who, IoCounts* io,
                      const Supplied* supplied = nullptr);
  // The probe heads' keys of R's chunks at `layer`, R x probe bytes.
  Status ReadProbes(const store::LookupResult& m, size_t R, int layer, std::string* keys,
                    IoCounts* io);
  Status SelectiveHook(SelectiveRequest& rq, const LayerView& view, LayerPrefix* prefix,
                       LayerTrace* trace);

  void LoaderLoop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(q_mu);
        q_cv.wait(l, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;  // stopping, nothing left
        auto next = std::min_element(queue.begin(), queue.end(), [](const Job& a, const Job& b) {
          return a.layer != b.layer ? a.layer < b.layer : a.seq < b.seq;
        });
        job = std::move(next->fn);
        queue.erase(next);
      }
      job();
    }
  }

  // A read on the load thread into a Prefetch: `read` fills the Prefetch's
  // buffers (nobody looks at them before `done`), then the result is
  // published under its mutex and waiters are woken.
  std::shared_ptr<Prefetch> Fetch(Clock::time_point t0, int layer,
                                  std::function<Status(Prefetch&, IoCounts*)> read,
                                  std::vector<int32_t> rows = {}) {
    auto p = std::make_shared<Prefetch>();
    p->rows = std::move(rows);
    p->issued_ms = Ms(t0, Clock::now());
    Submit(layer, [p, t0, read = std::move(read)] {
      IoCounts io;
      Status s = read(*p, &io);
      std::lock_guard<std::mutex> l(p->mu);
      p->io = io;
      p->status = s;
      p->completed_ms = Ms(t0, Clock::now());
      p->done = true;
      p->cv.notify_all();
    });
    return p;
  }

  // A job serving `layer` (of whichever request).
  void Submit(int layer, std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(q_mu);
      queue.push_back(Job{layer, next_seq++, std::move(job)});
    }
    q_cv.notify_one();
  }

  // Loads rows [0, R) of layer `layer` for the chunks of `m` into state.
  void LoadLayer(const store::LookupResult& m, size_t R, int layer, LoadState& st) {
    LoadState::Layer out;
    out.k.assign(R * row_bytes, '\0');
    out.v.assign(R * row_bytes, '\0');
    const uint32_t C = opts.chunk_tokens;
    struct Miss {
      size_t chunk;
      std::shared_ptr<std::vector<char>> buf;
    };
    std::vector<Miss> misses;
    std::vector<cache::Pin> pins;
    auto copy_rows = [&](size_t i, const char* payload) {
      const size_t first = i * C, tokens = m.chunk_tokens[i];
      const size_t used = std::min(tokens, R - first);
      std::memcpy(out.k.data() + first * row_bytes, payload, used * row_bytes);
      std::memcpy(out.v.data() + first * row_bytes, payload + tokens * row_bytes, used * row_bytes);
    };
    const size_t nchunks = (R + C - 1) / C;
    for (size_t i = 0; i < nchunks; ++i) {
      const uint32_t rows = m.chunk_tokens[i];
      cache::Pin pin = pools->Access(PoolKey(m.prefix_hashes[i], layer), rows, rows);
      if (pin.tier() != cache::Tier::kDisk && pin.data()) {
        pin.tier() == cache::Tier::kDevice ? ++out.device_hits : ++out.host_hits;
        (pin.tier() == cache::Tier::kDevice ? out.device_bytes : out.host_bytes) +=
            2 * std::min<size_t>(rows, R - i * C) * row_bytes;
        copy_rows(i, pin.data()->data());
        pins.push_back(std::move(pin));
      } else {
        misses.push_back(Miss{i, std::make_shared<std::vector<char>>(2 * size_t{rows} * row_bytes)});
      }
    }
    std::vector<store::ChunkRead> reads;
    for (const Miss& miss : misses) {
      const size_t rows = m.chunk_tokens[miss.chunk];
      reads.push_back(store::ChunkRead{m.chunks[miss.chunk], m.prefix_hashes[miss.chunk],
                                       static_cast<uint16_t>(layer), miss.buf->data(),
                                       miss.buf->data() + rows * row_bytes});
    }
    store::RowReadStats rs;
    Status s = reads.empty() ? Status::Ok() : store->Read(reads, &rs);
    out.disk_bytes = rs.bytes;
    for (size_t j = 0; j < reads.size() && s.ok(); ++j) {
      const Miss& miss = misses[j];
      if (!reads[j].status.ok()) {
        // A chunk that fails here (corrupt, evicted, EIO) makes the request
        // run again with less reuse; the store has already dropped a
        // corrupt chunk, so the next lookup stops before it.
        s = reads[j].status;
        break;
      }
      ++out.disk_reads;
      copy_rows(miss.chunk, miss.buf->data());
      pins.push_back(pools->Admit(PoolKey(m.prefix_hashes[miss.chunk], layer), miss.buf->size(),
                                  miss.buf));
    }
    std::lock_guard<std::mutex> l(st.mu);
    LoadState::Layer& dst = st.layers[layer];
    out.issued_ms = dst.issued_ms;
    out.completed_ms = Ms(st.t0, Clock::now());
    out.status = s;
    out.done = true;
    dst = std::move(out);
    st.cv.notify_all();
  }
};

Status Engine::Impl::ReadSelected(const store::LookupResult& m, int layer,
                                  std::span<const int32_t> rows, char* k, char* v, ReadFor who,
                                  IoCounts* io, const Supplied* supplied) {
  const bool speculation = who == ReadFor::kSpeculation;
  const uint32_t C = opts.chunk_tokens;
  const size_t rb = row_bytes;
  // One group per chunk: its rows (chunk-local) and where they go in k/v.
  struct Group {
    size_t chunk = 0, first = 0;  // first: index in `rows` of the group's first row
    std::vector<uint16_t> local;
    uint64_t key = 0;
    cache::Pin pin;
    RowEntryView have;
    std::vector<uint16_t> missing;  // rows (K and/or V) the pool entry lacks
    std::vector<uint16_t> given;    // of those, rows the read ahead has (`supplied`)
    std::vector<size_t> given_at;   // their index in supplied->rows
    std::string mk, mv;             // the others' bytes, read from disk
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < rows.size();) {
    Group g;
    g.chunk = static_cast<size_t>(rows[i]) / C;
    g.first = i;
    while (i < rows.size() && static_cast<size_t>(rows[i]) / C == g.chunk) {
      g.local.push_back(static_cast<uint16_t>(rows[i] - g.chunk * C));
      ++i;
    }
    groups.push_back(std::move(g));
  }
  std::vector<store::RowRead> reads;
  std::vector<std::vector<uint32_t>> read_rows;
  size_t si = 0;  // walks supplied->rows (ascending, as `rows`)
  for (Group& g : groups) {
    g.key = RowsKey(m.prefix_hashes[g.chunk], layer);
    // A read ahead takes what the pools have without counting an access
    // (it may not be used); a request's own read is an access, and the
    // chunk's importance for the score policy is the share of its rows it
    // needs.
    g.pin = speculation ? pools->Peek(g.key)
                     : pools->Access(g.key, static_cast<uint32_t>(g.local.size()),
                                     m.chunk_tokens[g.chunk]);
    if (g.pin.tier() != cache::Tier::kDisk && g.pin.data()) g.have = ParseRowEntry(*g.pin.data(), rb);
    std::vector<uint16_t> from_disk;
    for (uint16_t r : g.local) {
      if (!((k && !g.have.K(r, rb)) || (v && !g.have.V(r, rb)))) continue;
      g.missing.push_back(r);
      const int32_t row = static_cast<int32_t>(g.chunk * C + r);
      if (supplied) {
        while (si < supplied->rows.size() && supplied->rows[si] < row) ++si;
        if (si < supplied->rows.size() && supplied->rows[si] == row) {
          g.given.push_back(r);
          g.given_at.push_back(si);
          continue;
        }
      }
      from_disk.push_back(r);
    }
    const uint64_t per_row = rb * ((k ? 1 : 0) + (v ? 1 : 0));
    io->FromPool(g.pin.tier(), (g.local.size() - g.missing.size()) * per_row);
    // Hits and misses are the request's accesses: a read ahead counts none
    // (only its bytes); the layer that uses its rows counts a miss for a
    // chunk layer whose rows were not all in the pools.
    if (g.missing.empty()) {
      if (!speculation) g.pin.tier() == cache::Tier::kDevice ? ++io->device_hits : ++io->host_hits;
      continue;
    }
    if (!speculation) ++io->disk_reads;
    if (from_disk.empty()) continue;
    g.mk.assign(k ? from_disk.size() * rb : 0, '\0');
    g.mv.assign(v ? from_disk.size() * rb : 0, '\0');
    store::RowRead r;
    r.chunk = m.chunks[g.chunk];
    r.prefix_hash = m.prefix_hashes[g.chunk];
    r.layer = static_cast<uint16_t>(layer);
    r.prefetch = who != ReadFor::kDemand;
    r.k = k ? g.mk.data() : nullptr;
    r.v = v ? g.mv.data() : nullptr;
    reads.push_back(r);
    read_rows.emplace_back(from_disk.begin(), from_disk.end());
  }
  if (!reads.empty()) {
    for (size_t j = 0; j < reads.size(); ++j) reads[j].rows = read_rows[j];
    store::RowReadStats st;
    RETURN_IF_ERROR(store->ReadRows(reads, &st));
    io->bytes += st.bytes;
    io->records += st.records;
    for (const store::RowRead& r : reads) RETURN_IF_ERROR(r.status);
  }
  // The read ahead's bytes are used only from here: it ran beside the reads
  // above.
  if (supplied) RETURN_IF_ERROR(supplied->ready());
  size_t ri = 0;  // walks read_rows
  for (Group& g : groups) {
    const std::vector<uint32_t>* disk_rows =
        g.missing.size() > g.given.size() ? &read_rows[ri++] : nullptr;
    auto find = [](const auto& list, uint16_t r) -> std::ptrdiff_t {
      auto it = std::lower_bound(list.begin(), list.end(), r);
      return it != list.end() && *it == r ? it - list.begin() : -1;
    };
    auto row_k = [&](uint16_t r) -> const char* {
      if (const auto d = disk_rows ? find(*disk_rows, r) : -1; d >= 0 && k) return g.mk.data() + d * rb;
      if (const auto s = find(g.given, r); s >= 0 && k) return supplied->k->data() + g.given_at[s] * rb;
      return g.have.K(r, rb);
    };
    auto row_v = [&](uint16_t r) -> const char* {
      if (const auto d = disk_rows ? find(*disk_rows, r) : -1; d >= 0 && v) return g.mv.data() + d * rb;
      if (const auto s = find(g.given, r); s >= 0 && v) return supplied->v->data() + g.given_at[s] * rb;
      return g.have.V(r, rb);
    };
    for (size_t i = 0; i < g.local.size(); ++i) {
      if (k) std::memcpy(k + (g.first + i) * rb, row_k(g.local[i]), rb);
      if (v) std::memcpy(v + (g.first + i) * rb, row_v(g.local[i]), rb);
    }
    // A read ahead leaves the pools alone: the rows it read enter them when
    // a layer uses them (as `supplied`), so rows predicted wrongly never
    // push used ones out.
    if (g.missing.empty() || speculation) continue;
    // The pool entry grows by what was read (verified by the store).
    const std::vector<uint16_t> krows = k ? Union(g.have.krows, g.missing)
                                          : std::vector<uint16_t>(g.have.krows.begin(), g.have.krows.end());
    const std::vector<uint16_t> vrows = v ? Union(g.have.vrows, g.missing)
                                          : std::vector<uint16_t>(g.have.vrows.begin(), g.have.vrows.end());
    cache::Buffer e = BuildRowEntry(krows, vrows, rb, row_k, row_v);
    const uint64_t bytes = e->size();
    g.pin = pools->Replace(g.key, bytes, std::move(e));
  }
  return Status::Ok();
}

Status Engine::Impl::ReadProbes(const store::LookupResult& m, size_t R, int layer, std::string* keys,
                                IoCounts* io) {
  const uint32_t C = opts.chunk_tokens;
  const size_t pb = static_cast<size_t>(std::min(3, c.n_kv_heads)) * c.head_dim() * 2;
  keys->assign(R * pb, '\0');
  std::vector<store::ProbeRead> reads;
  std::vector<size_t> read_chunk;
  std::vector<cache::Pin> pins;
  for (size_t i = 0; i < R / C; ++i) {
    cache::Pin pin = pools->Access(ProbeKey(m.prefix_hashes[i], layer), C, C);
    if (pin.tier() != cache::Tier::kDisk && pin.data()) {
      pin.tier() == cache::Tier::kDevice ? ++io->device_hits : ++io->host_hits;
      io->FromPool(pin.tier(), C * pb);
      std::memcpy(keys->data() + i * C * pb, pin.data()->data(), C * pb);
      continue;
    }
    ++io->disk_reads;
    reads.push_back(store::ProbeRead{m.chunks[i], m.prefix_hashes[i], static_cast<uint16_t>(layer),
                                     keys->data() + i * C * pb});
    read_chunk.push_back(i);
  }
  if (reads.empty()) return Status::Ok();
  store::RowReadStats st;
  RETURN_IF_ERROR(store->ReadProbeKeys(reads, &st));
  io->bytes += st.bytes;
  io->records += st.records;
  for (const auto& r : reads) RETURN_IF_ERROR(r.status);
  for (size_t j = 0; j < reads.size(); ++j) {
    const char* src = keys->data() + read_chunk[j] * C * pb;
    pools->Admit(ProbeKey(m.prefix_hashes[read_chunk[j]], layer), C * pb,
                 std::make_shared<std::vector<char>>(src, src + C * pb));
  }
  return Status::Ok();
}

Status Engine::Impl::SelectiveHook(SelectiveRequest& rq, const LayerView& view, LayerPrefix* prefix,
                                   LayerTrace* trace) {
  const size_t R = rq.R;
  const int H = c.n_kv_heads, hd = c.head_dim();
  const size_t hb = static_cast<size_t>(hd) * 2;
  const int layer = view.layer;
  // car keeps a share of each layer by its profile; the others, the same share everywhere.
  const size_t k = select::CountForFraction(
      R, opts.system == System::kCar && layer < static_cast<int>(rq.layer_retention.size())
             ? rq.layer_retention[layer]
             : opts.retention);
  SelectiveLayer& L = rq.layers[layer];
  const bool spec = opts.system == System::kSpec;
  const bool probes = spec || opts.system == System::kImpress ||
                      opts.system == System::kImpressItf || opts.system == System::kImpressRo;
  const auto t0 = Clock::now();
  double io_ms = 0;
  auto timed = [&](auto&& fn) {
    const auto a = Clock::now();
    Status s = fn();
    io_ms += Ms(a, Clock::now());
    return s;
  };
  IoCounts st;

  // spec: what the previous layer prefetched for this one, waited for only
  // when its rows are needed (after this layer's identification).
  const std::shared_ptr<Prefetch> pre = spec ? rq.prefetch[layer] : nullptr;
  if (pre) {
    trace->issued_ms = pre->issued_ms;
    trace->speculated = true;
  }

  std::vector<int32_t> shared;   // the layer's set when the probes agree
  bool use_shared = false;
  bool prefetch_next = false;    // spec: read this layer's set for the next one
  auto issue_prefetch = [&] {
    const store::LookupResult* m = rq.m;
    rq.prefetch[layer + 1] = Fetch(
        rq.t0, layer + 1,
        [this, m, layer](Prefetch& p, IoCounts* st) {
          p.k.assign(p.rows.size() * row_bytes, '\0');
          p.v.assign(p.rows.size() * row_bytes, '\0');
          if (p.rows.empty()) return Status::Ok();
          return ReadSelected(*m, layer + 1, p.rows, p.k.data(), p.v.data(), ReadFor::kSpeculation, st);
        },
        shared);
  };
  if (probes) {
    // The probe keys do not depend on the request's queries: every layer's
    // were requested at the start on the load thread.
    std::string own;
    const std::string* keys = &own;
    if (const auto& pf = rq.probe_fetch[layer]) {
      RETURN_IF_ERROR(Await(*pf, rq, &io_ms));
      keys = &pf->probe_keys;
    } else {
      RETURN_IF_ERROR(timed([&] { return ReadProbes(*rq.m, R, layer, &own, &st); }));
    }
    const int P = std::min(3, H);
    const std::vector<std::vector<float>> scores = AllHeadScores(
        view, c, P, reinterpret_cast<const uint16_t*>(keys->data()), static_cast<size_t>(P) * hd, R);
    select::IdentifyOptions io;
    io.retention = opts.retention;
    io.alpha = opts.alpha;
    io.aggregation = aggregation;
    const select::ProbeDecision d = select::DecideWithProbes(scores, io);
    trace->fallback = !d.use_probes;
    if (d.use_probes) {
      shared = d.selected;
      use_shared = true;
      if (spec && layer + 1 < c.n_layers) {
        // SPEC: adjacent layers attend to much the same rows, so this
        // layer's set is read for the next layer on the load thread while
        // this layer computes (issued below, once its own rows are in). Only after a
        // layer whose probes agreed: a layer that fell back is usually
        // followed by another, which reads all keys anyway (measured:
        // prefetching there doubled the bytes read).
        rq.predicted[layer + 1] = shared;
        prefetch_next = rq.speculate[layer + 1];
      }
      if (Reorders(opts.system)) {
        // What reordering packs by: the rows this layer found important.
        std::vector<float> summed(R, 0.0f);
        for (const auto& sc : scores) {
          for (size_t j = 0; j < R; ++j) summed[j] += sc[j];
        }
        store->ReportImportance(*rq.m, static_cast<uint16_t>(layer), summed);
      }
    } else {
      ++rq.fallbacks;
    }
  }
  if (use_shared) {
    L.k.assign(shared.size() * row_bytes, '\0');
    L.v.assign(shared.size() * row_bytes, '\0');
    rq.identify_ms += Ms(t0, Clock::now()) - io_ms;
    if (pre) {
      // Rows the prediction got right come from the read ahead; the others
      // are read from disk first, on a side backend, while the load thread
      // may still be finishing the read ahead: the layer waits for the
      // longer of the two, not for their sum (`pre->rows` is fixed when the
      // read ahead is issued, so it can be read before `done`). The rows it
      // used enter the pools now.
      Supplied given;
      given.rows = pre->rows;
      given.k = &pre->k;
      given.v = &pre->v;
      given.ready = [&] { return Await(*pre, rq, nullptr); };  // inside timed()
      RETURN_IF_ERROR(timed([&] {
        return ReadSelected(*rq.m, layer, shared, L.k.data(), L.v.data(), ReadFor::kDemand, &st, &given);
      }));
      trace->completed_ms = pre->completed_ms;
    } else {
      RETURN_IF_ERROR(timed([&] {
        return ReadSelected(*rq.m, layer, shared, L.k.data(), L.v.data(), ReadFor::kDemand, &st);
      }));
    }
    // The read ahead starts once this layer has its own rows: the disk is
    // then idle while the layer computes, and the read ahead does not slow
    // this layer's read (issued with it, it lengthened the wait of the
    // layer before each one read ahead for).
    if (prefetch_next) issue_prefetch();
    L.positions = shared;
    prefix->heads.resize(H);
    for (int h = 0; h < H; ++h) {
      prefix->heads[h] = KvRows{L.k.data() + h * hb, L.v.data() + h * hb, KvDType::kF16,
                                shared.size(), static_cast<size_t>(c.kv_dim()),
                                static_cast<size_t>(c.kv_dim()), L.positions.data()};
    }
    trace->rows = shared.size();
    if (spec && !rq.predicted[layer].empty()) trace->recall = select::Recall(rq.predicted[layer], shared);
  } else {
    if (pre) RETURN_IF_ERROR(Await(*pre, rq, &io_ms));  // read for nothing; still counted
    // All of R's keys; per-head H2O top-k; only the selected rows' values.
    std::string own_k;
    const std::string* kp = &own_k;
    if (const auto& kf = rq.key_fetch[layer]) {
      // Requested at the start (H2O always reads all keys; impress when this
      // layer fell back in the previous request).
      RETURN_IF_ERROR(Await(*kf, rq, &io_ms));
      kp = &kf->k;
    } else {
      const std::vector<int32_t> all = AllRows(R);
      own_k.assign(R * row_bytes, '\0');
      RETURN_IF_ERROR(timed([&] {
        return ReadSelected(*rq.m, layer, all, own_k.data(), nullptr, ReadFor::kDemand, &st);
      }));
    }
    const std::string& kall = *kp;
    std::vector<std::vector<int32_t>> sets(H);
    std::vector<bool> in_union(R, false);
    std::vector<float> summed(R, 0.0f);
    const std::vector<std::vector<float>> scores = AllHeadScores(
        view, c, H, reinterpret_cast<const uint16_t*>(kall.data()), static_cast<size_t>(c.kv_dim()), R);
    for (int h = 0; h < H; ++h) {
      sets[h] = select::TopK(scores[h], k);
      for (int32_t j : sets[h]) in_union[j] = true;
      for (size_t j = 0; j < R; ++j) summed[j] += scores[h][j];
    }
    std::vector<int32_t> uni;
    std::vector<size_t> slot(R, 0);
    for (size_t j = 0; j < R; ++j) {
      if (in_union[j]) {
        slot[j] = uni.size();
        uni.push_back(static_cast<int32_t>(j));
      }
    }
    if (spec && !rq.predicted[layer].empty()) trace->recall = select::Recall(rq.predicted[layer], uni);
    rq.identify_ms += Ms(t0, Clock::now()) - io_ms;
    std::string vsel(uni.size() * row_bytes, '\0');
    RETURN_IF_ERROR(timed([&] {
      return ReadSelected(*rq.m, layer, uni, nullptr, vsel.data(), ReadFor::kDemand, &st);
    }));
    L.hk.assign(H, {});
    L.hv.assign(H, {});
    L.hpos.assign(H, {});
    prefix->heads.resize(H);
    size_t rows = 0;
    for (int h = 0; h < H; ++h) {
      std::string& hk = L.hk[h];
      std::string& hv = L.hv[h];
      hk.resize(sets[h].size() * hb);
      hv.resize(sets[h].size() * hb);
      for (size_t i = 0; i < sets[h].size(); ++i) {
        const size_t j = static_cast<size_t>(sets[h][i]);
        std::memcpy(hk.data() + i * hb, kall.data() + j * row_bytes + h * hb, hb);
        std::memcpy(hv.data() + i * hb, vsel.data() + slot[j] * row_bytes + h * hb, hb);
      }
      L.hpos[h] = sets[h];
      prefix->heads[h] = KvRows{hk.data(), hv.data(), KvDType::kF16, sets[h].size(), 0, 0,
                                L.hpos[h].data()};
      rows += sets[h].size();
    }
    trace->rows = rows / static_cast<size_t>(H);
    if (Reorders(opts.system)) {
      store->ReportImportance(*rq.m, static_cast<uint16_t>(layer), summed);
    }
  }
  rq.load_ms += io_ms;
  trace->wait_ms = io_ms;
  rq.io.Add(st);
  trace->retention = R ? static_cast<double>(trace->rows) / static_cast<double>(R) : 1.0;

  return Status::Ok();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> l(impl_->q_mu);
    impl_->stop = true;
  }
  impl_->q_cv.notify_all();
  impl_->maint_cv.notify_all();
  if (impl_->maint.joinable()) impl_->maint.join();
  if (impl_->loader.joinable()) impl_->loader.join();
  impl_->store.reset();  // before the pools its removal callback erases from
}

const EngineOptions& Engine::options() const { return impl_->opts; }

store::ChunkStore* Engine::TEST_store() { return impl_->store.get(); }

cache::CacheStats Engine::TEST_pool_stats() const {
  return impl_->pools ? impl_->pools->stats() : cache::CacheStats{};
}

Result<std::vector<double>> Engine::Profile(std::span<const std::vector<int32_t>> prompts) {
  Impl& im = *impl_;
  if (im.opts.system != System::kCar) {
    return Status::InvalidArgument("profile: only car uses a sparsity profile");
  }
  if (prompts.empty()) return Status::InvalidArgument("profile: no profiling prompts");
  const int L = im.c.n_layers;
  std::vector<double> sum(L, 0.0);
  size_t used = 0, tokens = 0;
  for (const auto& p : prompts) {
    if (p.empty()) continue;
    PrefillOptions po;
    po.attention_sparsity = true;
    po.logits = LogitsMode::kNone;
    ASSIGN_OR_RETURN(PrefillResult r, im.model.Prefill(p, po));
    for (int l = 0; l < L; ++l) sum[l] += r.sparsity[l];
    ++used;
    tokens += p.size();
  }
  if (used == 0) return Status::InvalidArgument("profile: every profiling prompt is empty");
  for (double& x : sum) x /= static_cast<double>(used);
  nlohmann::json j;
  j["fingerprint"] = im.fingerprint;
  j["prompts"] = used;
  j["tokens"] = tokens;
  j["sparsity"] = sum;
  Status saved = WriteFileAtomically(FileSystem::Default(), im.ProfilePath(), j.dump(1));
  if (!saved.ok()) {
    // The profile still serves this engine; the next one measures again.
    TIERKV_LOG(kWarn) << "car: saving the sparsity profile: " << saved.ToString();
  }
  std::lock_guard<std::mutex> l(im.profile_mu);
  im.sparsity = sum;
  im.layer_retention = select::LayerRetention(sum, im.opts.retention);
  return sum;
}

Result<MaintainResult> Engine::Maintain() {
  MaintainResult out;
  Impl& im = *impl_;
  if (Reorders(im.opts.system) && im.store) {
    store::ReorderOptions ro;
    ro.max_runs = UINT32_MAX;  // a round covers every run with new reports
    ASSIGN_OR_RETURN(store::ReorderResult r, im.store->Reorder(ro));
    out.reordered_runs = r.runs;
    out.reorder_bytes_written = r.bytes_written;
  }
  return out;
}

Result<std::unique_ptr<Engine>> Engine::Open(const Model& model, EngineOptions options) {
  RETURN_IF_ERROR(options.Validate());
  if (!Implemented(options.system)) {
    return Status::InvalidArgument("system " + std::string(SystemName(options.system)) +
                                   " is not implemented yet (implemented: recompute, as-like, as-h2o-lru, as-h2o-lfu, "
                                   "impress, impress-itf, impress-ro, spec, car)");
  }
  auto impl = std::make_unique<Impl>(model, std::move(options));
  impl->aggregation = *select::ParseAggregation(impl->opts.aggregation);
  const ModelConfig& c = impl->c;
  impl->row_bytes = static_cast<uint32_t>(c.kv_dim() * 2);
  if (impl->opts.system != System::kRecompute) {
    store::StoreOptions so;
    so.dir = impl->opts.cache_dir;
    so.owner_files = {"car-profile.json"};
    // A chunk leaving the store leaves the pools too: the same prefix may be
    // stored again with other K/V (a selective system's NR rows), and a pool
    // entry of the old copy must not serve the new one.
    Impl* im = impl.get();
    so.on_chunk_removed = [im](uint64_t prefix_hash) {
      cache::TieredCache* pools = im->pools.get();
      if (!pools) return;  // recovery, before the pools exist
      for (int l = 0; l < im->c.n_layers; ++l) {
        pools->Erase(PoolKey(prefix_hash, l));
        pools->Erase(RowsKey(prefix_hash, l));
        pools->Erase(ProbeKey(prefix_hash, l));
      }
    };
    so.fingerprint = store::Fingerprint(store::FingerprintInput{
        model.content_hash(), c.ToString(), impl->opts.tokenizer_hash, store::KvDtype::kF16,
        impl->opts.chunk_tokens});
    impl->fingerprint = so.fingerprint;
    so.model_description = c.ToString();
    so.chunk_tokens = impl->opts.chunk_tokens;
    so.layers = static_cast<uint16_t>(c.n_layers);
    so.row_bytes = impl->row_bytes;
    so.probe_bytes = static_cast<uint32_t>(std::min(3, c.n_kv_heads) * c.head_dim() * 2);
    so.dtype = store::KvDtype::kF16;
    so.disk_budget_bytes = impl->opts.disk_budget_bytes;
    so.io_backend = impl->opts.io_backend;
    so.direct_io = impl->opts.direct_io;
    ASSIGN_OR_RETURN(impl->store, store::ChunkStore::Open(so));
    cache::CacheOptions co;
    co.device_bytes = impl->opts.device_bytes;
    co.host_bytes = impl->opts.host_bytes;
    co.policy = impl->opts.policy.empty() ? DefaultPolicy(impl->opts.system)
                                          : *cache::ParsePolicy(impl->opts.policy);
    ASSIGN_OR_RETURN(impl->pools, cache::TieredCache::Create(co));
    if (impl->opts.system == System::kCar) impl->LoadProfile();
    Impl* raw = impl.get();
    impl->loader = std::thread([raw] {
      pthread_setname_np(pthread_self(), "tierkv-load");
      raw->LoaderLoop();
    });
  }
  auto engine = std::unique_ptr<Engine>(new Engine(std::move(impl)));
  if (engine->impl_->opts.maintain_interval_ms > 0 && engine->impl_->store) {
    Engine* e = engine.get();
    engine->impl_->maint = std::thread([e] {
      pthread_setname_np(pthread_self(), "tierkv-maint");
      Impl& im = *e->impl_;
      const auto every = std::chrono::milliseconds(im.opts.maintain_interval_ms);
      for (;;) {
        {
          std::unique_lock<std::mutex> l(im.q_mu);
          if (im.maint_cv.wait_for(l, every, [&] { return im.stop; })) return;
        }
        auto r = e->Maintain();
        if (!r.ok()) {
          TIERKV_LOG(kWarn) << "engine maintenance: " << r.status().ToString();
        }
      }
    });
  }
  return engine;
}

Result<ServeResult> Engine::Serve(std::span<const int32_t> tokens, const ServeOptions& so) {
  Impl& im = *impl_;
  const ModelConfig& c = im.c;
  const size_t n = tokens.size();
  if (n == 0) return Status::InvalidArgument("serve: empty prompt");
  const bool last_only = so.logits_from == std::numeric_limits<size_t>::max();
  if (!last_only && so.logits_from >= n) {
    return Status::InvalidArgument("serve: logits_from " + std::to_string(so.logits_from) +
                                   " is not below the prompt's " + std::to_string(n) + " tokens");
  }
  const size_t cap = last_only ? n - 1 : so.logits_from;
  std::vector<double> layer_retention;
  if (im.opts.system == System::kCar) {
    layer_retention = im.LayerRetention();
    if (layer_retention.empty()) {
      // No profile yet: this request's prompt is the profiling prompt.
      const std::vector<int32_t> own(tokens.begin(), tokens.end());
      RETURN_IF_ERROR(Profile(std::span(&own, 1)).status());
      layer_retention = im.LayerRetention();
    }
  }
  const auto t0 = Clock::now();
  for (int attempt = 1;; ++attempt) {
    ServeResult out;
    RequestStats& st = out.stats;
    st.prompt_tokens = n;
    st.attempts = attempt;
    store::LookupResult m;
    size_t R = 0;
    const bool reuse = im.opts.system != System::kRecompute;
    const bool selective = Selective(im.opts.system);
    if (reuse) {
      m = im.store->Lookup(tokens);
      R = std::min(m.matched_tokens, cap);
      // Selective loads work on whole chunks (full ones: only a path's last
      // chunk can be short, and it is then past R).
      if (selective) R = R / im.opts.chunk_tokens * im.opts.chunk_tokens;
    }
    const auto t_lookup = Clock::now();
    st.lookup_ms = Ms(t0, t_lookup);
    st.reused_tokens = R;
    st.computed_tokens = n - R;

    auto state = std::make_shared<LoadState>();
    state->t0 = t0;
    state->layers.resize(c.n_layers);
    SelectiveRequest rq;
    rq.m = &m;
    rq.R = R;
    rq.t0 = t0;
    rq.layers.resize(c.n_layers);
    rq.prefetch.resize(c.n_layers);
    rq.predicted.resize(c.n_layers);
    rq.speculate.assign(c.n_layers, true);
    if (im.opts.system == System::kSpec) {
      std::lock_guard<std::mutex> l(im.hint_mu);
      for (int l = 0; l < c.n_layers && l < static_cast<int>(im.spec_recall.size()); ++l) {
        rq.speculate[l] = im.spec_recall[l] >= im.opts.spec_min_recall;
      }
    }
    rq.probe_fetch.resize(c.n_layers);
    rq.key_fetch.resize(c.n_layers);
    const System sys = im.opts.system;
    rq.layer_retention = layer_retention;
    // car: the cache's score rules follow the request (CaR III-B3): +1 when
    // it enters the scheduler's window, +1 when it starts (the same moment
    // until the server's scheduler lands), -2 when it finishes.
    std::vector<uint64_t> car_keys;
    if (sys == System::kCar) {
      for (size_t i = 0; i < R / im.opts.chunk_tokens; ++i) {
        for (int l = 0; l < c.n_layers; ++l) car_keys.push_back(RowsKey(m.prefix_hashes[i], l));
      }
      im.pools->OnRequestEvent(car_keys, cache::RequestEvent::kEnterWindow);
      im.pools->OnRequestEvent(car_keys, cache::RequestEvent::kStart);
    }
    struct Finish {
      cache::TieredCache* pools;
      const std::vector<uint64_t>& keys;
      ~Finish() {
        if (!keys.empty()) pools->OnRequestEvent(keys, cache::RequestEvent::kFinish);
      }
    } finish{im.pools.get(), car_keys};
    if (R > 0 && (sys == System::kImpressItf || sys == System::kImpress ||
                  sys == System::kImpressRo || sys == System::kSpec)) {
      for (int l = 0; l < c.n_layers; ++l) {
        const store::LookupResult* mp = &m;
        // Submitted before the layer's all-keys read: the loader serves a
        // layer's jobs in submission order, and the probes decide first.
        rq.probe_fetch[l] = im.Fetch(t0, l, [&im, mp, R, l](Prefetch& p, IoCounts* st) {
          return im.ReadProbes(*mp, R, l, &p.probe_keys, st);
        });
      }
    }
    if (R > 0 && selective) {
      std::vector<bool> hint;
      {
        std::lock_guard<std::mutex> l(im.hint_mu);
        hint = im.fell_back_last;
      }
      const bool h2o = ReadsAllKeys(sys);
      for (int l = 0; l < c.n_layers; ++l) {
        if (!h2o && !(l < static_cast<int>(hint.size()) && hint[l])) continue;
        const store::LookupResult* mp = &m;
        rq.key_fetch[l] = im.Fetch(t0, l, [&im, mp, R, l](Prefetch& p, IoCounts* st) {
          const std::vector<int32_t> all = AllRows(R);
          p.k.assign(R * im.row_bytes, '\0');
          return im.ReadSelected(*mp, l, all, p.k.data(), nullptr, Impl::ReadFor::kAhead, st);
        });
      }
    }
    if (R > 0 && !selective) {
      // as-like: every layer's load is requested now and consumed in order.
      for (int l = 0; l < c.n_layers; ++l) {
        state->layers[l].issued_ms = Ms(t0, Clock::now());
        im.Submit(l, [&im, m, R, l, state] { im.LoadLayer(m, R, l, *state); });
      }
    }
    st.layers.resize(c.n_layers);
    double wait_ms = 0;
    bool failed_load = false;
    Status load_error;
    PrefillOptions po;
    po.start_pos = static_cast<int>(R);
    po.capture_kv = so.store && reuse;
    po.kv_dtype = KvDType::kF16;
    po.logits = last_only ? LogitsMode::kLast : LogitsMode::kAll;
    if (R > 0 && selective) {
      po.before_attention = [&](const LayerView& v, LayerPrefix* prefix) -> Status {
        LayerTrace& tr = st.layers[v.layer];
        tr.issued_ms = tr.completed_ms = Ms(t0, Clock::now());  // reads issued in the hook
        Status s = im.SelectiveHook(rq, v, prefix, &tr);
        tr.consumed_ms = Ms(t0, Clock::now());
        if (!rq.prefetch[v.layer]) tr.completed_ms = tr.consumed_ms;
        if (!s.ok()) {
          failed_load = true;
          load_error = s;
          return Status::Cancelled("layer " + std::to_string(v.layer) + " load failed");
        }
        return Status::Ok();
      };
    } else if (R > 0) {
      po.before_attention = [&](const LayerView& v, LayerPrefix* prefix) -> Status {
        const auto w0 = Clock::now();
        LoadState::Layer* L = nullptr;
        {
          std::unique_lock<std::mutex> l(state->mu);
          state->cv.wait(l, [&] { return state->layers[v.layer].done; });
          L = &state->layers[v.layer];
        }
        const auto w1 = Clock::now();
        wait_ms += Ms(w0, w1);
        LayerTrace& tr = st.layers[v.layer];
        tr.wait_ms = Ms(w0, w1);
        tr.issued_ms = L->issued_ms;
        tr.completed_ms = L->completed_ms;
        tr.consumed_ms = Ms(t0, w1);
        if (!L->status.ok()) {
          failed_load = true;
          load_error = L->status;
          return Status::Cancelled("layer " + std::to_string(v.layer) + " load failed");
        }
        tr.rows = R;
        tr.retention = 1.0;
        prefix->heads.resize(c.n_kv_heads);
        const size_t hb = static_cast<size_t>(c.head_dim()) * 2;
        for (int h = 0; h < c.n_kv_heads; ++h) {
          prefix->heads[h] = KvRows{L->k.data() + h * hb, L->v.data() + h * hb, KvDType::kF16, R,
                                    static_cast<size_t>(c.kv_dim()),
                                    static_cast<size_t>(c.kv_dim()), nullptr};
        }
        return Status::Ok();
      };
    }
    const auto t_compute = Clock::now();
    auto r = im.model.Prefill(tokens.subspan(R), po);
    const auto t_done = Clock::now();
    // Speculative reads still in flight point at this attempt's lookup: let
    // them finish before it goes away (only after a failed layer, or for a
    // layer the request never reached).
    std::vector<std::shared_ptr<Prefetch>> pending = rq.prefetch;
    pending.insert(pending.end(), rq.probe_fetch.begin(), rq.probe_fetch.end());
    pending.insert(pending.end(), rq.key_fetch.begin(), rq.key_fetch.end());
    for (const auto& p : pending) {
      if (!p) continue;
      std::unique_lock<std::mutex> l(p->mu);
      p->cv.wait(l, [&] { return p->done; });
    }
    if (!r.ok()) {
      if (failed_load && attempt < 3) {
        TIERKV_LOG(kWarn) << "serve: " << load_error.ToString()
                          << "; computing the request again with what the store still holds";
        continue;
      }
      return failed_load ? load_error.WithContext("serve") : r.status();
    }
    if (selective) {
      {
        std::lock_guard<std::mutex> l(im.hint_mu);
        im.fell_back_last.assign(c.n_layers, false);
        for (int l = 0; l < c.n_layers; ++l) im.fell_back_last[l] = st.layers[l].fallback;
        // spec: recall's moving average per layer (optimistic at first).
        im.spec_recall.resize(c.n_layers, 1.0);
        for (int l = 0; l < c.n_layers; ++l) {
          if (st.layers[l].recall >= 0) {
            im.spec_recall[l] = 0.7 * im.spec_recall[l] + 0.3 * st.layers[l].recall;
          }
        }
      }
      // Keys requested at the start for a layer that then used its probes
      // were read for nothing; they still count as read.
      for (int l = 0; l < c.n_layers; ++l) {
        const auto& kf = rq.key_fetch[l];
        if (kf && !st.layers[l].fallback && !ReadsAllKeys(sys)) {
          rq.io.Add(kf->io);
        }
      }
      st.identify_ms = rq.identify_ms;
      wait_ms = rq.load_ms;
      st.disk_bytes_read = rq.io.bytes;
      st.device_hits = rq.io.device_hits;
      st.host_hits = rq.io.host_hits;
      st.disk_reads = rq.io.disk_reads;
      st.device_bytes_read = rq.io.device_bytes;
      st.host_bytes_read = rq.io.host_bytes;
      st.fallback_layers = rq.fallbacks;
    }
    st.load_wait_ms = wait_ms;
    st.compute_ms = Ms(t_compute, t_done) - wait_ms - st.identify_ms;
    st.ttft_ms = Ms(t0, t_done);
    for (const LoadState::Layer& L : state->layers) {  // as-like
      st.device_hits += L.device_hits;
      st.host_hits += L.host_hits;
      st.disk_reads += L.disk_reads;
      st.disk_bytes_read += L.disk_bytes;
      st.device_bytes_read += L.device_bytes;
      st.host_bytes_read += L.host_bytes;
    }
    st.disk_chunks_read = selective ? rq.io.records : st.disk_reads;
    if (last_only) {
      out.logits = std::move(r->logits);
      out.logits_rows = 1;
    } else {
      const size_t V = static_cast<size_t>(c.vocab_size);
      const size_t from = so.logits_from - R;
      out.logits.assign(r->logits.begin() + from * V, r->logits.end());
      out.logits_rows = n - so.logits_from;
    }
    if (po.capture_kv && selective && R > 0 && im.opts.exact_store) {
      // NR's K/V again, over every row of R (read through the pools).
      const auto s0 = Clock::now();
      std::vector<std::string> rk(c.n_layers), rv(c.n_layers);
      const std::vector<int32_t> all = AllRows(R);
      IoCounts io;
      PrefillOptions ex;
      ex.start_pos = static_cast<int>(R);
      ex.capture_kv = true;
      ex.kv_dtype = KvDType::kF16;
      ex.logits = LogitsMode::kNone;
      ex.before_attention = [&](const LayerView& v, LayerPrefix* prefix) -> Status {
        std::string& k = rk[v.layer];
        std::string& vv = rv[v.layer];
        k.assign(R * im.row_bytes, '\0');
        vv.assign(R * im.row_bytes, '\0');
        RETURN_IF_ERROR(im.ReadSelected(m, v.layer, all, k.data(), vv.data(), Impl::ReadFor::kDemand, &io));
        prefix->heads.resize(c.n_kv_heads);
        const size_t hb = static_cast<size_t>(c.head_dim()) * 2;
        for (int h = 0; h < c.n_kv_heads; ++h) {
          prefix->heads[h] = KvRows{k.data() + h * hb, vv.data() + h * hb, KvDType::kF16, R,
                                    static_cast<size_t>(c.kv_dim()),
                                    static_cast<size_t>(c.kv_dim()), nullptr};
        }
        return Status::Ok();
      };
      auto exact = im.model.Prefill(tokens.subspan(R), ex);
      if (exact.ok()) {
        r->kv = std::move(exact->kv);
      } else {
        // Nothing is stored rather than the approximation.
        TIERKV_LOG(kWarn) << "serve: recomputing NR over all of R for exact-store: "
                          << exact.status().ToString() << "; not stored";
        po.capture_kv = false;
      }
      st.store_ms += Ms(s0, Clock::now());
    }
    if (po.capture_kv) {
      // The prompt's K/V for the store: R's rows as loaded, then the new ones.
      const auto s0 = Clock::now();
      std::vector<std::string> k(c.n_layers), v(c.n_layers);
      store::KvInput kv;
      // Selective systems hold only some of R's rows: the store gets the new
      // ones (first_row = R, a chunk boundary) and never guesses the others.
      if (selective) kv.first_row = R;
      for (int l = 0; l < c.n_layers; ++l) {
        const auto& nk = r->kv[l].k;
        const auto& nv = r->kv[l].v;
        if (R > 0 && !selective) {
          k[l] = state->layers[l].k;
          v[l] = state->layers[l].v;
        }
        k[l].append(reinterpret_cast<const char*>(nk.data()), nk.size());
        v[l].append(reinterpret_cast<const char*>(nv.data()), nv.size());
        kv.k.emplace_back(k[l]);
        kv.v.emplace_back(v[l]);
      }
      auto put = im.store->Put(tokens, kv);
      if (!put.ok()) {
        // The answer stands; only later requests lose this reuse.
        TIERKV_LOG(kWarn) << "serve: storing the prompt failed: " << put.status().ToString();
      } else {
        st.stored_chunks = put->new_chunks;
      }
      st.store_ms += Ms(s0, Clock::now());
    }
    return out;
  }
}

}  // namespace tierkv::engine
