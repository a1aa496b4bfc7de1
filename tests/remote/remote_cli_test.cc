// Two tierkv processes with their own cache directories and one Redis: the
// second is served the prefix the first computed, from the remote tier,
// and continues it the same; a bad --remote is refused naming the part.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "testing/redis_server.h"
#include "testing/shared.h"
#include "testing/shell.h"

namespace tierkv {
namespace {

// stdout (the text) and stderr (--stats) of one `tierkv run`.
struct RunOutput {
  int code = 0;
  std::string text, stats;
};

// `env`: assignments put before the command ("NAME=value ").
RunOutput TierkvRun(const std::string& dir, const std::string& args, const std::string& env = "") {
  RunOutput r;
  const std::string err = dir + "/stderr";
  r.code = testing::Shell(env + std::string(TIERKV_BINARY) + " run " + args + " 2>" + err, &r.text);
  std::ifstream in(err);
  std::stringstream s;
  s << in.rdbuf();
  r.stats = s.str();
  return r;
}

TEST(RemoteCliTest, ASecondProcessIsServedTheFirstOnesPrefixFromRedis) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  const std::string a = testing::MakeTempDir("remote_a"), b = testing::MakeTempDir("remote_b");
  // A prompt of several chunks: the model card's first 1500 characters.
  std::string card = std::string(TIERKV_DEFAULT_MODEL);
  card = card.substr(0, card.rfind('/')) + "/README.md";
  const std::string prompt = "\"$(head -c 1500 " + card + " | tr -d '\\\"$`')\"";
  const std::string common = " --prompt " + prompt + " --max-tokens 12 --temperature 0 --stats --remote " +
                             redis.url() + " --remote-admit always";
  const RunOutput first = TierkvRun(a, "--cache-dir " + a + "/cache" + common);
  ASSERT_EQ(first.code, 0) << first.stats;
  EXPECT_NE(first.stats.find("0 errors"), std::string::npos) << first.stats;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.stats, m, std::regex("remote: (\\d+) chunks written"))) << first.stats;
  const int written = std::stoi(m[1]);
  EXPECT_GE(written, 4);

  // inspect sees them there, under the first directory's model.
  std::string inv;
  ASSERT_EQ(testing::Shell(std::string(TIERKV_BINARY) + " inspect --quick --cache-dir " + a + "/cache --remote " +
                               redis.url() + " 2>&1",
                           &inv),
            0)
      << inv;
  EXPECT_NE(inv.find("this model: " + std::to_string(written) + " chunks, " + std::to_string(written * 8) +
                     " chunk layers"),
            std::string::npos)
      << inv;

  const RunOutput second = TierkvRun(b, "--cache-dir " + b + "/cache" + common);
  ASSERT_EQ(second.code, 0) << second.stats;
  ASSERT_TRUE(std::regex_search(second.stats, m, std::regex("remote: (\\d+) chunks whole, 0 in part \\((\\d+) bytes\\) fetched")))
      << second.stats;
  EXPECT_EQ(std::stoi(m[1]), written);  // every whole chunk of the prompt
  ASSERT_TRUE(std::regex_search(second.stats, m, std::regex("(\\d+) of (\\d+) prompt tokens reused")));
  EXPECT_EQ(std::stoi(m[1]), written * 64);
  EXPECT_EQ(second.text, first.text);  // greedy: the same continuation
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

