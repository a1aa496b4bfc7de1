// Concurrency stress (issue #4, must-show 6): readers go through the device
// and host pools to the disk tier, or read selected rows straight from it,
// while a writer's Puts evict under the disk budget, a reorderer reports
// importance and swaps reordered layouts in, a compactor rewrites segments
// and writes manifests, and the pools promote, demote and offload. Every byte served is compared with what the
// prompt's K/V must be. Runs TIERKV_STRESS_SECONDS (default 10) seconds;
// meant for ThreadSanitizer (ctest label "stress").
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "cache/tiered_cache.h"
#include "store/chunk_store.h"
#include "store/kv_fixture.h"
#include "testing/status_matchers.h"

namespace tierkv::store {
namespace {

using testing::FillRow;
using testing::Prompt;
using testing::PromptKv;
using Tokens = std::vector<int32_t>;

constexpr uint16_t kLayers = 2;
constexpr uint32_t kRow = 256;
constexpr uint32_t kChunk = 16;
constexpr uint32_t kProbe = 64;

// The importance the reorderer reports for a prompt's token: fixed per
// position and layer, so every run packs the same rows first, and a reader
// that asks for the important rows of several chunks finds them packed there
// (the planner then reads them from the run: fewer, denser records).
float Importance(size_t position, uint16_t layer) {
  return static_cast<float>((position * 37 + layer * 11) % 100);
}
bool Important(size_t position, uint16_t layer) { return Importance(position, layer) >= 67; }

double StressSeconds() {
  const char* s = std::getenv("TIERKV_STRESS_SECONDS");
  return s && *s ? std::atof(s) : 10.0;
}

TEST(StoreStressTest, ReadersStayExactWhileEvictionCompactionAndPoolsRun) {
  char tmpl[] = "/var/tmp/tierkv_stress_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  StoreOptions o;
  o.dir = dir;
  o.fingerprint = 0x57e55;
  o.chunk_tokens = kChunk;
  o.layers = kLayers;
  o.row_bytes = kRow;
  o.probe_bytes = kProbe;
  o.segment_bytes = 1 << 20;
  // The built-in cost model, not one measured in this directory: whether a
  // run or the chunks' records are read must not depend on how fast the disk
  // (or a sanitizer) happened to be, or the reordered path may go unexercised.
  o.disk.calibrate_io = false;
  uint64_t record = 0;
  {
    ASSERT_OK_AND_ASSIGN(auto probe, ChunkStore::Open(o));
    record = probe->record_bytes(kChunk);
  }
  std::filesystem::remove_all(dir);
  o.disk_budget_bytes = 120 * kLayers * record;  // ~120 chunks: the writer keeps evicting
  ASSERT_OK_AND_ASSIGN(auto store, ChunkStore::Open(o));

  cache::CacheOptions co;
  co.policy = cache::PolicyKind::kScore;
  co.device_bytes = 24 * 2 * kChunk * kRow;
  co.host_bytes = 48 * 2 * kChunk * kRow;
  co.offload_watermark = 0.9;
  ASSERT_OK_AND_ASSIGN(auto pools, cache::TieredCache::Create(co));

  // Prompts share prefixes (0, 16 or 40 common tokens) so that nodes split.
  std::vector<Tokens> prompts;
  for (uint32_t i = 0; i < 60; ++i) prompts.push_back(Prompt(1000 + i, (i % 3) * 20, 40 + (i % 5) * 12));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> verified_rows{0}, pool_hits{0}, disk_reads{0}, misses{0}, puts{0},
      compactions{0}, wrong{0}, unexpected{0}, row_reads{0}, reordered_reads{0}, reorders{0},
      probe_reads{0};
  std::string first_problem;
  std::mutex problem_mu;
  auto problem = [&](const std::string& what) {
    std::lock_guard<std::mutex> l(problem_mu);
    if (first_problem.empty()) first_problem = what;
  };

  std::thread writer([&] {
    std::mt19937 rng(1);
    while (!stop) {
      const Tokens& p = prompts[rng() % prompts.size()];
      PromptKv kv(p, kLayers, kRow);
      auto r = store->Put(p, kv.input);
      if (!r.ok()) {
        unexpected++;
        problem("put: " + r.status().ToString());
      }
      puts++;
    }
  });
  std::thread compactor([&] {
    int n = 0;
    while (!stop) {
      auto r = store->Compact(0.3);
      if (!r.ok()) {
        unexpected++;
        problem("compact: " + r.status().ToString());
      }
      if (++n % 5 == 0) {
        Status s = store->Checkpoint();
        if (!s.ok()) problem("checkpoint: " + s.ToString());
      }
      compactions++;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::thread reorderer([&] {
    std::mt19937 rng(2);
    int n = 0;
    while (!stop) {
      const Tokens& p = prompts[rng() % prompts.size()];
      LookupResult m = store->Lookup(p);
      for (uint16_t layer = 0; layer < kLayers; ++layer) {
        std::vector<float> imp(m.matched_tokens);
        for (size_t i = 0; i < imp.size(); ++i) imp[i] = Importance(i, layer);
        store->ReportImportance(m, layer, imp);
      }
      if (++n % 8 == 0) {
        auto r = store->Reorder(ReorderOptions{4, 3});
        if (!r.ok()) {
          unexpected++;
          problem("reorder: " + r.status().ToString());
        } else {
          reorders += r->runs;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::vector<char> want(kChunk * kRow);
      // One batch per layer: the important rows of every chunk the lookup
      // matched, as the engine asks for a layer's selection.
      auto read_important = [&](const Tokens& p, const LookupResult& m) {
        for (uint16_t layer = 0; layer < kLayers; ++layer) {
          std::vector<std::vector<uint32_t>> rows(m.chunks.size());
          size_t total = 0;
          for (size_t c = 0; c < m.chunks.size(); ++c) {
            const size_t first = c * kChunk;
            const uint32_t used = static_cast<uint32_t>(std::min<size_t>(m.chunk_tokens[c], m.matched_tokens - first));
            for (uint32_t i = 0; i < used; ++i) {
              if (Important(first + i, layer)) rows[c].push_back(i);
            }
            total += rows[c].size();
          }
          std::vector<char> k(total * kRow), v(total * kRow);
          std::vector<RowRead> reads;
          std::vector<size_t> chunk_of;
          for (size_t c = 0, at = 0; c < m.chunks.size(); at += rows[c].size(), ++c) {
            if (rows[c].empty()) continue;
            reads.push_back(RowRead{m.chunks[c], m.prefix_hashes[c], layer, rows[c], k.data() + at * kRow,
                                    v.data() + at * kRow});
            chunk_of.push_back(c);
          }
          if (reads.empty()) return;
          RowReadStats rs;
          if (Status s = store->ReadRows(std::span<RowRead>(reads), &rs); !s.ok()) {
            unexpected++;
            problem("important rows read: " + s.ToString());
            return;
          }
          row_reads++;
          if (rs.reordered_records > 0) reordered_reads++;
          for (size_t j = 0; j < reads.size(); ++j) {
            const RowRead& rr = reads[j];
            if (rr.status.IsNotFound()) {
              misses++;
              continue;
            }
            if (!rr.status.ok()) {
              unexpected++;
              problem("important rows read: " + rr.status.ToString());
              continue;
            }
            for (size_t i = 0; i < rr.rows.size(); ++i) {
              const std::span<const int32_t> prefix(p.data(), chunk_of[j] * kChunk + rr.rows[i] + 1);
              FillRow(prefix, layer, 'K', want.data(), kRow);
              FillRow(prefix, layer, 'V', want.data() + kRow, kRow);
              if (std::memcmp(rr.k + i * kRow, want.data(), kRow) != 0 ||
                  std::memcmp(rr.v + i * kRow, want.data() + kRow, kRow) != 0) {
                wrong++;
                problem("wrong important row" + std::string(rs.reordered_records ? " (reordered)" : ""));
              }
            }
            verified_rows += rr.rows.size();
          }
        }
      };
      while (!stop) {
        const Tokens& p = prompts[rng() % prompts.size()];
        LookupResult m = store->Lookup(p);
        if (rng() % 3 == 0) {
          read_important(p, m);
          continue;
        }
        for (size_t c = 0; c < m.chunks.size(); ++c) {
          const uint32_t n = m.chunk_tokens[c];
          const size_t first = c * kChunk;
          for (uint16_t layer = 0; layer < kLayers; ++layer) {
            // The pools' key: the chunk's identity (prefix hash) and layer.
            const uint64_t key = XXH3_64bits_withSeed(&m.prefix_hashes[c], sizeof(uint64_t), layer + 1);
            // The last chunk may match only its first rows; the rest belong to
            // another prompt and are not used.
            const uint32_t used = static_cast<uint32_t>(std::min<size_t>(n, m.matched_tokens - first));
            if (rng() % 4 == 0) {
              // Identification: the probe heads' keys (the start of each K row).
              std::vector<char> keys(size_t{n} * kProbe);
              ProbeRead pr{m.chunks[c], m.prefix_hashes[c], layer, keys.data()};
              Status s = store->ReadProbeKeys(std::span<ProbeRead>(&pr, 1));
              if (!s.ok() || !pr.status.ok()) {
                if (pr.status.IsNotFound()) {
                  misses++;
                  break;
                }
                unexpected++;
                problem("probe read: " + (s.ok() ? pr.status : s).ToString());
                break;
              }
              probe_reads++;
              for (uint32_t i = 0; i < used; ++i) {
                const std::span<const int32_t> prefix(p.data(), first + i + 1);
                FillRow(prefix, layer, 'K', want.data(), kRow);
                if (std::memcmp(keys.data() + size_t{i} * kProbe, want.data(), kProbe) != 0) {
                  wrong++;
                  problem(std::string("wrong probe keys") +
                          (pr.from_probe_record ? " (probe record)" : " (sliced from K)"));
                }
              }
              verified_rows += used;
              continue;
            }
            if (rng() % 2 == 0) {
              // A selective load: some rows, from the chunk's records or its
              // reordered run's, whichever is installed at this moment.
              std::vector<uint32_t> rows;
              for (uint32_t i = 0; i < used; ++i) {
                if (rng() % 3 == 0) rows.push_back(i);
              }
              if (rows.empty()) continue;
              std::vector<char> k(rows.size() * kRow), v(rows.size() * kRow);
              RowRead rr{m.chunks[c], m.prefix_hashes[c], layer, rows, k.data(), v.data()};
              RowReadStats rs;
              Status s = store->ReadRows(std::span<RowRead>(&rr, 1), &rs);
              if (!s.ok() || !rr.status.ok()) {
                if (rr.status.IsNotFound()) {
                  misses++;
                  break;
                }
                unexpected++;
                problem("row read: " + (s.ok() ? rr.status : s).ToString());
                break;
              }
              row_reads++;
              if (rs.reordered_records > 0) reordered_reads++;
              for (size_t j = 0; j < rows.size(); ++j) {
                const std::span<const int32_t> prefix(p.data(), first + rows[j] + 1);
                FillRow(prefix, layer, 'K', want.data(), kRow);
                FillRow(prefix, layer, 'V', want.data() + kRow, kRow);
                if (std::memcmp(k.data() + j * kRow, want.data(), kRow) != 0 ||
                    std::memcmp(v.data() + j * kRow, want.data() + kRow, kRow) != 0) {
                  wrong++;
                  problem("wrong row from a selective read" +
                          std::string(rs.reordered_records ? " (reordered)" : ""));
                }
              }
              verified_rows += rows.size();
              continue;
            }
            cache::Pin pin = pools->Access(key, rng() % (n + 1), n);
            cache::Buffer data = pin.data();
            const bool from_pool = pin.tier() != cache::Tier::kDisk;
            if (from_pool) {
              pool_hits++;
            } else {
              auto buf = std::make_shared<std::vector<char>>(2 * size_t{n} * kRow);
              ChunkRead r{m.chunks[c], m.prefix_hashes[c], layer, buf->data(),
                          buf->data() + size_t{n} * kRow};
              Status s = store->Read(std::span<ChunkRead>(&r, 1));
              if (!s.ok() || !r.status.ok()) {
                // Evicted (and its id possibly reused) since the lookup: a miss.
                if (r.status.IsNotFound()) {
                  misses++;
                  break;
                }
                unexpected++;
                problem("read: " + r.status.ToString());
                break;
              }
              disk_reads++;
              data = buf;
              pin = pools->Admit(key, buf->size(), buf);
            }
            for (uint32_t i = 0; i < used; ++i) {
              const std::span<const int32_t> prefix(p.data(), first + i + 1);
              FillRow(prefix, layer, 'K', want.data() + size_t{i} * kRow, kRow);
            }
            if (std::memcmp(data->data(), want.data(), size_t{used} * kRow) != 0) {
              wrong++;
              problem("wrong K bytes for chunk " + std::to_string(c) + " layer " +
                      std::to_string(layer) + (from_pool ? " (pool hit)" : " (disk read)") + ", " +
                      std::to_string(n) + " tokens");
            }
            for (uint32_t i = 0; i < used; ++i) {
              const std::span<const int32_t> prefix(p.data(), first + i + 1);
              FillRow(prefix, layer, 'V', want.data() + size_t{i} * kRow, kRow);
            }
            if (std::memcmp(data->data() + size_t{n} * kRow, want.data(), size_t{used} * kRow) != 0) {
              wrong++;
              problem("wrong V bytes");
            }
            verified_rows += used;
          }
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(StressSeconds()));
  stop = true;
  writer.join();
  compactor.join();
  reorderer.join();
  for (auto& r : readers) r.join();

  const StoreStats s = store->stats();
  const cache::CacheStats cs = pools->stats();
  std::printf("stress: %llu rows verified (%llu pool hits, %llu disk reads, %llu selective reads of "
              "which %llu reordered, %llu probe-key reads, %llu misses), %llu layouts swapped in, %llu dropped, %llu puts, "
              "%llu evictions, %llu compactions moving %llu records, %llu promotions, %llu offloads\n",
              (unsigned long long)verified_rows.load(), (unsigned long long)pool_hits.load(),
              (unsigned long long)disk_reads.load(), (unsigned long long)row_reads.load(),
              (unsigned long long)reordered_reads.load(), (unsigned long long)probe_reads.load(),
              (unsigned long long)misses.load(),
              (unsigned long long)reorders.load(), (unsigned long long)s.reordered_runs_dropped,
              (unsigned long long)puts.load(), (unsigned long long)s.evicted_chunks,
              (unsigned long long)s.compactions, (unsigned long long)s.compacted_records,
              (unsigned long long)cs.promotions, (unsigned long long)cs.offloads);
  EXPECT_EQ(wrong.load(), 0u) << first_problem;
  EXPECT_EQ(unexpected.load(), 0u) << first_problem;
  EXPECT_EQ(s.corrupt_records, 0u);
  EXPECT_GT(verified_rows.load(), 0u);
  EXPECT_GT(s.evicted_chunks, 0u);
  EXPECT_GT(s.compacted_records, 0u);
  EXPECT_GT(reorders.load(), 0u);
  EXPECT_GT(reordered_reads.load(), 0u);
  EXPECT_GT(probe_reads.load(), 0u);
  EXPECT_EQ(s.probe_fallbacks, 0u);  // nothing damaged: every probe read used its copy
  EXPECT_GT(cs.promotions + cs.demotions, 0u);
  EXPECT_THAT(pools->TEST_Validate(), ::tierkv::testing::IsOk());
  store.reset();
  // Whatever was live at the end survives a reopen.
  o.disk_budget_bytes = 0;
  ASSERT_OK_AND_ASSIGN(store, ChunkStore::Open(o));
  EXPECT_GT(store->stats().live_chunks, 0u);
  store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tierkv::store
