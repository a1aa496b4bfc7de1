#include "index/radix_tree.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "testing/status_matchers.h"

namespace tierkv::index {
namespace {

using Tokens = std::vector<int32_t>;

size_t Lcp(const Tokens& a, std::span<const int32_t> b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

// The reference: every stored chunk as the whole token prefix it depends on.
// The longest stored prefix of a query is its longest common prefix with any
// of them, which a sorted set finds next to the query's insertion point.
class Reference {
 public:
  void Add(uint32_t id, Tokens prefix) {
    ASSERT_TRUE(prefixes_.insert(prefix).second) << "a chunk was stored twice";
    by_id_[id] = std::move(prefix);
  }
  void Remove(uint32_t id) {
    prefixes_.erase(by_id_.at(id));
    by_id_.erase(id);
  }
  const Tokens& Prefix(uint32_t id) const { return by_id_.at(id); }
  size_t size() const { return by_id_.size(); }

  size_t Lookup(const Tokens& q) const {
    size_t best = 0;
    auto it = prefixes_.lower_bound(q);
    if (it != prefixes_.end()) best = std::max(best, Lcp(*it, q));
    if (it != prefixes_.begin()) best = std::max(best, Lcp(*std::prev(it), q));
    return best;
  }

  // A stored chunk can go only if no other stored chunk continues it (one
  // starting where it ends; a partial chunk is never continued).
  bool HasContinuation(uint32_t id, uint32_t chunk) const {
    const Tokens& p = by_id_.at(id);
    if (p.size() % chunk != 0) return false;
    for (auto it = prefixes_.upper_bound(p); it != prefixes_.end(); ++it) {
      if (Lcp(*it, p) < p.size()) break;
      return true;
    }
    return false;
  }

  const std::map<uint32_t, Tokens>& all() const { return by_id_; }

 private:
  std::set<Tokens> prefixes_;
  std::map<uint32_t, Tokens> by_id_;
};

// The chunks a lookup returns must tile [0, matched) and hold the query's tokens.
void ExpectChunksCover(const RadixTree& tree, const Reference& ref, const Tokens& q,
                       const Match& m) {
  size_t pos = 0;
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    uint32_t id = m.chunks[i];
    ASSERT_TRUE(tree.IsLive(id));
    const ChunkInfo& c = tree.chunk(id);
    ASSERT_EQ(c.first_token, pos) << "chunk " << i;
    const Tokens& p = ref.Prefix(id);
    ASSERT_EQ(p.size(), c.first_token + c.tokens);
    size_t end = std::min<size_t>(p.size(), m.matched_tokens);
    ASSERT_GT(end, pos);
    ASSERT_TRUE(std::equal(q.begin(), q.begin() + end, p.begin()));
    auto span = tree.ChunkTokens(id);
    ASSERT_TRUE(std::equal(span.begin(), span.end(), p.begin() + c.first_token));
    pos = c.first_token + c.tokens;
  }
  ASSERT_GE(pos, m.matched_tokens);
  if (!m.chunks.empty()) {
    ASSERT_LT(tree.chunk(m.chunks.back()).first_token, m.matched_tokens);
  }
}

class RadixTreePropertyTest : public ::testing::TestWithParam<uint32_t> {};

// 10^5 random inserts, lookups, splits (inserts that diverge inside a node)
// and evictions against the reference. A small alphabet makes prompts share
// and diverge at every offset, inside chunks and at their boundaries.
TEST_P(RadixTreePropertyTest, MatchesNaiveReference) {
  const uint32_t chunk = GetParam();
  RadixTree tree(chunk);
  Reference ref;
  std::mt19937 rng(1000 + chunk);
  auto rnd = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  std::vector<Tokens> history;

  auto make_query = [&]() {
    Tokens q;
    if (!history.empty() && rnd(4) != 0) {
      const Tokens& base = history[rnd(static_cast<int>(history.size()))];
      q.assign(base.begin(), base.begin() + rnd(static_cast<int>(base.size()) + 1));
    }
    int extra = rnd(3 * static_cast<int>(chunk) + 2);
    for (int i = 0; i < extra; ++i) q.push_back(rnd(3));
    return q;
  };

  size_t inserts = 0, lookups = 0, evictions = 0, splits_seen = 0;
  for (int op = 0; op < 100000; ++op) {
    int kind = rnd(10);
    if (kind < 4) {
      Tokens q = make_query();
      size_t nodes_before = tree.num_nodes();
      size_t plan = tree.PlanInsert(q);
      InsertResult r = tree.Insert(q);
      if (r.created.empty()) {
        ASSERT_EQ(plan, q.size());
      } else {
        ASSERT_EQ(plan, tree.chunk(r.created[0]).first_token);
      }
      ++inserts;
      // A split adds a node besides the new leaf.
      if (tree.num_nodes() > nodes_before + 1) ++splits_seen;
      for (uint32_t id : r.created) {
        const ChunkInfo& c = tree.chunk(id);
        ASSERT_NO_FATAL_FAILURE(
            ref.Add(id, Tokens(q.begin(), q.begin() + c.first_token + c.tokens)));
      }
      Match m = tree.Lookup(q);
      ASSERT_EQ(m.matched_tokens, q.size()) << "op " << op;
      ASSERT_EQ(m.chunks, r.chunks) << "op " << op;
      if (q.size() > 0) history.push_back(q);
      if (history.size() > 200) history.erase(history.begin());
    } else if (kind < 8) {
      Tokens q = make_query();
      Match m = tree.Lookup(q);
      ++lookups;
      ASSERT_EQ(m.matched_tokens, ref.Lookup(q)) << "op " << op;
      ASSERT_NO_FATAL_FAILURE(ExpectChunksCover(tree, ref, q, m));
    } else if (kind == 8 && rnd(8) == 0) {
      // Truncate (a corrupt chunk drops everything that depends on it).
      auto live = tree.LiveChunks();
      if (live.empty()) continue;
      uint32_t id = live[rnd(static_cast<int>(live.size()))];
      Tokens p = ref.Prefix(id);
      // Everything continuing it; nothing continues a partial chunk (a longer
      // prompt sharing a partial tail's tokens lives in a sibling).
      std::set<uint32_t> expect = {id};
      for (const auto& [other, prefix] : ref.all()) {
        if (p.size() % chunk == 0 && prefix.size() >= p.size() && std::equal(p.begin(), p.end(), prefix.begin())) {
          expect.insert(other);
        }
      }
      std::map<uint32_t, uint64_t> hash_before;
      for (uint32_t e : expect) hash_before[e] = tree.chunk(e).prefix_hash;
      std::vector<uint64_t> hashes;
      ASSERT_OK_AND_ASSIGN(auto removed, tree.Truncate(id, &hashes));
      ASSERT_EQ(std::set<uint32_t>(removed.begin(), removed.end()), expect) << "op " << op;
      ASSERT_EQ(hashes.size(), removed.size());
      for (size_t i = 0; i < removed.size(); ++i) ASSERT_EQ(hashes[i], hash_before[removed[i]]);
      for (uint32_t r : removed) ref.Remove(r);
    } else {
      auto candidates = tree.EvictableChunks();
      // Evict more when the store is large, so it stays at a few thousand chunks.
      int rounds = tree.num_chunks() > 3000 ? 8 : 1;
      for (int i = 0; i < rounds && !candidates.empty(); ++i) {
        size_t pick = static_cast<size_t>(rnd(static_cast<int>(candidates.size())));
        uint32_t id = candidates[pick];
        candidates.erase(candidates.begin() + static_cast<long>(pick));
        ASSERT_FALSE(ref.HasContinuation(id, chunk)) << "evictable chunk has a continuation";
        ASSERT_OK(tree.Evict(id));
        ref.Remove(id);
        ++evictions;
        ASSERT_FALSE(tree.IsLive(id));
      }
    }
    ASSERT_EQ(tree.num_chunks(), ref.size());
    if (op % 5000 == 0) {
      ASSERT_OK(tree.Validate()) << "op " << op;
    }
  }
  ASSERT_OK(tree.Validate());
  // Every stored chunk is still found in full.
  for (const auto& [id, prefix] : ref.all()) {
    ASSERT_EQ(tree.Lookup(prefix).matched_tokens, prefix.size());
    ASSERT_EQ(tree.chunk(id).prefix_hash, [&] {
      uint64_t h = 0;
      for (size_t off = 0; off < prefix.size(); off += chunk) {
        size_t len = std::min<size_t>(chunk, prefix.size() - off);
        h = ChainHash(h, std::span<const int32_t>(prefix).subspan(off, len));
      }
      return h;
    }());
  }
  EXPECT_GT(splits_seen, 100u);
  EXPECT_GT(evictions, 1000u);
  RecordProperty("inserts", static_cast<int>(inserts));
  RecordProperty("lookups", static_cast<int>(lookups));
  RecordProperty("splits", static_cast<int>(splits_seen));
}

INSTANTIATE_TEST_SUITE_P(ChunkSizes, RadixTreePropertyTest, ::testing::Values(1u, 4u, 16u));

TEST(RadixTreeTest, SplitsOnlyAtChunkBoundaries) {
  RadixTree tree(4);
  Tokens a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto r1 = tree.Insert(a);
  EXPECT_EQ(r1.created.size(), 3u);  // two full chunks and a partial tail of 2
  EXPECT_EQ(tree.chunk(r1.created[2]).tokens, 2);
  // Diverges at token 6 (inside the second chunk): the split is at 4.
  Tokens b = {1, 2, 3, 4, 5, 6, 0, 0, 0};
  auto r2 = tree.Insert(b);
  ASSERT_EQ(r2.chunks.size(), 3u);
  EXPECT_EQ(r2.chunks[0], r1.chunks[0]);
  EXPECT_EQ(r2.created.size(), 2u);
  EXPECT_EQ(tree.chunk(r2.created[0]).first_token, 4u);
  EXPECT_EQ(tree.num_nodes(), 4u);  // root, [1..4], [5..10], [5 6 0 0 | 0]
  ASSERT_OK(tree.Validate());
  // The lookup of a query diverging inside a chunk returns that chunk too.
  Match m = tree.Lookup(Tokens{1, 2, 3, 4, 5, 6, 7, 9});
  EXPECT_EQ(m.matched_tokens, 7u);
  EXPECT_EQ(m.chunks, (std::vector<uint32_t>{r1.chunks[0], r1.chunks[1]}));
  // Only leaf tails are evictable; the shared first chunk is not.
  EXPECT_FALSE(tree.IsEvictable(r1.chunks[0]));
  EXPECT_FALSE(tree.IsEvictable(r1.chunks[1]));
  EXPECT_TRUE(tree.IsEvictable(r1.chunks[2]));
  EXPECT_TRUE(tree.Evict(r1.chunks[0]).IsInvalidArgument());
  ASSERT_OK(tree.Evict(r1.chunks[2]));
  EXPECT_EQ(tree.Lookup(a).matched_tokens, 8u);
}

TEST(RadixTreeTest, CoveredPromptCreatesNothing) {
  RadixTree tree(4);
  auto r1 = tree.Insert(Tokens{1, 2, 3, 4, 5, 6});
  auto r2 = tree.Insert(Tokens{1, 2, 3, 4, 5});
  EXPECT_TRUE(r2.created.empty());
  EXPECT_EQ(r2.chunks, r1.chunks);
  // A partial tail is a leaf: extending the prompt starts a sibling at the
  // tail's chunk boundary, and keeps the first chunk shared.
  auto r3 = tree.Insert(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(r3.chunks[0], r1.chunks[0]);
  EXPECT_EQ(r3.created.size(), 2u);
  ASSERT_OK(tree.Validate());
}

TEST(RadixTreeTest, EvictUnknownChunkIsAnError) {
  RadixTree tree(4);
  EXPECT_TRUE(tree.Evict(7).IsInvalidArgument());
  auto r = tree.Insert(Tokens{1, 2});
  ASSERT_OK(tree.Evict(r.created[0]));
  EXPECT_TRUE(tree.Evict(r.created[0]).IsInvalidArgument());
  EXPECT_EQ(tree.num_nodes(), 1u);
  EXPECT_EQ(tree.Lookup(Tokens{1, 2}).matched_tokens, 0u);
}

// The same tokens under two namespaces are two prompts: lookups never cross,
// hashes differ (each chain starts from its namespace), and a namespace's
// root goes away with its last chunk.
TEST(RadixTreeTest, NamespacesNeverShareAPrefix) {
  RadixTree t(4);
  const Tokens p = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  InsertResult a = t.Insert(p, 11);
  EXPECT_EQ(a.created.size(), 3u);
  EXPECT_EQ(t.Lookup(p, 11).matched_tokens, p.size());
  EXPECT_EQ(t.Lookup(p, 12).matched_tokens, 0u);
  EXPECT_EQ(t.Lookup(p).matched_tokens, 0u);
  EXPECT_EQ(t.PlanInsert(p, 12), 0u);
  EXPECT_EQ(t.PlanInsert(p, 11), p.size());
  EXPECT_EQ(t.chunk(a.chunks[0]).prefix_hash, ChainHash(11, std::span(p).first(4)));
  EXPECT_EQ(t.NamespaceOf(a.chunks[2]), 11u);
  InsertResult shared = t.Insert(p);
  EXPECT_EQ(shared.created.size(), 3u);
  EXPECT_EQ(t.chunk(shared.chunks[0]).prefix_hash, ChainHash(0, std::span(p).first(4)));
  EXPECT_EQ(t.NamespaceOf(shared.chunks[0]), 0u);
  EXPECT_OK(t.Validate());
  EXPECT_EQ(t.ParentChunk(a.chunks[0]), kNoChunk);
  // Evicting namespace 11's chunks removes its root; namespace 0 stays.
  for (auto it = a.chunks.rbegin(); it != a.chunks.rend(); ++it) ASSERT_OK(t.Evict(*it));
  EXPECT_OK(t.Validate());
  EXPECT_EQ(t.Lookup(p, 11).matched_tokens, 0u);
  EXPECT_EQ(t.Lookup(p).matched_tokens, p.size());
  EXPECT_EQ(t.num_nodes(), 2u);  // namespace 0's root and its leaf
  // Truncate also frees an emptied namespace root.
  InsertResult b = t.Insert(p, 99);
  ASSERT_OK(t.Truncate(b.chunks[0]).status());
  EXPECT_OK(t.Validate());
  EXPECT_EQ(t.num_nodes(), 2u);
}

}  // namespace
}  // namespace tierkv::index
