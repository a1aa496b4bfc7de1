#include "store/format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "testing/status_matchers.h"

namespace tierkv::store {
namespace {

using ::tierkv::testing::StatusIs;

RecordHeader SampleHeader(uint32_t tokens, uint32_t row_bytes) {
  RecordHeader h;
  h.fingerprint = 0x1234567890abcdefULL;
  h.kind = RecordKind::kKeyValue;
  h.dtype = KvDtype::kF16;
  h.layer = 3;
  h.first_token = 128;
  h.row_bytes = row_bytes;
  h.prefix_hash = 42;
  h.parent_hash = 41;
  h.sequence = 7;
  for (uint32_t i = 0; i < tokens; ++i) h.tokens.push_back(static_cast<int32_t>(i * 7 + 1));
  return h;
}

std::string Payload(uint32_t tokens, uint32_t row_bytes) {
  std::string p(PayloadBytesFor(RecordKind::kKeyValue, tokens, row_bytes), '\0');
  std::mt19937 rng(5);
  for (char& c : p) c = static_cast<char>(rng());
  return p;
}

TEST(FormatTest, RoundTrip) {
  for (uint32_t tokens : {1u, 5u, 64u, 128u}) {
    RecordHeader h = SampleHeader(tokens, 512);
    std::string payload = Payload(tokens, 512), record;
    EncodeRecord(h, payload, &record);
    ASSERT_EQ(record.size() % kBlockSize, 0u);
    ASSERT_EQ(record.size(), kBlockSize * (1 + PagesFor(payload.size())));
    ASSERT_OK_AND_ASSIGN(RecordHeader d,
                         DecodeHeader(std::span<const char, kBlockSize>(record.data(), kBlockSize)));
    EXPECT_EQ(d.fingerprint, h.fingerprint);
    EXPECT_EQ(d.layer, 3);
    EXPECT_EQ(d.first_token, 128u);
    EXPECT_EQ(d.token_count, tokens);
    EXPECT_EQ(d.tokens, h.tokens);
    EXPECT_EQ(d.prefix_hash, 42u);
    EXPECT_EQ(d.parent_hash, 41u);
    EXPECT_EQ(d.sequence, 7u);
    EXPECT_EQ(d.payload_bytes, payload.size());
    for (uint32_t p = 0; p < d.page_checksums.size(); ++p) {
      EXPECT_TRUE(PageChecksumOk(d, p, {record.data() + kBlockSize * (1 + p), kBlockSize}));
    }
    EXPECT_EQ(0, std::memcmp(record.data() + kBlockSize, payload.data(), payload.size()));
  }
}

// Every single-bit flip anywhere in the header block is caught (the unused
// tail too: it is under the checksum).
TEST(FormatTest, EveryHeaderBitFlipIsCorruption) {
  RecordHeader h = SampleHeader(64, 512);
  std::string payload = Payload(64, 512), record;
  EncodeRecord(h, payload, &record);
  for (size_t byte = 0; byte < kBlockSize; ++byte) {
    for (int bit = 0; bit < 8; bit += 3) {
      std::string copy = record.substr(0, kBlockSize);
      copy[byte] = static_cast<char>(copy[byte] ^ (1 << bit));
      auto r = DecodeHeader(std::span<const char, kBlockSize>(copy.data(), kBlockSize));
      ASSERT_THAT(r, StatusIs(StatusCode::kCorruption)) << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(FormatTest, PayloadBitFlipFailsItsPageOnly) {
  RecordHeader h = SampleHeader(64, 512);
  std::string payload = Payload(64, 512), record;
  EncodeRecord(h, payload, &record);
  ASSERT_OK_AND_ASSIGN(RecordHeader d,
                       DecodeHeader(std::span<const char, kBlockSize>(record.data(), kBlockSize)));
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    size_t at = kBlockSize + rng() % payload.size();
    std::string copy = record;
    copy[at] = static_cast<char>(copy[at] ^ (1 << (rng() % 8)));
    uint32_t bad_page = static_cast<uint32_t>((at - kBlockSize) / kBlockSize);
    for (uint32_t p = 0; p < d.page_checksums.size(); ++p) {
      bool ok = PageChecksumOk(d, p, {copy.data() + kBlockSize * (1 + p), kBlockSize});
      ASSERT_EQ(ok, p != bad_page) << "trial " << trial << " page " << p;
    }
  }
}

TEST(FormatTest, GeometryLimitsNameTheProblem) {
  EXPECT_OK(CheckGeometry(RecordKind::kKeyValue, 128, 512));
  EXPECT_THAT(CheckGeometry(RecordKind::kKeyValue, 0, 512),
              StatusIs(StatusCode::kInvalidArgument, "token_count"));
  EXPECT_THAT(CheckGeometry(RecordKind::kKeyValue, 4, 0),
              StatusIs(StatusCode::kInvalidArgument, "row_bytes"));
  // 1024 tokens of ids alone fill the header block.
  EXPECT_THAT(CheckGeometry(RecordKind::kKeyValue, 1024, 512),
              StatusIs(StatusCode::kInvalidArgument, "use smaller chunks"));
}

// MaxRecordTokens is the boundary CheckGeometry draws.
TEST(FormatTest, MaxRecordTokensIsTheLargestGeometryThatFits) {
  for (uint32_t row : {64u, 512u, 4096u}) {
    for (RecordKind kind : {RecordKind::kKeyValue, RecordKind::kProbeKeys}) {
      const uint32_t most = MaxRecordTokens(kind, row);
      ASSERT_GT(most, 0u);
      EXPECT_OK(CheckGeometry(kind, most, row));
      EXPECT_FALSE(CheckGeometry(kind, most + 1, row).ok()) << row;
    }
  }
}

TEST(FormatTest, WrongVersionAndMagicAreCorruption) {
  RecordHeader h = SampleHeader(4, 64);
  std::string payload = Payload(4, 64), record;
  EncodeRecord(h, payload, &record);
  std::string zero(kBlockSize, '\0');
  EXPECT_THAT(DecodeHeader(std::span<const char, kBlockSize>(zero.data(), kBlockSize)),
              StatusIs(StatusCode::kCorruption, "magic"));
}

}  // namespace
}  // namespace tierkv::store