// Issue 34 (8): a Redis with a password, through the command line: the
// password in the URL or in $TIERKV_REMOTE_PASSWORD; a wrong or missing
// one is a miss (exit 0) with Redis's reason in the log, never the password.
TEST(RemoteCliTest, APasswordInTheUrlOrTheEnvironmentLogsInAndAWrongOneIsAMissSayingWhy) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::RedisServer redis;
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret-pw"), "OK\n");
  const std::string hp = "127.0.0.1:" + std::to_string(redis.port());
  const std::string a = testing::MakeTempDir("remote_pw_a"), b = testing::MakeTempDir("remote_pw_b"),
                    c = testing::MakeTempDir("remote_pw_c"), d = testing::MakeTempDir("remote_pw_d");
  std::string card = std::string(TIERKV_DEFAULT_MODEL);
  card = card.substr(0, card.rfind('/')) + "/README.md";
  const std::string prompt = "\"$(head -c 1500 " + card + " | tr -d '\\\"$`')\"";
  const std::string common = " --prompt " + prompt + " --max-tokens 4 --temperature 0 --stats --remote-admit always --remote ";
  const std::string clean = "env -u TIERKV_REMOTE_PASSWORD ";

  const RunOutput first = TierkvRun(a, "--cache-dir " + a + "/cache" + common + "redis://:s3cret-pw@" + hp, clean);
  ASSERT_EQ(first.code, 0) << first.stats;
  EXPECT_NE(first.stats.find("0 errors"), std::string::npos) << first.stats;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.stats, m, std::regex("remote: (\\d+) chunks written"))) << first.stats;
  const int written = std::stoi(m[1]);
  EXPECT_GE(written, 4);
  EXPECT_EQ(redis.Cli("-a s3cret-pw --no-auth-warning DBSIZE"), std::to_string(written * 8) + "\n");

  // The environment's password, the URL without one: logged in, no error
  // (that a second process is served the first one's chunks is
  // ASecondProcessIsServedTheFirstOnesPrefixFromRedis's to show).
  const RunOutput second =
      TierkvRun(b, "--cache-dir " + b + "/cache" + common + "redis://" + hp, "TIERKV_REMOTE_PASSWORD=s3cret-pw ");
  ASSERT_EQ(second.code, 0) << second.stats;
  EXPECT_NE(second.stats.find(" 0 errors"), std::string::npos) << second.stats;
  EXPECT_EQ(second.stats.find("NOAUTH"), std::string::npos) << second.stats;
  EXPECT_EQ(second.text, first.text);

  // A wrong password: a miss, the same text, WRONGPASS in the log, the URL masked.
  const RunOutput wrong = TierkvRun(c, "--cache-dir " + c + "/cache" + common + "redis://:n0t-it@" + hp, clean);
  ASSERT_EQ(wrong.code, 0) << wrong.stats;
  ASSERT_TRUE(std::regex_search(wrong.stats, m, std::regex("remote: (\\d+) chunks whole"))) << wrong.stats;
  EXPECT_EQ(std::stoi(m[1]), 0);
  EXPECT_EQ(wrong.text, first.text);
  EXPECT_NE(wrong.stats.find("WRONGPASS"), std::string::npos) << wrong.stats;
  EXPECT_NE(wrong.stats.find("redis://***@" + hp), std::string::npos) << wrong.stats;
  EXPECT_EQ(wrong.stats.find("n0t-it"), std::string::npos) << wrong.stats;

  // None: NOAUTH, and what to do about it.
  const RunOutput none = TierkvRun(d, "--cache-dir " + d + "/cache" + common + "redis://" + hp, clean);
  ASSERT_EQ(none.code, 0) << none.stats;
  EXPECT_NE(none.stats.find("NOAUTH"), std::string::npos) << none.stats;
  EXPECT_NE(none.stats.find("TIERKV_REMOTE_PASSWORD"), std::string::npos) << none.stats;
  for (const RunOutput* r : {&first, &second, &wrong, &none}) {
    EXPECT_EQ(r->stats.find("s3cret"), std::string::npos) << r->stats;
  }
  for (const std::string& dir : {a, b, c, d}) std::filesystem::remove_all(dir);
}

