// gtest matchers for Status and Result: EXPECT_THAT(s, IsOk());
// EXPECT_THAT(r, StatusIs(StatusCode::kCorruption)).
#pragma once

#include <gmock/gmock.h>

#include "tierkv/status.h"

namespace tierkv::testing {

inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
Status GetStatus(const Result<T>& r) {
  return r.status();
}

MATCHER(IsOk, "is OK") {
  const Status s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + std::string(StatusCodeName(code))) {
  const Status s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, substring,
           "has status code " + std::string(StatusCodeName(code)) + " and a message containing " +
               ::testing::PrintToString(substring)) {
  const Status s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code && s.message().find(substring) != std::string::npos;
}

}  // namespace tierkv::testing

#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                       \
  ASSERT_OK_AND_ASSIGN_IMPL_(TIERKV_CONCAT_(assert_result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)      \
  auto tmp = (expr);                                     \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();      \
  lhs = std::move(tmp).value()

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::tierkv::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::tierkv::testing::IsOk())
