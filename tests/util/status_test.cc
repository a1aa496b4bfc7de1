#include "tierkv/status.h"

#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::StatusIs;

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(StatusTest, CodesAndMessages) {
  EXPECT_THAT(Status::Ok(), IsOk());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::Corruption("bad checksum");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_FALSE(s.IsIOError());
  EXPECT_EQ(s.ToString(), "Corruption: bad checksum");
  EXPECT_EQ(s.WithContext("segment 3").ToString(), "Corruption: segment 3: bad checksum");
  EXPECT_THAT(s, StatusIs(StatusCode::kCorruption, "checksum"));
}

TEST(StatusTest, ResultAndMacros) {
  EXPECT_THAT(Quarter(8), IsOk());
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_THAT(Quarter(6), StatusIs(StatusCode::kInvalidArgument, "odd: 3"));
  EXPECT_THAT(CheckEven(3), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckEven(4), IsOk());
}

TEST(StatusTest, ResultFromOkStatusIsAnError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace tierkv
