// The Redis client parts against real servers: URLs, hash slots, one
// server's pipelines, timeouts and backoff, and a three-master cluster's
// routing across a resharding.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "remote/redis_conn.h"
#include "remote/redis_url.h"
#include "remote/router.h"
#include "testing/fake_redis.h"
#include "testing/redis_server.h"
#include "tierkv/remote.h"

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
                          "redis://h:1/db", "redis-cluster://h:1/1", "redis-cluster://", "redis://h:1,h:2"}) {
    auto r = ParseRedisUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
  }
  EXPECT_NE(ParseRedisUrl("redis://h:99999").status().message().find("port"), std::string::npos);
}

// Issue 34 (8): a password (Redis's requirepass), an ACL user, a database,
// TLS schemes; the password never printed.
TEST(RedisUrlTest, TakesAUserAPasswordAndADatabaseAndNeverPrintsThePassword) {
  auto a = ParseRedisUrl("redis://:s3cret@127.0.0.1:6380/3");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->user, "");
  EXPECT_EQ(a->password, "s3cret");
  EXPECT_EQ(a->nodes[0].ToString(), "127.0.0.1:6380");
  EXPECT_EQ(a->db, 3);
  EXPECT_FALSE(a->tls);
  EXPECT_EQ(a->ToString(), "redis://***@127.0.0.1:6380/3");
  auto b = ParseRedisUrl("redis://alice:pa:ss@h:1");  // the first ':' ends the user
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->user, "alice");
  EXPECT_EQ(b->password, "pa:ss");
  EXPECT_EQ(b->ToString(), "redis://alice:***@h:1");
  auto c = ParseRedisUrl("redis://s3cret@h");  // one word: a password, as [user:]password says
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->password, "s3cret");
  EXPECT_EQ(c->user, "");
  auto d = ParseRedisUrl("redis://bob:p%40ss%2Fw@rd/x@h:2/1");  // percent-encoded, and a raw '@' and '/'
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->password, "p@ss/w@rd/x");
  EXPECT_EQ(d->nodes[0].ToString(), "h:2");
  EXPECT_EQ(d->db, 1);
  auto e = ParseRedisUrl("rediss-cluster://u:pw@h1:7000,h2:7001/0");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->tls);
  EXPECT_TRUE(e->cluster);
  EXPECT_EQ(e->nodes.size(), 2u);
  EXPECT_EQ(e->password, "pw");
  EXPECT_EQ(e->ToString(), "rediss-cluster://u:***@h1:7000,h2:7001");
  auto f = ParseRedisUrl("rediss://h:6390");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->tls);
  // TLS is supported (through OpenSSL: RedisConnTest's TLS tests), and its login goes with it.
  EXPECT_TRUE(CheckSupported(*e).ok()) << CheckSupported(*e).ToString();
  auto tls = ResolveRedisUrl("rediss://:pw@h:1");
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_TRUE(tls->tls);
  EXPECT_TRUE(Login::Of(*tls, {"ca.pem"}).tls);
  EXPECT_EQ(Login::Of(*tls, {"ca.pem"}).tls_files.ca_file, "ca.pem");
  EXPECT_FALSE(Login::Of(*ParseRedisUrl("redis://h:1"), {"ca.pem"}).tls);
  // TLS files for a plain URL are refused, naming them (they would be ignored).
  RemoteOptions plain;
  plain.url = "redis://h:1";
  plain.tls_ca_file = "ca.pem";
  EXPECT_TRUE(plain.Validate().IsInvalidArgument());
  EXPECT_NE(plain.Validate().message().find("tls_ca_file"), std::string::npos) << plain.Validate().ToString();
  plain.url = "rediss://h:1";
  EXPECT_TRUE(plain.Validate().ok()) << plain.Validate().ToString();
  plain.tls_key_file = "key.pem";
  EXPECT_NE(plain.Validate().message().find("tls_key_file given without tls_cert_file"), std::string::npos);
  auto g = ParseRedisUrl("redis://alice:@h:1");  // the user's password from elsewhere
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->user, "alice");
  EXPECT_EQ(g->password, "");

  // Bad ones: named, and the password never in the message.
  struct Bad {
    const char* url;
    const char* names;
  };
  for (const Bad& bad : {Bad{"redis://:s3cret@h:1/x", "database 'x'"}, Bad{"redis://:s3cret@h:1/-1", "database '-1'"},
                         Bad{"redis://:s3cret@h:1/99999", "database '99999'"},
                         Bad{"redis-cluster://:s3cret@h:1/2", "database 0 only"},
                         Bad{"redis://:s3cret@:1", "empty host"}, Bad{"redis://:s3cret@h:0", "port '0'"},
                         Bad{"redis://@h:1", "empty password"}, Bad{"redis://:@h:1", "empty password"},
                         Bad{"redis://:s3cret%zz@h:1", "password: '%'"}, Bad{"redis://s3cret@h:1,h:2", "host"}}) {
    auto r = ParseRedisUrl(bad.url);
    ASSERT_FALSE(r.ok()) << bad.url;
    EXPECT_NE(r.status().message().find(bad.names), std::string::npos) << r.status().ToString();
    EXPECT_EQ(r.status().message().find("s3cret"), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(MaskRedisUrl("redis://alice:s3cret@h:1/2"), "redis://alice:***@h:1/2");
  EXPECT_EQ(MaskRedisUrl("redis://s3cret@h:1"), "redis://***@h:1");
  EXPECT_EQ(MaskRedisUrl("redis://h:1"), "redis://h:1");
  EXPECT_EQ(MaskRedisUrl("nonsense:s3cret@h"), "***@h");

  // The password from the caller, else $TIERKV_REMOTE_PASSWORD, when the URL has none.
  ::unsetenv(kRemotePasswordEnv);
  auto none = ResolveRedisUrl("redis://h:1");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->password, "");
  EXPECT_FALSE(ResolveRedisUrl("redis://alice:@h:1").ok());  // a user without a password
  ::setenv(kRemotePasswordEnv, "fromenv", 1);
  EXPECT_EQ(ResolveRedisUrl("redis://h:1")->password, "fromenv");
  EXPECT_EQ(ResolveRedisUrl("redis://h:1", "given")->password, "given");
  EXPECT_EQ(ResolveRedisUrl("redis://:inurl@h:1", "given")->password, "inurl");
  auto alice = ResolveRedisUrl("redis://alice:@h:1");
  ASSERT_TRUE(alice.ok());
  EXPECT_EQ(alice->user, "alice");
  EXPECT_EQ(alice->password, "fromenv");
  ::unsetenv(kRemotePasswordEnv);
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

// Issue 34 (8): AUTH (a password, an ACL user) and SELECT on every connect;
// a refusal fails the call with Redis's own text, never the password, and
// the backoff that follows keeps its kind.
TEST(RedisConnTest, LogsInWithAPasswordOrAUserAndSaysWhyALoginFails) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret"), "OK\n");
  ASSERT_EQ(redis.Cli("-a s3cret --no-auth-warning ACL SETUSER alice on '>a1ice' '~*' '+@all'"), "OK\n");
  const Endpoint e{"127.0.0.1", redis.port()};
  const std::vector<Command> set = {{"SET", "k", "v"}, {"GET", "k"}};
  std::vector<Reply> r;
  ErrorKind kind;

  RedisConn right(e, milliseconds(500), Login{"", "s3cret", 0});
  ASSERT_TRUE(right.Pipeline(set, &r, &kind).ok());
  EXPECT_EQ(r[0].type, Reply::Type::kStatus);
  EXPECT_EQ(r[0].str, "OK");
  EXPECT_EQ(r[1].str, "v");
  RedisConn user(e, milliseconds(500), Login{"alice", "a1ice", 3});
  ASSERT_TRUE(user.Pipeline(set, &r, &kind).ok());
  EXPECT_EQ(redis.Cli("-a s3cret --no-auth-warning -n 3 GET k"), "v\n");

  RedisConn wrong(e, milliseconds(500), Login{"", "n0t-it", 0});
  Status s = wrong.Pipeline(set, &r, &kind);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(kind, ErrorKind::kAuth);
  EXPECT_NE(s.message().find("WRONGPASS"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("n0t-it"), std::string::npos) << s.ToString();
  s = wrong.Pipeline(set, &r, &kind);  // backing off: the same kind and reason, at once
  EXPECT_EQ(kind, ErrorKind::kAuth);
  EXPECT_TRUE(wrong.backed_off());
  EXPECT_NE(s.message().find("WRONGPASS"), std::string::npos) << s.ToString();

  RedisConn none(e, milliseconds(500));
  s = none.Pipeline(set, &r, &kind);
  EXPECT_EQ(kind, ErrorKind::kAuth);
  EXPECT_NE(s.message().find("NOAUTH"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(kRemotePasswordEnv), std::string::npos) << s.ToString();

  RedisConn baddb(e, milliseconds(500), Login{"", "s3cret", 99});
  s = baddb.Pipeline(set, &r, &kind);
  EXPECT_EQ(kind, ErrorKind::kReply);
  EXPECT_NE(s.message().find("SELECT 99 refused: ERR DB index is out of range"), std::string::npos) << s.ToString();

  Reply noauth{Reply::Type::kError, "NOAUTH Authentication required."};
  EXPECT_EQ(KindOfErrorReply(noauth), ErrorKind::kAuth);
}

// The process's peak resident set (VmHWM), in KiB.
long PeakRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

// Issue 57 (1): a server that answers GET a byte every 100 ms, announces a
// 1 GB string or an array of 2^31-1 elements, or never answers, costs one
// pipeline its timeout at most (the whole reply's, not each read's) and no
// memory: the announced size is never allocated, and what is held stops at
// the limits (a lie is a protocol error, counted as such).
TEST(RedisConnTest, AHostileServerCostsOnePipelineItsTimeoutAndNoMemory) {
  using Mode = testing::FakeRedis::Mode;
  const std::vector<std::pair<Mode, ErrorKind>> cases = {{Mode::kDrip, ErrorKind::kTimeout},
                                                         {Mode::kHugeBulk, ErrorKind::kProtocol},
                                                         {Mode::kHugeArray, ErrorKind::kProtocol},
                                                         {Mode::kSilent, ErrorKind::kTimeout}};
  for (const auto& [mode, want] : cases) {
    testing::FakeRedis fake(mode);
    RedisConn conn({"127.0.0.1", fake.port()}, milliseconds(250), {}, ReplyLimits{1u << 20, 1u << 16});
    const std::vector<Command> cmds = {{"EXISTS", "k"}, {"GET", "k"}};
    std::vector<Reply> r;
    ErrorKind kind;
    const long peak0 = PeakRssKb();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = conn.Pipeline(cmds, &r, &kind);
    const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(s.ok()) << static_cast<int>(mode);
    EXPECT_EQ(kind, want) << static_cast<int>(mode) << ": " << s.ToString();
    EXPECT_LT(ms, 250 + 250) << static_cast<int>(mode) << ": " << s.ToString();
    EXPECT_LT(PeakRssKb() - peak0, 16 * 1024) << static_cast<int>(mode);
    EXPECT_EQ(fake.hostile_replies(), 1);
    // Backing off: the next call fails at once, without a connect.
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_FALSE(conn.Pipeline(cmds, &r, &kind).ok());
    EXPECT_TRUE(conn.backed_off());
    EXPECT_LT(std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t1).count(), 20);
  }
}

#define TIERKV_SKIP_WITHOUT_TLS_REDIS(certs, redis)                                                    \
  do {                                                                                                 \
    if (!(certs).ok()) GTEST_SKIP() << "the openssl command cannot make a test CA: " << (certs).why(); \
    if (!(redis).started()) GTEST_SKIP() << "redis-server refuses TLS (built without it?): " << (redis).log(); \
  } while (0)

// rediss://: a round trip over TLS to a server verified with the given CA,
// the login (AUTH) over it, and a large value read in many TLS records.
TEST(RedisConnTest, TalksTlsToAServerVerifiedWithTheGivenCaAndLogsInOverIt) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::TlsCerts certs;
  testing::RedisServer redis(certs);
  TIERKV_SKIP_WITHOUT_TLS_REDIS(certs, redis);
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret-tls"), "OK\n");
  auto url = ResolveRedisUrl("rediss://:s3cret-tls@127.0.0.1:" + std::to_string(redis.port()));
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  RedisConn conn(url->nodes[0], milliseconds(2000), Login::Of(*url, {certs.ca()}));
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>(i);
  const std::string binary("a\0b\r\n\xff", 6);
  const std::vector<Command> cmds = {{"SET", "k1", binary}, {"GET", "k1"}, {"SET", "big", big},
                                     {"GET", "big"},        {"GET", "missing"}, {"INCR", "k1"}};
  std::vector<Reply> r;
  ErrorKind kind;
  Status s = conn.Pipeline(cmds, &r, &kind);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0].str, "OK");
  EXPECT_EQ(r[1].str, binary);
  EXPECT_EQ(r[3].str, big);
  EXPECT_EQ(r[4].type, Reply::Type::kNil);
  EXPECT_TRUE(r[5].is_error());
  EXPECT_EQ(redis.Cli("-a s3cret-tls --no-auth-warning STRLEN big"), std::to_string(big.size()) + "\n");

  // The wrong password over TLS: refused as on a plain port.
  RedisConn wrong(url->nodes[0], milliseconds(2000), Login{"", "n0t-it", 0, true, {certs.ca()}});
  s = wrong.Pipeline(cmds, &r, &kind);
  EXPECT_EQ(kind, ErrorKind::kAuth) << s.ToString();
  EXPECT_NE(s.message().find("WRONGPASS"), std::string::npos) << s.ToString();

  // The server killed: the connection is closed (or not connectable), then heals after a restart.
  redis.Kill();
  s = conn.Pipeline(cmds, &r, &kind);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(kind == ErrorKind::kClosed || kind == ErrorKind::kConnect) << ErrorKindName(kind) << " " << s.ToString();
  redis.Start();
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret-tls"), "OK\n");
  std::this_thread::sleep_for(milliseconds(2100));  // past the backoff
  s = conn.Pipeline(std::vector<Command>{{"PING"}}, &r, &kind);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

