// Write chunks in a child process, kill -9 it at a random moment, restart:
// every prompt whose Put was acknowledged reads back byte-exact, and nothing
// reads back wrong (LevelDB's db_stress way: the acknowledgements are the
// expected-state log). Rounds on the same directory (recovery of a recovered
// store): TIERKV_KILL9_ROUNDS, default 3 (label crash); the soak entry runs
// 100. Each round checks the prompts acknowledged since the last one and a
// sample of the older ones; the last round checks every one.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>

#include "store/chunk_store.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"

namespace tierkv::store {
namespace {

int Rounds() {
  const char* env = std::getenv("TIERKV_KILL9_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 3;
}

// Older prompts checked per round (besides the new ones).
constexpr uint32_t kSampledPerRound = 24;

TEST(Kill9Test, AcknowledgedChunksSurviveKill9) {
  char tmpl[] = "/tmp/tierkv_kill9_XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::set<uint32_t> acked;
  std::mt19937 rng(2026);
  uint32_t next_seed = 1, checked_until = 1;
  const int rounds = Rounds();
  for (int round = 0; round < rounds; ++round) {
    int out[2];
    ASSERT_EQ(0, ::pipe(out));
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      std::string seed = std::to_string(next_seed);
      ::execl(STORE_CRASH_WRITER, STORE_CRASH_WRITER, dir.c_str(), seed.c_str(), nullptr);
      _exit(127);
    }
    ::close(out[1]);
    FILE* in = ::fdopen(out[0], "r");
    // Kill after a random number of acknowledgements, plus a random delay so
    // that the kill lands inside a Put as often as between two.
    int kill_after = 5 + static_cast<int>(rng() % 40);
    char line[64];
    uint32_t last = 0;
    for (int n = 0; n < kill_after && std::fgets(line, sizeof line, in); ++n) {
      unsigned seed;
      ASSERT_EQ(1, std::sscanf(line, "acked %u", &seed)) << line;
      acked.insert(seed);
      last = seed;
    }
    ::usleep(static_cast<useconds_t>(rng() % 3000));
    ::kill(pid, SIGKILL);
    // Lines written before the kill are acknowledgements too.
    while (std::fgets(line, sizeof line, in)) {
      unsigned seed;
      if (std::sscanf(line, "acked %u", &seed) == 1) {
        acked.insert(seed);
        last = seed;
      }
    }
    std::fclose(in);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself: " << status;
    next_seed = last + 2;  // leave the maybe-interrupted prompt's seed unused

    StoreOptions o;
    o.dir = dir;
    o.fingerprint = 0xc4a54ULL;
    o.chunk_tokens = 16;
    o.layers = 4;
    o.row_bytes = 512;
    o.segment_bytes = 2 << 20;
    ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));
    std::set<uint32_t> check;
    const bool last_round = round + 1 == rounds;
    for (uint32_t seed = last_round ? 1 : checked_until; seed < next_seed; ++seed) check.insert(seed);
    for (uint32_t i = 0; i < kSampledPerRound && checked_until > 1; ++i) {
      check.insert(1 + static_cast<uint32_t>(rng() % (checked_until - 1)));
    }
    checked_until = next_seed;
    for (uint32_t seed : check) {
      auto tokens = testing::Prompt(seed, seed % 3 == 0 ? 40 : 0, 50 + seed % 90);
      LookupResult m = store->Lookup(tokens);
      if (acked.count(seed)) {
        ASSERT_EQ(m.matched_tokens, tokens.size()) << "acked prompt " << seed << " lost";
      }
      testing::PromptKv want(tokens, o.layers, o.row_bytes);
      for (size_t c = 0; c < m.chunks.size(); ++c) {
        for (uint16_t l = 0; l < o.layers; ++l) {
          std::string k(m.chunk_tokens[c] * o.row_bytes, '\0'), v = k;
          ChunkRead r{m.chunks[c], m.prefix_hashes[c], l, k.data(), v.data()};
          ASSERT_OK(store->Read(std::span<ChunkRead>(&r, 1)));
          ASSERT_OK(r.status) << "prompt " << seed << " chunk " << c;
          size_t used = std::min<size_t>(m.chunk_tokens[c], m.matched_tokens - c * 16) * o.row_bytes;
          ASSERT_EQ(0, std::memcmp(k.data(), want.k[l].data() + c * 16 * o.row_bytes, used));
          ASSERT_EQ(0, std::memcmp(v.data(), want.v[l].data() + c * 16 * o.row_bytes, used));
        }
      }
    }
    EXPECT_EQ(store->stats().corrupt_records, 0u);
    RecordProperty("round" + std::to_string(round) + "_acked", static_cast<int>(acked.size()));
  }
  EXPECT_GT(acked.size(), 5u * rounds);
  std::printf("%d kills, %zu prompts acknowledged, every one read back exactly\n", rounds, acked.size());
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace tierkv::store