TEST(RemoteCliTest, ABadRemoteIsRefusedNamingThePart) {
  // `args` refused (a non-zero exit) with `part` named and no password echoed.
  const auto refused = [](const std::string& args, const std::string& part) {
    std::string out;
    EXPECT_NE(testing::Shell(std::string(TIERKV_BINARY) + " " + args + " 2>&1", &out), 0) << args;
    EXPECT_NE(out.find(part), std::string::npos) << out;
    EXPECT_EQ(out.find("s3cret"), std::string::npos) << out;
  };
  const std::string run = "run --prompt x --cache-dir /tmp/x --remote ";
  refused(run + "redis://host:99999", "port '99999'");
  refused("serve --remote memcached://h:1", "unknown scheme");
  // A bad URL with a password: refused naming the part, the password not echoed.
  refused(run + "redis://:s3cret@host:99999", "port '99999'");
  refused(run + "redis-cluster://:s3cret@h:1/3", "database 0 only");
  // A TLS file that does not exist: refused naming the flag.
  refused(run + "rediss://:s3cret@h:6380 --remote-tls-ca /nonexistent/ca.pem", "--remote-tls-ca");
}

// rediss://: a process reaches a TLS-only Redis (with a password) through
// --remote-tls-ca; without it (the system's CAs do not know the test CA)
// the server fails verification: a miss, the same text, the reason logged.
TEST(RemoteCliTest, ATlsRedisIsReachedWithItsCaAndWithoutItIsAMissSayingWhy) {
  TIERKV_SKIP_WITHOUT_REDIS();
  testing::TlsCerts certs;
  if (!certs.ok()) GTEST_SKIP() << "the openssl command cannot make a test CA: " << certs.why();
  testing::RedisServer redis(certs);
  if (!redis.started()) GTEST_SKIP() << "redis-server refuses TLS (built without it?): " << redis.log();
  ASSERT_EQ(redis.Cli("CONFIG SET requirepass s3cret-tls"), "OK\n");
  const std::string a = testing::MakeTempDir("remote_tls_a"), b = testing::MakeTempDir("remote_tls_b");
  std::string card = std::string(TIERKV_DEFAULT_MODEL);
  card = card.substr(0, card.rfind('/')) + "/README.md";
  const std::string prompt = "\"$(head -c 1500 " + card + " | tr -d '\\\"$`')\"";
  const std::string common = " --prompt " + prompt + " --max-tokens 4 --temperature 0 --stats --remote-admit always" +
                             " --remote rediss://127.0.0.1:" + std::to_string(redis.port());
  const std::string env = "TIERKV_REMOTE_PASSWORD=s3cret-tls ";

  const RunOutput first = TierkvRun(a, "--cache-dir " + a + "/cache" + common + " --remote-tls-ca " + certs.ca(), env);
  ASSERT_EQ(first.code, 0) << first.stats;
  EXPECT_NE(first.stats.find(" 0 errors"), std::string::npos) << first.stats;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(first.stats, m, std::regex("remote: (\\d+) chunks written"))) << first.stats;
  const int written = std::stoi(m[1]);
  EXPECT_GE(written, 4);
  EXPECT_EQ(redis.Cli("-a s3cret-tls --no-auth-warning DBSIZE"), std::to_string(written * 8) + "\n");

  const RunOutput unverified = TierkvRun(b, "--cache-dir " + b + "/cache" + common, env);
  ASSERT_EQ(unverified.code, 0) << unverified.stats;
  ASSERT_TRUE(std::regex_search(unverified.stats, m, std::regex("remote: (\\d+) chunks whole"))) << unverified.stats;
  EXPECT_EQ(std::stoi(m[1]), 0);
  EXPECT_EQ(unverified.text, first.text);
  EXPECT_NE(unverified.stats.find("certificate verify failed"), std::string::npos) << unverified.stats;
  EXPECT_NE(unverified.stats.find("(connect"), std::string::npos) << unverified.stats;
  for (const RunOutput* r : {&first, &unverified}) EXPECT_EQ(r->stats.find("s3cret"), std::string::npos) << r->stats;
  std::filesystem::remove_all(a);
  std::filesystem::remove_all(b);
}

}  // namespace
}  // namespace tierkv
