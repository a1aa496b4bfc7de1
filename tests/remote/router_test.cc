// The Redis client parts against real servers: URLs, hash slots, one
// server's pipelines, timeouts and backoff, and a three-master cluster's
// routing across a resharding.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "remote/redis_conn.h"
#include "remote/redis_url.h"
#include "remote/router.h"
#include "testing/redis_server.h"

namespace tierkv::remote {
namespace {

using std::chrono::milliseconds;

TEST(RedisUrlTest, ParsesServersAndClustersAndNamesWhatIsWrong) {
  auto a = ParseRedisUrl("redis://127.0.0.1:6380/2");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->cluster);
  EXPECT_EQ(a->nodes[0].host, "127.0.0.1");
  EXPECT_EQ(a->nodes[0].port, 6380);
  EXPECT_EQ(a->db, 2);
  auto b = ParseRedisUrl("redis://cache.local");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->nodes[0].port, 6379);
  auto c = ParseRedisUrl("redis-cluster://h1:7000,h2:7001,h3");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cluster);
  ASSERT_EQ(c->nodes.size(), 3u);
  EXPECT_EQ(c->nodes[1].ToString(), "h2:7001");
  EXPECT_EQ(c->nodes[2].port, 6379);
  for (const char* bad : {"http://h:1", "redis://:6379", "redis://h:0", "redis://h:70000", "redis://h:x",
                          "redis://h:1/db", "redis-cluster://h:1/0", "redis-cluster://", "redis://h:1,h:2"}) {
    auto r = ParseRedisUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
  }
  EXPECT_NE(ParseRedisUrl("redis://h:99999").status().message().find("port"), std::string::npos);
}

TEST(KeySlotTest, MatchesRedisClusterHashSlots) {
  // The Redis Cluster specification's test vector: CRC16("123456789") = 0x31C3.
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 % kClusterSlots);
  // Hash tags: only the part inside the first {...} counts, unless empty.
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), KeySlot("foo{}{bar}"));
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
}

TEST(RedisConnTest, PipelinesBinaryValuesAndReportsErrorReplies) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  RedisConn conn({"127.0.0.1", redis.port()}, milliseconds(500));
  std::string binary("a\0b\r\n\xff", 6);
  std::vector<Command> cmds = {{"SET", "k1", binary}, {"GET", "k1"}, {"GET", "missing"},
                               {"INCR", "k1"}, {"GETRANGE", "k1", "1", "2"}};
  std::vector<Reply> r;
  ErrorKind kind;
  ASSERT_TRUE(conn.Pipeline(cmds, &r, &kind).ok());
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].str, "OK");
  EXPECT_EQ(r[1].type, Reply::Type::kString);
  EXPECT_EQ(r[1].str, binary);
  EXPECT_EQ(r[2].type, Reply::Type::kNil);
  EXPECT_TRUE(r[3].is_error());
  EXPECT_EQ(KindOfErrorReply(r[3]), ErrorKind::kReply);
  EXPECT_EQ(r[4].str, std::string("\0b", 2));
}

TEST(RedisConnTest, ADeadOrSlowServerFailsWithinTheTimeoutAndIsRetriedAfterABackoff) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  RedisConn conn({"127.0.0.1", redis.port()}, milliseconds(150));
  std::vector<Reply> r;
  ErrorKind kind;
  const std::vector<Command> ping = {{"PING"}};
  ASSERT_TRUE(conn.Pipeline(ping, &r, &kind).ok());
  // Slow: DEBUG SLEEP holds the server past the timeout.
  RedisConn other({"127.0.0.1", redis.port()}, milliseconds(5000));
  std::thread sleeper([&] {
    std::vector<Reply> rr;
    ErrorKind k;
    const std::vector<Command> sleep = {{"DEBUG", "SLEEP", "1"}};
    other.Pipeline(sleep, &rr, &k).IgnoreError();
  });
  std::this_thread::sleep_for(milliseconds(100));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(conn.Pipeline(ping, &r, &kind).ok());
  EXPECT_EQ(kind, ErrorKind::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(900));
  sleeper.join();
  // Killed: the next call fails as closed or refused, at once.
  redis.Kill();
  std::this_thread::sleep_for(milliseconds(100));  // past the backoff
  t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(conn.Pipeline(ping, &r, &kind).ok());
  EXPECT_TRUE(kind == ErrorKind::kConnect || kind == ErrorKind::kClosed) << ErrorKindName(kind);
  EXPECT_FALSE(conn.Pipeline(ping, &r, &kind).ok());
  EXPECT_EQ(kind, ErrorKind::kConnect);  // backing off: no connect tried
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(500));
  // Restarted: served again once the backoff has passed.
  redis.Start();
  bool back = false;
  for (int i = 0; i < 60 && !back; ++i) {
    back = conn.Pipeline(ping, &r, &kind).ok();
    if (!back) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(back);
}

TEST(RouterTest, AClusterRoutesEveryKeyToItsSlotsOwnerAcrossAResharding) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisCluster cluster;
  auto url = ParseRedisUrl(cluster.url());
  ASSERT_TRUE(url.ok());
  Router router(*url, milliseconds(1000));
  std::vector<Command> sets, gets;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "k{" + std::to_string(i) + "}";
    sets.push_back({"SET", key, "v" + std::to_string(i)});
    gets.push_back({"GET", key});
  }
  std::vector<Reply> r;
  std::vector<ErrorKind> e;
  router.Run(sets, &r, &e);
  for (size_t i = 0; i < sets.size(); ++i) {
    ASSERT_EQ(e[i], ErrorKind::kNone);
    ASSERT_EQ(r[i].str, "OK") << i;
  }
  EXPECT_EQ(router.counters().moved, 0u);  // the slot map was right from the start
  // Every node holds some of the keys.
  for (int n = 0; n < 3; ++n) EXPECT_NE(cluster.node(n).Cli("DBSIZE"), "0\n") << n;
  // Move a third of node 0's slots, with their keys, to node 1.
  cluster.Reshard(0, 1, 2000);
  router.Run(gets, &r, &e);
  for (size_t i = 0; i < gets.size(); ++i) {
    ASSERT_EQ(e[i], ErrorKind::kNone) << i;
    EXPECT_EQ(r[i].str, "v" + std::to_string(i)) << i;
  }
  EXPECT_GT(router.counters().moved, 0u);  // the stale map was corrected by MOVED
  EXPECT_GT(router.counters().slot_refreshes, 1u);
  // With the map refreshed, no more redirections.
  const uint64_t moved = router.counters().moved;
  router.Run(gets, &r, &e);
  EXPECT_EQ(router.counters().moved, moved);
}

}  // namespace
}  // namespace tierkv::remote