// A server whose certificate does not verify (the system's CAs, another CA,
// another host name) is a connect failure naming OpenSSL's reason; and a
// server that does not speak TLS is sent a TLS handshake, never the password.
TEST(RedisConnTest, ATlsServerThatDoesNotVerifyIsAConnectFailureAndGetsNoPassword) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::TlsCerts certs, other;
  testing::RedisServer redis(certs);
  TIERKV_SKIP_WITHOUT_TLS_REDIS(certs, redis);
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret-tls"), "OK\n");
  ASSERT_TRUE(other.ok()) << other.why();
  const std::string port = std::to_string(redis.port());
  const std::vector<Command> ping = {{"PING"}};
  std::vector<Reply> r;
  ErrorKind kind;
  struct Case {
    std::string url;
    TlsFiles files;
    std::string why;
  };
  for (const Case& c : {Case{"rediss://:s3cret-tls@127.0.0.1:" + port, {}, "certificate verify failed"},
                        Case{"rediss://:s3cret-tls@127.0.0.1:" + port, {other.ca()}, "certificate verify failed"},
                        Case{"rediss://:s3cret-tls@localhost:" + port, {certs.ca()}, "certificate verify failed"},
                        Case{"rediss://:s3cret-tls@127.0.0.1:" + port, {"/nonexistent/ca.pem"}, "/nonexistent/ca.pem"}}) {
    auto url = ResolveRedisUrl(c.url);
    ASSERT_TRUE(url.ok());
    RedisConn conn(url->nodes[0], milliseconds(2000), Login::Of(*url, c.files));
    const Status s = conn.Pipeline(ping, &r, &kind);
    EXPECT_FALSE(s.ok()) << c.url << " " << c.files.ca_file;
    EXPECT_EQ(kind, ErrorKind::kConnect) << s.ToString();
    EXPECT_NE(s.message().find(c.why), std::string::npos) << s.ToString();
    EXPECT_EQ(s.message().find("s3cret"), std::string::npos) << s.ToString();
  }

  // A plain TCP listener: what the client sends it is a TLS ClientHello
  // (record type 0x16), and no password, however it answers.
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string got;
  std::thread plain([&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) got.assign(buf, static_cast<size_t>(n));
    const std::string answer = "-ERR this is not TLS\r\n";
    (void)!::write(fd, answer.data(), answer.size());
    ::close(fd);
  });
  auto url = ResolveRedisUrl("rediss://:s3cret-tls@127.0.0.1:" + std::to_string(ntohs(a.sin_port)));
  RedisConn conn(url->nodes[0], milliseconds(2000), Login::Of(*url, {certs.ca()}));
  const Status s = conn.Pipeline(ping, &r, &kind);
  plain.join();
  ::close(lfd);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(kind, ErrorKind::kConnect) << s.ToString();
  EXPECT_NE(s.message().find("TLS handshake"), std::string::npos) << s.ToString();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(static_cast<unsigned char>(got[0]), 0x16);
  EXPECT_EQ(got.find("s3cret"), std::string::npos);
  EXPECT_EQ(got.find("AUTH"), std::string::npos);
}

