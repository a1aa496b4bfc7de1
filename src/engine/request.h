// One attempt of one request: what the layer sources share while the
// forward pass runs, and the source's own state (SourceState). Owned by
// Serve on the compute thread; the load thread touches only the Fetches
// (through their own mutexes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/io_counts.h"
#include "engine/load_queue.h"
#include "engine/store_importance.h"
#include "engine/timing.h"
#include "remote/remote_tier.h"
#include "store/chunk_store.h"
#include "tierkv/sequence.h"

namespace tierkv::engine {

// The rows a selective layer's attention reads; they live here until the
// request ends.
struct SelectiveLayer {
  std::string k, v;                 // shared set: |S| rows of every KV head, token-major, fp16
  std::vector<int32_t> positions;   // the shared set's absolute positions
  std::vector<std::string> hk, hv;  // per-head sets (fallback, H2O): |S_h| rows of head_dim
  std::vector<std::vector<int32_t>> hpos;
};

// One layer's prefix rows with the far rows appended, per KV head (valid
// until the next layer's: the model's contract for prefix rows).
struct FarScratch {
  std::vector<std::string> k, v;
  std::vector<std::vector<int32_t>> pos;
};

// A layer source's own state for one attempt: returned by its Start, kept
// in the Request until the attempt ends. Each source defines its own (the
// reads it issued, what it predicted) and is the only one to read it.
class SourceState {
 public:
  virtual ~SourceState() = default;
  // Remembers a fetch the source issued (FetchLayer does), to be awaited
  // before the lookup it reads goes away; returns it.
  std::shared_ptr<Fetch> Track(std::shared_ptr<Fetch> f) {
    issued_.push_back(f);
    return f;
  }
  // Every fetch issued this attempt.
  const std::vector<std::shared_ptr<Fetch>>& Fetches() const { return issued_; }
  // Layer l's rows as read whole at the start (reuse of all rows: the store
  // gets R's rows from them); null for a source that reads some rows.
  virtual Fetch* WholeLayer(int /*l*/) const { return nullptr; }

 private:
  std::vector<std::shared_ptr<Fetch>> issued_;
};

struct Request {
  // The namespace the prompt is looked up and stored under (ServeOptions::cache_namespace).
  uint64_t cache_namespace = 0;
  Request(const store::LookupResult* match, size_t reused, Clock::time_point start, int n_layers)
      : m(match), R(reused), t0(start), layers(n_layers) {}

  const store::LookupResult* m;  // the lookup this attempt reuses
  size_t R;                      // rows of the local prefix reused (a multiple of the chunk for selective)
  // The important rows of remote chunks after R (RemoteRead::kImportant),
  // appended to every layer's prefix (far_rows.h); the forward pass starts
  // at End().
  remote::FarRows far;
  // Selective systems reuse whole chunks (R); the rows of a stored short
  // last chunk (or of the chunk a prompt ends in) past R are read whole
  // instead of computed: positions [tail.start, tail.end), every layer, in
  // FarRows' shape (tail.chunks stays 0). Never together with far rows.
  remote::FarRows tail;
  FarScratch far_scratch;
  size_t End() const { return far.chunks > 0 ? far.end : std::max(R, tail.end); }
  Clock::time_point t0;          // the request's start
  double retention = 1;                 // share of R's rows per layer (the request's or the engine's)
  bool own_retention = false;           // the request's differs from the engine's
  std::vector<double> layer_retention;  // per layer (a profile); empty: uniform

  // What the sources add up.
  IoCounts io;
  double identify_ms = 0, load_ms = 0;
  double tail_ms = 0;  // reading the tail, before the forward pass
  int fallbacks = 0;  // layers whose probe heads disagreed

  std::vector<SelectiveLayer> layers;
  // The source's own (its Start's result); null when nothing is reused.
  std::unique_ptr<SourceState> state;
  // The state of the source that started this attempt, as its own type T
  // (or a base of it).
  template <typename T>
  T& StateAs() {
    return static_cast<T&>(*state);
  }
  std::vector<uint32_t> unit_groups;  // R's rows' selection units (RowGroups; empty: single rows)
  // Systems that order at store: the window captured by the forward pass,
  // scored when the prompt is stored (null otherwise).
  std::unique_ptr<StoreImportance> order;
  // ServeOptions::keep_kv: the rows each layer's attention is given are
  // copied here as the forward pass goes (null otherwise).
  std::shared_ptr<Sequence> keep;

  // Waits for a fetch this request issued and counts its reads as the
  // request's (whatever its status); adds the wait to *wait_ms unless null.
  Status Use(Fetch& f, double* wait_ms = nullptr) {
    Status s = Await(f, wait_ms);
    io.Add(f.io);
    return s;
  }
};

}  // namespace tierkv::engine
