#include "tierkv/tools/index_bench.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "index/radix_tree.h"
#include "store/chunk_store.h"
#include "tierkv/elapsed.h"

namespace tierkv::bench {

Result<IndexBenchReport> RunIndexBench(const IndexBenchOptions& o) {
  if (o.chunks < 1) return Status::InvalidArgument("chunks must be >= 1");
  if (o.chunk_tokens < 1 || o.chunk_tokens > 65535) {
    return Status::InvalidArgument("chunk_tokens must be in 1..65535");
  }
  if (o.prompt_chunks < 1) return Status::InvalidArgument("prompt_chunks must be >= 1");
  if (!(o.shared_fraction >= 0 && o.shared_fraction < 1)) {
    return Status::InvalidArgument("shared_fraction must be in [0, 1)");
  }
  if (o.lookups < 1) return Status::InvalidArgument("lookups must be >= 1");
  using Clock = std::chrono::steady_clock;
  std::mt19937_64 rng(o.seed);
  const size_t C = o.chunk_tokens;
  const size_t len = C * static_cast<size_t>(o.prompt_chunks);
  index::RadixTree tree(o.chunk_tokens);
  // Keep a sample of the prompts for the lookups (all of them would cost
  // more memory than the tree).
  std::vector<std::vector<int32_t>> sample;
  const size_t sample_cap = 4096;
  std::vector<int32_t> prev(len), cur(len);
  std::uniform_int_distribution<int32_t> tok(0, 32000);
  IndexBenchReport r;
  const auto t0 = Clock::now();
  for (auto& t : prev) t = tok(rng);
  while (tree.num_chunks() < o.chunks) {
    // A prefix shared with the previous prompt (whole chunks), then new tokens.
    std::geometric_distribution<int> g(1.0 - o.shared_fraction);
    const size_t shared = std::min<size_t>(static_cast<size_t>(g(rng)) * C * 5, len - C);
    std::copy(prev.begin(), prev.begin() + static_cast<long>(shared), cur.begin());
    for (size_t i = shared; i < len; ++i) cur[i] = tok(rng);
    tree.Insert(cur);
    r.prompts++;
    r.tokens += len;
    if (sample.size() < sample_cap) {
      sample.push_back(cur);
    } else if (rng() % r.prompts < sample_cap) {
      sample[rng() % sample_cap] = cur;
    }
    std::swap(prev, cur);
  }
  r.build_seconds = SecondsSince(t0);
  r.chunks = tree.num_chunks();
  r.nodes = tree.num_nodes();
  const double n = static_cast<double>(r.chunks);
  const size_t tree_bytes = tree.MemoryBytes();
  size_t token_bytes = 0;
  for (uint32_t id : tree.LiveChunks()) token_bytes += tree.chunk(id).tokens * sizeof(int32_t);
  r.tree_bytes_per_chunk = static_cast<double>(tree_bytes) / n;
  r.token_bytes_per_chunk = static_cast<double>(token_bytes) / n;
  r.structure_bytes_per_chunk = r.tree_bytes_per_chunk - r.token_bytes_per_chunk;
  // ChunkStore's per-chunk tables: one K/V location (a chunk's layers are
  // back to back), eviction value, probe records' block and stride, token count.
  r.store_bytes_per_chunk = static_cast<double>(store::ChunkStore::TableBytesPerChunk());

  size_t matched = 0, asked = 0;
  const auto t1 = Clock::now();
  for (int i = 0; i < o.lookups; ++i) {
    const auto& p = sample[static_cast<size_t>(rng() % sample.size())];
    const index::Match m = tree.Lookup(p);
    matched += m.matched_tokens;
    asked += p.size();
  }
  const double secs = SecondsSince(t1);
  r.lookup_us_mean = secs * 1e6 / o.lookups;
  r.lookup_us_per_chunk = r.lookup_us_mean / o.prompt_chunks;
  r.matched_fraction = static_cast<double>(matched) / static_cast<double>(asked);
  return r;
}

std::string IndexReportToText(const IndexBenchOptions& o, const IndexBenchReport& r) {
  char buf[2048];
  std::snprintf(
      buf, sizeof buf,
      "index of %llu chunks of %u tokens (%llu nodes, %llu prompts of %d chunks), built in %.1f s\n"
      "  radix tree heap: %.1f bytes/chunk = %.1f token ids + %.1f structure\n"
      "  store tables beside it (%u layers): %.1f bytes/chunk\n"
      "  lookup of a stored %d-chunk prompt: %.2f us (%.3f us per chunk), matched %.3f of it\n",
      static_cast<unsigned long long>(r.chunks), o.chunk_tokens,
      static_cast<unsigned long long>(r.nodes), static_cast<unsigned long long>(r.prompts),
      o.prompt_chunks, r.build_seconds, r.tree_bytes_per_chunk, r.token_bytes_per_chunk,
      r.structure_bytes_per_chunk, o.layers, r.store_bytes_per_chunk, o.prompt_chunks,
      r.lookup_us_mean, r.lookup_us_per_chunk, r.matched_fraction);
  return buf;
}

std::string IndexReportToJson(const IndexBenchReport& r) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "{\"chunks\": %llu, \"nodes\": %llu, \"prompts\": %llu, \"tree_bytes_per_chunk\": "
                "%.2f, \"token_bytes_per_chunk\": %.2f, \"structure_bytes_per_chunk\": %.2f, "
                "\"store_bytes_per_chunk\": %.2f, \"build_seconds\": %.3f, \"lookup_us_mean\": "
                "%.3f, \"lookup_us_per_chunk\": %.4f, \"matched_fraction\": %.4f}",
                static_cast<unsigned long long>(r.chunks), static_cast<unsigned long long>(r.nodes),
                static_cast<unsigned long long>(r.prompts), r.tree_bytes_per_chunk,
                r.token_bytes_per_chunk, r.structure_bytes_per_chunk, r.store_bytes_per_chunk,
                r.build_seconds, r.lookup_us_mean, r.lookup_us_per_chunk, r.matched_fraction);
  return buf;
}

}  // namespace tierkv::bench
