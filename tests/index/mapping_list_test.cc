#include "index/mapping_list.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "testing/status_matchers.h"

namespace tierkv::index {
namespace {

using ::tierkv::testing::StatusIs;

TEST(MappingListTest, SlotsInvertTheOrderPerLayer) {
  std::mt19937 rng(3);
  std::vector<std::vector<uint32_t>> orders(3, std::vector<uint32_t>(200));
  for (auto& o : orders) {
    std::iota(o.begin(), o.end(), 0u);
    std::shuffle(o.begin(), o.end(), rng);
  }
  ASSERT_OK_AND_ASSIGN(MappingList m, MappingList::FromOrders(orders));
  EXPECT_EQ(m.layers(), 3);
  EXPECT_EQ(m.rows(), 200u);
  for (uint16_t l = 0; l < 3; ++l) {
    EXPECT_EQ(m.RowsOf(l), orders[l]);
    for (uint32_t slot = 0; slot < 200; ++slot) EXPECT_EQ(m.SlotOf(l, orders[l][slot]), slot);
    EXPECT_FALSE(m.IsIdentity(l));
  }
  EXPECT_EQ(m.MemoryBytes(), 3u * 200 * 2);  // 2 bytes per row and layer
}

TEST(MappingListTest, OrderByScoreIsDescendingAndStable) {
  const std::vector<float> s = {0.1f, 0.9f, 0.1f, 0.5f, 0.9f};
  EXPECT_EQ(MappingList::OrderByScore(s), (std::vector<uint32_t>{1, 4, 3, 0, 2}));
  // IMPRESS's Figure 13 example: t0 and t3 important in [t0 t1 t2 t3].
  ASSERT_OK_AND_ASSIGN(MappingList m,
                       MappingList::FromOrders({MappingList::OrderByScore(
                           std::vector<float>{1, 0, 0, 1})}));
  EXPECT_EQ(m.RowsOf(0), (std::vector<uint32_t>{0, 3, 1, 2}));  // s0' = [t0, t3, t1, t2]
  EXPECT_EQ(m.SlotOf(0, 3), 1u);
}

TEST(MappingListTest, RejectsWhatIsNotAPermutation) {
  EXPECT_THAT(MappingList::FromOrders({}).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(MappingList::FromOrders({{0, 1, 1}}).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(MappingList::FromOrders({{0, 3, 1}}).status(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(MappingList::FromOrders({{0, 1}, {0}}).status(), StatusIs(StatusCode::kInvalidArgument));
  std::vector<uint32_t> big(MappingList::kMaxRows + 1);
  std::iota(big.begin(), big.end(), 0u);
  EXPECT_THAT(MappingList::FromOrders({big}).status(), StatusIs(StatusCode::kInvalidArgument));
  big.pop_back();
  EXPECT_OK(MappingList::FromOrders({big}).status());
}

}  // namespace
}  // namespace tierkv::index