// A TLS URL: the router's connections (every node's, for a cluster) go over
// TLS with the router's TLS files; without the CA they fail verification.
TEST(RouterTest, ATlsUrlUsesTlsOnEveryConnection) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::TlsCerts certs;
  testing::RedisServer redis(certs);
  TIERKV_SKIP_WITHOUT_TLS_REDIS(certs, redis);
  auto url = ResolveRedisUrl(redis.url());
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  Router router(*url, milliseconds(2000), {certs.ca()});
  std::vector<Reply> r;
  std::vector<ErrorKind> errors;
  router.Run(std::vector<Command>{{"SET", "k", "v"}, {"GET", "k"}}, &r, &errors);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0], ErrorKind::kNone);
  EXPECT_EQ(r[1].str, "v");
  Router unverified(*url, milliseconds(2000));
  std::vector<Failure> failures;
  unverified.Run(std::vector<Command>{{"GET", "k"}}, &r, &errors, &failures);
  EXPECT_EQ(errors[0], ErrorKind::kConnect);
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].why.find("certificate verify failed"), std::string::npos) << failures[0].why;
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

// Issue 34 (8): a cluster with a password: every node's connection logs in
// (the slot map's masters too, not only the seeds); without it, each
// command fails as kAuth with Redis's reason.
TEST(RouterTest, AClusterWithAPasswordLogsInOnEveryNode) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisCluster cluster;
  for (int n = 0; n < 3; ++n) ASSERT_EQ(cluster.node(n).Cli("CONFIG SET requirepass s3cret"), "OK\n") << n;
  const std::string seeds = cluster.url().substr(std::string("redis-cluster://").size());
  std::vector<Command> sets;
  for (int i = 0; i < 60; ++i) sets.push_back({"SET", "k{" + std::to_string(i) + "}", "v"});
  std::vector<Reply> r;
  std::vector<ErrorKind> e;
  std::vector<Failure> failures;

  auto url = ParseRedisUrl("redis-cluster://:s3cret@" + seeds);
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  Router router(*url, milliseconds(1000));
  router.Run(sets, &r, &e, &failures);
  for (size_t i = 0; i < sets.size(); ++i) {
    ASSERT_EQ(e[i], ErrorKind::kNone) << i;
    ASSERT_EQ(r[i].str, "OK") << i;
  }
  EXPECT_TRUE(failures.empty());
  EXPECT_EQ(router.Servers().size(), 3u);  // the slot map came through the login
  for (int n = 0; n < 3; ++n) {
    EXPECT_NE(cluster.node(n).Cli("-a s3cret --no-auth-warning DBSIZE"), "0\n") << n;
  }

  Router anon(*ParseRedisUrl(cluster.url()), milliseconds(1000));
  anon.Run(sets, &r, &e, &failures);
  for (size_t i = 0; i < sets.size(); ++i) ASSERT_EQ(e[i], ErrorKind::kAuth) << i;
  ASSERT_FALSE(failures.empty());
  EXPECT_NE(failures[0].why.find("NOAUTH"), std::string::npos) << failures[0].why;
}

}  // namespace
}  // namespace tierkv::remote
