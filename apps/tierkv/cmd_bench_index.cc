#include <cstdio>

#include "tierkv/tools/index_bench.h"
#include "commands.h"

namespace tierkv::app {

void AddBenchIndex(CLI::App& app, Action* run) {
  auto o = std::make_shared<bench::IndexBenchOptions>();
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand(
      "bench-index",
      "Metadata cost of the disk tier's index: builds a radix tree of many chunks from prompts "
      "sharing prefixes, reports heap bytes per chunk and lookup time");
  sub->add_option("--chunks", o->chunks, "Chunks to index")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}))
      ->capture_default_str();
  sub->add_option("--chunk-tokens", o->chunk_tokens, "Tokens per chunk")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  sub->add_option("--prompt-chunks", o->prompt_chunks, "Chunks per prompt")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_option("--shared", o->shared_fraction,
                  "How much of a prompt repeats the previous prompt's prefix (geometric parameter)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  sub->add_option("--lookups", o->lookups, "Lookups to time")->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  sub->add_option("--layers", o->layers, "Layers, for the store's per-layer tables")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_flag("--json", *json, "Print one JSON object");
  sub->callback([o, json, run] {
    *run = [o, json]() -> int {
      auto r = bench::RunIndexBench(*o);
      if (!r.ok()) return Fail(r.status().ToString());
      std::printf("%s\n", *json ? bench::IndexReportToJson(*r).c_str()
                                : bench::IndexReportToText(*o, *r).c_str());
      return 0;
    };
  });
}

}  // namespace tierkv::app
