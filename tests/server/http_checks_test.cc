#include "server/http_checks.h"

#include <gtest/gtest.h>

namespace tierkv::server {
namespace {

RequestHead Post(std::vector<std::string> cl, std::vector<std::string> te = {}) {
  RequestHead h;
  h.method = "POST";
  h.version = "HTTP/1.1";
  h.content_length = std::move(cl);
  h.transfer_encoding = std::move(te);
  h.host = "127.0.0.1:8080";
  return h;
}

int StatusOf(const std::variant<BodyFraming, HeadRefusal>& v) {
  return std::holds_alternative<HeadRefusal>(v) ? std::get<HeadRefusal>(v).status : 0;
}

TEST(HttpChecksTest, FramingIsRefusedBeforeTheBodyWhenItCannotBeTrusted) {
  EXPECT_EQ(StatusOf(CheckFraming(Post({"10"}), 100)), 0);
  EXPECT_EQ(std::get<BodyFraming>(CheckFraming(Post({"10"}), 100)).length, 10u);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"100"}), 100)), 0);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"101"}), 100)), 413);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"99999999999999999999999"}), 100)), 413);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"-1"}), 100)), 400);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"1e3"}), 100)), 400);
  EXPECT_EQ(StatusOf(CheckFraming(Post({""}), 100)), 400);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"5", "6"}), 100)), 400);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"5", "5"}), 100)), 0);
  EXPECT_EQ(StatusOf(CheckFraming(Post({}), 100)), 411);
  EXPECT_TRUE(std::get<BodyFraming>(CheckFraming(Post({}, {"chunked"}), 100)).chunked);
  EXPECT_TRUE(std::get<BodyFraming>(CheckFraming(Post({}, {" Chunked "}), 100)).chunked);
  EXPECT_EQ(StatusOf(CheckFraming(Post({"5"}, {"chunked"}), 100)), 400);
  EXPECT_EQ(StatusOf(CheckFraming(Post({}, {"gzip, chunked"}), 100)), 501);
  EXPECT_EQ(StatusOf(CheckFraming(Post({}, {"chunked", "chunked"}), 100)), 501);
  RequestHead get = Post({});
  get.method = "GET";
  EXPECT_EQ(StatusOf(CheckFraming(get, 100)), 0);
  get.content_length = {"0"};
  EXPECT_EQ(StatusOf(CheckFraming(get, 100)), 0);
  get.content_length = {"4"};
  EXPECT_EQ(StatusOf(CheckFraming(get, 100)), 400) << "a GET's body would be read as the next request";
  RequestHead old = Post({}, {"chunked"});
  old.version = "HTTP/1.0";
  EXPECT_EQ(StatusOf(CheckFraming(old, 100)), 400);
}

TEST(HttpChecksTest, HostNamesAndTheNamesAServerAnswersTo) {
  EXPECT_EQ(HostName("127.0.0.1:8080"), "127.0.0.1");
  EXPECT_EQ(HostName("LocalHost"), "localhost");
  EXPECT_EQ(HostName("[::1]:80"), "::1");
  EXPECT_EQ(HostName("[::1"), std::nullopt);
  EXPECT_EQ(HostName("a:b"), std::nullopt);
  EXPECT_EQ(HostName(""), std::nullopt);
  EXPECT_EQ(HostName("evil.example/x"), std::nullopt);
  const auto loop = AllowedHostNames("127.0.0.1", {});
  EXPECT_EQ(loop, (std::vector<std::string>{"127.0.0.1", "localhost", "127.0.0.1", "::1"}));
  EXPECT_TRUE(AllowedHostNames("0.0.0.0", {}).empty()) << "a wildcard address without --allowed-hosts: any";
  EXPECT_EQ(AllowedHostNames("0.0.0.0", {"api.internal"}),
            (std::vector<std::string>{"api.internal", "localhost", "127.0.0.1", "::1"}));
  EXPECT_TRUE(AllowedHostNames("10.0.0.5", {"*"}).empty());
  EXPECT_EQ(AllowedHostNames("::1", {}), (std::vector<std::string>{"::1", "localhost", "127.0.0.1", "::1"}));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.2"));
  EXPECT_TRUE(IsLoopbackHost("LOCALHOST"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.1.2.3"));
}

TEST(HttpChecksTest, HostOriginAndMediaType) {
  const auto allowed = AllowedHostNames("127.0.0.1", {});
  RequestHead h = Post({"2"});
  EXPECT_FALSE(CheckHostAndOrigin(h, allowed, 8080, "").has_value());
  h.host = "attacker.example:8080";
  EXPECT_EQ(CheckHostAndOrigin(h, allowed, 8080, "")->status, 403);
  h.host = std::nullopt;
  EXPECT_EQ(CheckHostAndOrigin(h, allowed, 8080, "")->status, 400);
  h.version = "HTTP/1.0";
  EXPECT_FALSE(CheckHostAndOrigin(h, allowed, 8080, "").has_value());
  h = Post({"2"});
  h.origin = "http://localhost:8080";
  EXPECT_FALSE(CheckHostAndOrigin(h, allowed, 8080, "").has_value()) << "same origin";
  h.origin = "http://localhost:3000";
  EXPECT_EQ(CheckHostAndOrigin(h, allowed, 8080, "")->status, 403);
  h.origin = "https://app.example";
  EXPECT_EQ(CheckHostAndOrigin(h, allowed, 8080, "")->status, 403);
  EXPECT_FALSE(CheckHostAndOrigin(h, allowed, 8080, "https://app.example").has_value());
  h.origin = "null";
  EXPECT_EQ(CheckHostAndOrigin(h, allowed, 8080, "https://app.example")->status, 403);
  h.content_type = "application/json";
  EXPECT_FALSE(CheckJsonBody(h).has_value());
  h.content_type = "Application/JSON; charset=utf-8";
  EXPECT_FALSE(CheckJsonBody(h).has_value());
  for (const char* t : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                        "application/jsonx"}) {
    h.content_type = t;
    EXPECT_EQ(CheckJsonBody(h)->status, 415) << t;
  }
  h.content_type = std::nullopt;
  EXPECT_EQ(CheckJsonBody(h)->status, 415);
}

}  // namespace
}  // namespace tierkv::server
