#include "store/io_model.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "store/format.h"
#include "store/io_backend.h"
#include "tierkv/elapsed.h"

namespace tierkv::store {
namespace {

constexpr const char* kMagic = "tierkv-io-model";
constexpr int kVersion = 1;
constexpr size_t kSmall = kBlockSize;    // a scattered page read
constexpr size_t kLarge = 128 << 10;     // a run of pages
constexpr int kSmallReads = 512, kLargeReads = 64;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per read of `len` bytes at random aligned offsets of the scratch
// file, `n` of them in one batch (kept queue-deep by the backend).
Result<double> TimeBatch(IoBackend& io, const RandomAccessFile& file, uint64_t file_bytes, size_t len,
                         int n, std::mt19937_64& rng) {
  AlignedBuffer buf = AllocateAligned(len * static_cast<size_t>(n));
  std::vector<ReadOp> ops(static_cast<size_t>(n));
  const uint64_t slots = (file_bytes - len) / kBlockSize + 1;
  for (int i = 0; i < n; ++i) {
    ReadOp& op = ops[static_cast<size_t>(i)];
    op.file = &file;
    op.offset = rng() % slots * kBlockSize;
    op.length = len;
    op.buf = buf.get() + static_cast<size_t>(i) * len;
  }
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(io.Read(ops));
  const double s = SecondsSince(t0);
  for (const ReadOp& op : ops) {
    RETURN_IF_ERROR(op.status);
    if (op.done != len) return Status::IOError("io calibration: short read of the scratch file");
  }
  return s / n;
}

Status WriteScratch(FileSystem* fs, const std::string& path, uint64_t bytes) {
  ASSIGN_OR_RETURN(auto f, fs->NewWritableFile(path));
  std::string piece(1 << 20, '\0');
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < piece.size(); i += 8) {
    const uint64_t x = rng();
    std::copy_n(reinterpret_cast<const char*>(&x), 8, piece.data() + i);
  }
  for (uint64_t done = 0; done < bytes; done += piece.size()) RETURN_IF_ERROR(f->Append(piece));
  RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

Result<IoCostModel> Measure(const CalibrateOptions& o, IoBackend& io, const std::string& path,
                            uint64_t bytes) {
  FileOptions fo;
  fo.direct_io = true;
  fo.no_follow = true;
  ASSIGN_OR_RETURN(auto file, FileSystem::Default()->NewRandomAccessFile(path, fo));
  std::mt19937_64 rng(7);
  std::vector<double> small, large;
  for (int r = 0; r < std::max(1, o.rounds); ++r) {
    ASSIGN_OR_RETURN(double s, TimeBatch(io, *file, bytes, kSmall, kSmallReads, rng));
    ASSIGN_OR_RETURN(double l, TimeBatch(io, *file, bytes, kLarge, kLargeReads, rng));
    small.push_back(s);
    large.push_back(l);
  }
  const double a = Median(small), b = Median(large);
  IoCostModel m;
  // Two reads' costs, two unknowns: a = c + 4 KiB / B, b = c + 128 KiB / B.
  // A disk that reads 128 KiB no slower than 4 KiB (a cache) has no
  // measurable bandwidth limit here: every byte is then taken as free.
  const double bw = b > a * 1.01 ? static_cast<double>(kLarge - kSmall) / (b - a) : 1e12;
  m.mb_per_s = bw / 1e6;
  m.per_io_us = std::max(0.0, a - kSmall / bw) * 1e6;
  m.source = "measured";
  return m;
}

}  // namespace

std::string IoMachine::ToString() const {
  return "host " + host + ", device " + device + ", " + backend + " at depth " + std::to_string(queue_depth);
}

double IoCostModel::Seconds(uint64_t reads, uint64_t bytes) const {
  return reads * per_io_us * 1e-6 + static_cast<double>(bytes) / (mb_per_s * 1e6);
}

uint32_t IoCostModel::MergeGapBlocks() const {
  const double blocks = per_io_us * mb_per_s / kBlockSize;  // us x MB/s = bytes
  return static_cast<uint32_t>(std::clamp(std::floor(blocks), 0.0, 1e6));
}

Result<IoMachine> MachineOf(const std::string& dir, const IoBackend& io) {
  IoMachine m;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return Status::IOError("gethostname failed");
  m.host = host;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::IOError("io model: cannot stat " + dir);
  m.device = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  m.backend = std::string(io.name());
  m.queue_depth = io.queue_depth();
  return m;
}

std::string IoModelToText(const IoCostModel& m) {
  char nums[128];
  std::snprintf(nums, sizeof nums, "per_io_us %.3f\nmb_per_s %.1f\n", m.per_io_us, m.mb_per_s);
  std::ostringstream s;
  s << kMagic << " " << kVersion << "\n"
    << "host " << m.machine.host << "\n"
    << "device " << m.machine.device << "\n"
    << "backend " << m.machine.backend << "\n"
    << "queue_depth " << m.machine.queue_depth << "\n"
    << nums;
  return s.str();
}

Result<IoCostModel> ParseIoModel(const std::string& text) {
  std::istringstream in(text);
  std::string magic;
  int version = 0;
  if (!(in >> magic >> version) || magic != kMagic) {
    return Status::Corruption("io model: not an IO-MODEL file (first line)");
  }
  if (version != kVersion) return Status::Corruption("io model: version " + std::to_string(version));
  IoCostModel m;
  auto field = [&](const char* name, auto* out) -> Status {
    std::string key;
    if (!(in >> key) || key != name || !(in >> *out)) {
      return Status::Corruption(std::string("io model: field ") + name + " missing or malformed");
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(field("host", &m.machine.host));
  RETURN_IF_ERROR(field("device", &m.machine.device));
  RETURN_IF_ERROR(field("backend", &m.machine.backend));
  RETURN_IF_ERROR(field("queue_depth", &m.machine.queue_depth));
  RETURN_IF_ERROR(field("per_io_us", &m.per_io_us));
  RETURN_IF_ERROR(field("mb_per_s", &m.mb_per_s));
  if (!(m.per_io_us >= 0 && m.per_io_us < 1e6)) return Status::Corruption("io model: field per_io_us out of range");
  if (!(m.mb_per_s > 0 && m.mb_per_s <= 1e6)) return Status::Corruption("io model: field mb_per_s out of range");
  m.source = "saved";
  return m;
}

Result<IoCostModel> LoadSavedIoModel(const std::string& dir, const IoMachine& here) {
  FileSystem* fs = FileSystem::Default();
  const std::string path = dir + "/" + kIoModelFile;
  if (!fs->FileExists(path)) return Status::NotFound("no " + path);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(fs, path));
  ASSIGN_OR_RETURN(IoCostModel m, ParseIoModel(text));
  if (!(m.machine == here)) {
    return Status::NotFound(path + " was measured on " + m.machine.ToString() + ", not " +
                            here.ToString());
  }
  return m;
}

Status SaveIoModel(const std::string& dir, const IoCostModel& m) {
  return WriteFileAtomically(FileSystem::Default(), dir + "/" + kIoModelFile, IoModelToText(m));
}

Result<IoCostModel> CalibrateIo(const std::string& dir, IoBackend& io, const CalibrateOptions& o) {
  ASSIGN_OR_RETURN(IoMachine machine, MachineOf(dir, io));
  if (o.progress) o.progress("measuring disk reads in " + dir + " (" + machine.ToString() + ")");
  FileSystem* fs = FileSystem::Default();
  const std::string path = dir + "/" + kIoScratchFile;
  const uint64_t bytes = std::max<uint64_t>(1, o.scratch_mib) << 20;
  Status written = WriteScratch(fs, path, bytes);
  Result<IoCostModel> m = written.ok() ? Measure(o, io, path, bytes) : Result<IoCostModel>(written);
  Status removed = fs->DeleteFile(path);
  RETURN_IF_ERROR(m.status().WithContext("io calibration in " + dir));
  RETURN_IF_ERROR(removed);
  m->machine = machine;
  return m;
}

}  // namespace tierkv::store
