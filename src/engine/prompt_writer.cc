#include "engine/prompt_writer.h"

#include <numeric>
#include <string>

#include "tierkv/logging.h"

namespace tierkv::engine {

Result<std::vector<PrefillResult::LayerKv>> PromptWriter::ExactKv(std::span<const int32_t> tokens,
                                                                  const Request& rq) {
  const ModelConfig& c = model_.config();
  const size_t R = rq.R, rb = reader_->geometry().row_bytes;
  std::vector<std::string> rk(c.n_layers), rv(c.n_layers);
  std::vector<int32_t> all(R);
  std::iota(all.begin(), all.end(), 0);
  IoCounts io;
  PrefillOptions ex;
  ex.start_pos = static_cast<int>(R);
  ex.capture_kv = true;
  ex.kv_dtype = KvDType::kF16;
  ex.logits = LogitsMode::kNone;
  ex.before_attention = [&](const LayerView& v, LayerPrefix* prefix) -> Status {
    std::string& k = rk[v.layer];
    std::string& vv = rv[v.layer];
    k.assign(R * rb, '\0');
    vv.assign(R * rb, '\0');
    RETURN_IF_ERROR(reader_->ReadSelected(*rq.m, v.layer, all, k.data(), vv.data(), ReadFor::kDemand, &io));
    prefix->heads.resize(c.n_kv_heads);
    const size_t hb = static_cast<size_t>(c.head_dim()) * 2;
    for (int h = 0; h < c.n_kv_heads; ++h) {
      prefix->heads[h] = KvRows{k.data() + h * hb, vv.data() + h * hb, KvDType::kF16, R,
                                static_cast<size_t>(c.kv_dim()), static_cast<size_t>(c.kv_dim()),
                                nullptr};
    }
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(PrefillResult exact, model_.Prefill(tokens.subspan(R), ex));
  return std::move(exact.kv);
}

void PromptWriter::Put(std::span<const int32_t> tokens, Request& rq,
                       const std::vector<PrefillResult::LayerKv>& kv, bool after_tail, bool behind,
                       RequestStats* stats) {
  const int L = model_.config().n_layers;
  std::vector<std::string> k(L), v(L);
  store::KvInput in;
  // Selective systems hold only some of R's rows: the store gets the new
  // ones (first_row = R, a chunk boundary) and never guesses the others.
  if (selective_) in.first_row = rq.R;
  for (int l = 0; l < L; ++l) {
    if (rq.R > 0 && !selective_) {
      Fetch* whole = rq.state->WholeLayer(l);  // all rows of R, read at the start
      k[l] = std::move(whole->k);
      v[l] = std::move(whole->v);
    } else if (after_tail && rq.tail.end > rq.tail.start) {
      // The rows read whole past R come first: the store starts at R.
      k[l] = std::move(rq.tail.k[l]);
      v[l] = std::move(rq.tail.v[l]);
    }
    k[l].append(reinterpret_cast<const char*>(kv[l].k.data()), kv[l].k.size());
    v[l].append(reinterpret_cast<const char*>(kv[l].v.data()), kv[l].v.size());
    in.k.emplace_back(k[l]);
    in.v.emplace_back(v[l]);
  }
  // The first write's order: over the rows given (R's and the new ones,
  // or only the new ones for a selective system).
  std::vector<std::vector<float>> importance;
  if (rq.order) {
    importance = rq.order->Scores(k);
    for (const auto& s : importance) in.importance.emplace_back(s);
  }
  in.cache_namespace = rq.cache_namespace;
  if (behind) {
    StoreQueue::Job job{std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(k), std::move(v),
                        std::move(importance), in.first_row, rq.cache_namespace};
    stats->store_queued = behind_.Enqueue(std::move(job));
    stats->store_failed = !stats->store_queued;
    return;
  }
  auto put = tiers_->Put(tokens, in);
  if (!put.ok()) {
    // The answer stands; only later requests lose this reuse.
    TIERKV_LOG(kWarn) << "serve: storing the prompt failed: " << put.status().ToString();
    stats->store_failed = true;
    return;
  }
  stats->stored_chunks = put->new_chunks;
}

void PromptWriter::Store(std::span<const int32_t> tokens, Request& rq,
                         std::vector<PrefillResult::LayerKv> kv, RequestStats* stats, bool behind) {
  // The recomputation starts at R, the tail included; the forward pass's
  // K/V start after the tail.
  bool after_tail = true;
  if (selective_ && rq.R > 0 && exact_store_) {
    after_tail = false;
    const auto s0 = Clock::now();
    auto exact = ExactKv(tokens, rq);
    stats->store_ms += MsSince(s0);
    if (!exact.ok()) {
      // Nothing is stored rather than the approximation.
      TIERKV_LOG(kWarn) << "serve: recomputing NR over all of R for exact-store: "
                        << exact.status().ToString() << "; not stored";
      stats->store_failed = true;
      return;
    }
    kv = std::move(exact).value();
  }
  const auto s0 = Clock::now();
  Put(tokens, rq, kv, after_tail, behind, stats);
  stats->store_ms += MsSince(s0);
}

}  // namespace tierkv::engine
