// What a request stores after its first token: the prompt's K/V for later
// requests. Whole-row systems store R's rows as loaded plus the new rows;
// selective systems hold only some of R's rows, so they store the new rows
// only (from R, a chunk boundary). With exact_store, a selective system's
// new rows are computed again over every row of R first (the drift,
// docs/systems.md). A failure loses the stored rows, never the answer.
#pragma once

#include <span>
#include <vector>

#include "engine/pooled_reader.h"
#include "engine/store_queue.h"
#include "engine/request.h"
#include "remote/store_tiers.h"
#include "tierkv/engine.h"
#include "tierkv/model.h"

namespace tierkv::engine {

class PromptWriter {
 public:
  // Puts go through `tiers` (the store, and the remote tier behind it).
  // `behind_bytes`: the K/V queued for storing behind requests at most.
  PromptWriter(const Model& model, remote::StoreTiers* tiers, PooledReader* reader, bool selective,
               bool exact_store, uint64_t behind_bytes = 256ull << 20)
      : model_(model), tiers_(tiers), reader_(reader), selective_(selective),
        exact_store_(exact_store), behind_(tiers, behind_bytes) {}

  // Stores `tokens` with the new rows' K/V `kv` (the forward pass's capture,
  // rows End().. of the prompt); counts stored chunks and store_ms into *stats.
  // The last step of a request: R's whole rows (and a selective request's
  // tail rows) are taken out of its fetches, not copied.
  // With `behind`, the K/V are queued for the store writer (StoreQueue).
  void Store(std::span<const int32_t> tokens, Request& rq,
             std::vector<PrefillResult::LayerKv> kv, RequestStats* stats, bool behind = false);
  StoreQueue& behind() { return behind_; }

 private:
  // The new rows' K/V computed over every row of R (read through the pools).
  Result<std::vector<PrefillResult::LayerKv>> ExactKv(std::span<const int32_t> tokens,
                                                      const Request& rq);
  void Put(std::span<const int32_t> tokens, Request& rq,
           const std::vector<PrefillResult::LayerKv>& kv, bool after_tail, bool behind, RequestStats* stats);

  const Model& model_;
  remote::StoreTiers* tiers_;
  PooledReader* reader_;
  const bool selective_, exact_store_;
  StoreQueue behind_;  // last: its thread stops before the rest goes
};

}  // namespace tierkv::engine
