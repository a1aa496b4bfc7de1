// Metadata cost of the disk tier's index: build a radix tree of many chunks
// from prompts that share prefixes the way chat and RAG prompts do, and
// report heap bytes per chunk and lookup time.
#pragma once
#include <cstdint>
#include <string>

#include "tierkv/status.h"

namespace tierkv::bench {

struct IndexBenchOptions {
  uint64_t chunks = 1000000;     // build until the tree holds this many
  uint32_t chunk_tokens = 64;
  int prompt_chunks = 50;        // chunks per prompt
  double shared_fraction = 0.5;  // mean share of a prompt copied from an earlier prompt's prefix
  int lookups = 100000;
  uint32_t layers = 8;           // reported only: the store keeps one location per chunk
  uint64_t seed = 1;
};

struct IndexBenchReport {
  uint64_t chunks = 0, nodes = 0, prompts = 0, tokens = 0;
  double tree_bytes_per_chunk = 0;        // all of RadixTree::MemoryBytes()
  double token_bytes_per_chunk = 0;       // of which token ids
  double structure_bytes_per_chunk = 0;   // the rest: chunk table, nodes, child lists
  double store_bytes_per_chunk = 0;       // ChunkStore's tables beside the tree
  double build_seconds = 0;
  double lookup_us_mean = 0;              // a whole stored prompt
  double lookup_us_per_chunk = 0;
  double matched_fraction = 0;            // sanity: lookups of stored prompts match fully
};

Result<IndexBenchReport> RunIndexBench(const IndexBenchOptions& o);
std::string IndexReportToText(const IndexBenchOptions& o, const IndexBenchReport& r);
std::string IndexReportToJson(const IndexBenchReport& r);

}  // namespace tierkv::bench
