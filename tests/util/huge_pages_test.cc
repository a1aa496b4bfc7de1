// HugePageBuffer: whole 2 MiB pages, aligned, zeroed and writable, whatever
// the kernel's transparent-huge-page setting (huge pages are advice only).
#include "util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "testing/status_matchers.h"

namespace tierkv {
namespace {

using testing::IsOk;
using testing::StatusIs;

// Whether the mapping holding p carries the kernel's huge-page advice
// ("hg" among its VmFlags in /proc/self/smaps).
bool AdvisedHuge(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.find(" hg") != std::string::npos;
    }
  }
  return false;
}

TEST(HugePageBufferTest, WholePagesAlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{1}, HugePageBuffer::kPageBytes, 5 * HugePageBuffer::kPageBytes + 3}) {
    auto b = HugePageBuffer::Allocate(bytes);
    ASSERT_THAT(b.status(), IsOk());
    const HugePageBuffer& buf = **b;
    EXPECT_GE(buf.size(), bytes);
    EXPECT_EQ(buf.size() % HugePageBuffer::kPageBytes, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % HugePageBuffer::kPageBytes, 0u);
    EXPECT_EQ(buf.data()[0], 0);
    EXPECT_EQ(buf.data()[buf.size() - 1], 0);
    std::memset(buf.data(), 0xab, buf.size());
    EXPECT_EQ(buf.data()[buf.size() - 1], 0xab);
    if (HugePageBuffer::Available()) EXPECT_TRUE(AdvisedHuge(buf.data())) << "no MADV_HUGEPAGE on the buffer";
  }
}

TEST(HugePageBufferTest, RefusesWhatCannotBeMapped) {
  EXPECT_THAT(HugePageBuffer::Allocate(SIZE_MAX - 5).status(), StatusIs(StatusCode::kInvalidArgument, "bytes"));
  // Past the address space of any x86-64 process: the kernel refuses it.
  EXPECT_THAT(HugePageBuffer::Allocate(size_t{1} << 62).status(), StatusIs(StatusCode::kResourceExhausted, "mmap"));
}

}  // namespace
}  // namespace tierkv
