// Importance order from the first write: Put writes the new chunks' rows
// once more per layer in descending importance (the storing request's own
// attention), as the reordered runs Reorder writes later from requests'
// reports (IMPRESS 4.4.1). A store is then packed by importance before any
// maintenance round, and those rounds refine the order from later requests.
#include <algorithm>
#include <unordered_map>

#include "store/store_impl.h"

namespace tierkv::store {

Status ChunkStore::Impl::WritePutRuns(const KvInput& kv, const PutPlan& plan,
                                      const std::vector<Written>& written,
                                      std::vector<PutRun>* runs, uint64_t* bytes) {
  const uint32_t C = opts_.chunk_tokens;
  const uint64_t rb = opts_.row_bytes;
  const size_t per_run = std::max<size_t>(
      1, std::min<size_t>(ReorderOptions{}.max_run_chunks, index::MappingList::kMaxRows / C));
  for (size_t a = 0; a < written.size(); a += per_run) {
    const size_t b = std::min(written.size(), a + per_run);
    auto run = std::make_shared<Run>();
    run->chunk_tokens = C;
    run->first_token = static_cast<uint32_t>(plan.start + a * C);
    std::vector<uint16_t> tokens;
    for (size_t k = a; k < b; ++k) {
      run->hashes.push_back(written[k].prefix_hash);
      const size_t first = plan.start + k * C;
      tokens.push_back(static_cast<uint16_t>(std::min<size_t>(C, plan.end - first)));
      run->rows += tokens.back();
    }
    run->end_hash = run->hashes.back();
    run->parent_hash = a == 0 ? plan.parent_hash : written[a - 1].prefix_hash;
    const size_t from = run->first_token - kv.first_row;  // the run's first row in kv
    std::vector<std::vector<uint32_t>> orders(opts_.layers);
    for (uint16_t l = 0; l < opts_.layers; ++l) {
      orders[l] = index::MappingList::OrderByScore(kv.importance[l].subspan(from, run->rows));
    }
    auto map = index::MappingList::FromOrders(orders);
    if (!map.ok()) return map.status().WithContext("store put: importance order");
    run->map = std::move(map).value();
    run->records = (run->rows + C - 1) / C;
    for (uint32_t i = 0; i < run->records; ++i) run->bytes += opts_.layers * record_bytes(run->RecordTokens(i));
    std::vector<KnownHeader> headers;
    const std::string all = EncodeRunRecords(
        *run, tokens,
        [&](size_t k, uint16_t layer) {
          const size_t row = (k * C + from);
          return std::pair<const char*, const char*>(kv.k[layer].data() + row * rb, kv.v[layer].data() + row * rb);
        },
        &headers);
    if (!writer_.open() || writer_.size() + all.size() > opts_.segment_bytes) RETURN_IF_ERROR(OpenSegment());
    RETURN_IF_ERROR(AppendRun(*run, all));
    *bytes += all.size();
    runs->push_back(PutRun{std::move(run), std::move(headers)});
  }
  return Status::Ok();
}

uint64_t ChunkStore::Impl::InstallPutRunsLocked(std::span<const int32_t> tokens, const KvInput& kv,
                                                const PutPlan& plan, std::vector<PutRun>& runs) {
  const uint32_t C = opts_.chunk_tokens;
  // The published chunks by prefix hash (ids exist only now).
  std::unordered_map<uint64_t, uint32_t> id_of;
  const index::Match m = tree_.Lookup(tokens.first(plan.end), plan.ns);
  for (uint32_t id : m.chunks) id_of[tree_.chunk(id).prefix_hash] = id;
  uint64_t dead = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    Run& run = *runs[i].run;
    bool all_there = true;
    for (uint64_t h : run.hashes) {
      auto it = id_of.find(h);
      all_there = all_there && it != id_of.end();
      if (all_there) run.chunks.push_back(it->second);
    }
    if (!all_there || !InstallRunLocked(runs[i].run, 0, std::move(runs[i].headers))) {
      dead += run.bytes;
      continue;
    }
    // The storing request's importance is each chunk's first report, so
    // that later reports refine this order rather than replace it.
    for (size_t k = 0; k < run.chunks.size(); ++k) {
      Heat& h = heat_[run.chunks[k]];
      h = Heat{};
      h.prefix_hash = run.hashes[k];
      h.sum.assign(size_t{opts_.layers} * C, 0.0f);
      h.reports.assign(opts_.layers, 1);
      const size_t first = run.first_token + k * C - kv.first_row;
      const size_t n = tree_.chunk(run.chunks[k]).tokens;
      for (uint16_t l = 0; l < opts_.layers; ++l) {
        std::copy_n(kv.importance[l].begin() + first, n, h.sum.begin() + size_t{l} * C);
      }
      h.last = ++heat_clock_;
    }
  }
  return dead;
}

}  // namespace tierkv::store
