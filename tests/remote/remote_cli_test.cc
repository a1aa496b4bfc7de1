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

RunOutput TierkvRun(const std::string& dir, const std::string& args) {
  RunOutput r;
  const std::string err = dir + "/stderr";
  r.code = testing::Shell(std::string(TIERKV_BINARY) + " run " + args + " 2>" + err, &r.text);
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

TEST(RemoteCliTest, ABadRemoteIsRefusedNamingThePart) {
  std::string out;
  const int rc = testing::Shell(std::string(TIERKV_BINARY) +
                                    " run --prompt x --cache-dir /tmp/x --remote redis://host:99999 2>&1",
                                &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("port '99999'"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(testing::Shell(std::string(TIERKV_BINARY) + " serve --remote memcached://h:1 2>&1", &out), 0);
  EXPECT_NE(out.find("unknown scheme"), std::string::npos) << out;
}

}  // namespace
}  // namespace tierkv
