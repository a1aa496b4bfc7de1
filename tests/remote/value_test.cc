// What a remote value is (src/remote/value.h): the two kinds round-trip to
// token order, an ordered value's header names a permutation of the chunk,
// and the ranges a reader of the important part fetches hold exactly the
// first rows of K and of V.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "remote/value.h"
#include "testing/status_matchers.h"

namespace tierkv::remote {
namespace {

constexpr uint32_t kC = 64, kRb = 512;  // the default model's geometry
constexpr uint64_t kFp = 0x1234;

struct Chunk {
  std::vector<int32_t> ids;
  std::string payload;  // K then V, token order; row r's bytes all equal r (K) or r + 100 (V)
  store::RecordHeader h;
  ValueIdentity id;
};

Chunk MakeChunk() {
  Chunk c;
  c.ids.resize(kC);
  std::iota(c.ids.begin(), c.ids.end(), 500);
  c.payload.resize(2 * kC * kRb);
  for (uint32_t r = 0; r < kC; ++r) {
    std::fill_n(c.payload.data() + r * kRb, kRb, static_cast<char>(r));
    std::fill_n(c.payload.data() + (kC + r) * kRb, kRb, static_cast<char>(r + 100));
  }
  c.h.fingerprint = kFp;
  c.h.dtype = store::KvDtype::kF16;
  c.h.layer = 2;
  c.h.first_token = 128;
  c.h.token_count = kC;
  c.h.row_bytes = kRb;
  c.h.prefix_hash = 77;
  c.h.parent_hash = 66;
  c.h.tokens = c.ids;
  c.id = ValueIdentity{2, 77, 128, kC, c.ids};
  return c;
}

std::vector<uint16_t> Reversed() {
  std::vector<uint16_t> o(kC);
  for (uint32_t i = 0; i < kC; ++i) o[i] = static_cast<uint16_t>(kC - 1 - i);
  return o;
}

const store::RecordChecker kCheck(kFp, kRb, store::KvDtype::kF16, kC);

TEST(RemoteValueTest, BothKindsComeBackInTokenOrder) {
  const Chunk c = MakeChunk();
  for (const bool ordered : {false, true}) {
    const std::vector<uint16_t> order = ordered ? Reversed() : std::vector<uint16_t>{};
    std::string v;
    EncodeValue(c.h, c.payload, order, &v);
    ASSERT_EQ(v.size(), store::kBlockSize + c.payload.size());
    if (ordered) {
      EXPECT_EQ(v[store::kBlockSize], static_cast<char>(kC - 1));  // the first row ranked
    }
    ASSERT_OK(TakeWholeValue(kCheck, c.id, &v));
    EXPECT_EQ(v.substr(store::kBlockSize), c.payload) << (ordered ? "ordered" : "token order");
  }
}

TEST(RemoteValueTest, AnOrderedValueMustNameAPermutationOfItsChunk) {
  Chunk c = MakeChunk();
  std::string v;
  EncodeValue(c.h, c.payload, Reversed(), &v);
  ASSERT_OK_AND_ASSIGN(store::RecordHeader h, CheckOrderedHeader(kCheck, c.id, std::string_view(v).substr(0, store::kBlockSize)));
  EXPECT_EQ(h.tokens[0], 128 + 63);
  // A repeated row (encoded with a valid checksum: the header is honest
  // about a bad order).
  std::vector<uint16_t> twice = Reversed();
  twice[1] = twice[0];
  EncodeValue(c.h, c.payload, twice, &v);
  EXPECT_EQ(CheckOrderedHeader(kCheck, c.id, std::string_view(v).substr(0, store::kBlockSize)).status().code(),
            StatusCode::kCorruption);
  EXPECT_EQ(TakeWholeValue(kCheck, c.id, &v).code(), StatusCode::kCorruption);
  // A value in token order is no ordered one; one of another chunk is damage.
  EncodeValue(c.h, c.payload, {}, &v);
  EXPECT_EQ(CheckOrderedHeader(kCheck, c.id, std::string_view(v).substr(0, store::kBlockSize)).status().code(),
            StatusCode::kNotFound);
  ValueIdentity other = c.id;
  other.prefix_hash = 78;
  EXPECT_EQ(TakeWholeValue(kCheck, other, &v).code(), StatusCode::kCorruption);
  std::string shorter = v.substr(0, v.size() - store::kBlockSize);
  EXPECT_EQ(TakeWholeValue(kCheck, c.id, &shorter).code(), StatusCode::kCorruption);
  // Another token under the same hash (a collision) is refused too.
  std::vector<int32_t> ids = c.ids;
  ids[5] += 1;
  ValueIdentity collided = c.id;
  collided.token_ids = ids;
  EXPECT_EQ(TakeWholeValue(kCheck, collided, &v).code(), StatusCode::kCorruption);
}

TEST(RemoteValueTest, ImportantRangesHoldTheFirstRowsOfKAndV) {
  // 16 rows of 512 bytes: 2 pages of K (right after the header), 2 of V.
  std::vector<ByteRange> r = ImportantRanges(16, kC, kRb);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].first, 0u);
  EXPECT_EQ(r[0].last, 3 * store::kBlockSize - 1);
  EXPECT_EQ(r[1].first_page, 8u);
  EXPECT_EQ(r[1].first, 9 * store::kBlockSize);
  EXPECT_EQ(r[1].last, 11 * store::kBlockSize - 1);
  // Every row: one range, the whole value.
  r = ImportantRanges(kC, kC, kRb);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].last, 17 * store::kBlockSize - 1);
  // A row not a page's multiple (3 rows of 1000 bytes): K's pages end where V's begin.
  r = ImportantRanges(3, 8, 1000);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].last, (1 + 3) * store::kBlockSize - 1);  // V rows [8000, 11000) end in page 2
}

TEST(RemoteValueTest, AnOrderInUnitsKeepsEachUnitsRowsTogether) {
  // 8 rows, units of 4: ranks put rows 5, 1, 6, 7 first; unit 1 (rows 4-7)
  // scores 8 + 6 + 5 + ... above unit 0.
  const std::vector<uint16_t> order = {5, 1, 6, 7, 0, 2, 4, 3};
  EXPECT_EQ(UnitOrder(order, 4), (std::vector<uint16_t>{4, 5, 6, 7, 0, 1, 2, 3}));
  EXPECT_EQ(UnitOrder(order, 1), order);
  // A last unit shorter than the rest (7 rows, units of 4).
  const std::vector<uint16_t> seven = {6, 5, 4, 0, 1, 2, 3};
  EXPECT_EQ(UnitOrder(seven, 4), (std::vector<uint16_t>{4, 5, 6, 0, 1, 2, 3}));
}

}  // namespace
}  // namespace tierkv::remote
