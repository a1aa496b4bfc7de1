// A child process for the kill -9 test: stores prompts forever and prints
// "acked N" after each Put returns (the moment it is durable).
// Usage: store_crash_writer DIR FIRST_SEED
#include <cstdio>
#include <cstdlib>

#include "store/kv_fixture.h"

int main(int argc, char** argv) {
  using namespace tierkv::store;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DIR FIRST_SEED\n", argv[0]);
    return 2;
  }
  StoreOptions o;
  o.dir = argv[1];
  o.fingerprint = 0xc4a54ULL;
  o.chunk_tokens = 16;
  o.layers = 4;
  o.row_bytes = 512;
  o.segment_bytes = 2 << 20;
  auto store = ChunkStore::Open(o);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  for (uint32_t seed = static_cast<uint32_t>(std::atoi(argv[2]));; ++seed) {
    auto tokens = testing::Prompt(seed, seed % 3 == 0 ? 40 : 0, 50 + seed % 90);
    testing::PromptKv kv(tokens, o.layers, o.row_bytes);
    auto r = (*store)->Put(tokens, kv.input);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    std::printf("acked %u\n", seed);
    std::fflush(stdout);
  }
}
