#include "model/weight_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include <sys/mman.h>
#include <unistd.h>

#include "kernels/matmul.h"
#include "model/crossover.h"
#include "model/quant_dot.h"
#include "model/quant_pack.h"
#include "util/thread_pool.h"

namespace tierkv::model {
namespace {

// A tile of dequantized rows is at most this big. Measured on a 476M-weight
// model (docs/models.md): with 512 KiB tiles (L2-sized) F16 16-token
// prefills took 2.43x fp32's time (sgemm's cost per call on narrow tiles),
// and at 512 tokens 256 KiB-1 MiB tiles were slower than 4 MiB in one run.
constexpr size_t kTileBytes = 4 * 1024 * 1024;

int TileRows(int cols) {
  const size_t rows = kTileBytes / (static_cast<size_t>(std::max(cols, 1)) * sizeof(float));
  return static_cast<int>(std::max<size_t>(16, rows / 16 * 16));
}

}  // namespace

WeightMatrix WeightMatrix::Floats(std::vector<float> values, int rows, int cols) {
  WeightMatrix w;
  w.rows_ = rows;
  w.cols_ = cols;
  w.owned_ = std::move(values);
  if (rows > 0) {
    w.parts_.push_back(Part{GgmlType::kF32, reinterpret_cast<const uint8_t*>(w.owned_.data()), 0, rows,
                            static_cast<size_t>(cols) * sizeof(float)});
  }
  return w;
}

Status WeightMatrix::AppendInPlace(GgmlType t, const uint8_t* data, int rows, int cols) {
  if (!owned_.empty()) return Status::InvalidArgument("AppendInPlace on a matrix of owned fp32 rows");
  if (rows_ > 0 && cols != cols_) {
    return Status::InvalidArgument("rows of " + std::to_string(cols) + " columns appended to a matrix of " +
                                   std::to_string(cols_));
  }
  ASSIGN_OR_RETURN(GgmlTypeInfo info, TypeInfo(static_cast<uint32_t>(t)));
  if (cols <= 0 || cols % info.block_elems != 0) {
    return Status::InvalidArgument("rows of " + std::to_string(cols) + " columns are not whole " +
                                   std::string(info.name) + " blocks of " + std::to_string(info.block_elems));
  }
  cols_ = cols;
  if (rows > 0) parts_.push_back(Part{t, data, rows_, rows, RowBytes(t, static_cast<size_t>(cols))});
  rows_ += rows;
  return Status::Ok();
}

void WeightMatrix::PackForProducts(bool release_rows) {
  for (Part& p : parts_) {
    const int rows = p.rows / kPackRows * kPackRows;  // whole groups; the rest stay in the file's layout
    if (!HasPacked(p.type) || p.packed != nullptr || rows == 0) continue;
    // Written whole before it is read: not zeroed first. The groups are
    // packed on the compute threads (a 1.24 B-weight model's 700 MB).
    const size_t group_bytes = PackedBytes(p.type, kPackRows, cols_);
    uint8_t* packed = packed_.emplace_back(new uint8_t[PackedBytes(p.type, rows, cols_)]).get();
    ThreadPool::Compute()->ParallelFor(rows / kPackRows, [&](int g) {
      Pack(p.type, p.data + static_cast<size_t>(g) * kPackRows * p.row_bytes, p.row_bytes, kPackRows, cols_,
           packed + static_cast<size_t>(g) * group_bytes);
    });
    p.packed = packed;
    p.packed_rows = rows;
    packed_bytes_ += PackedBytes(p.type, rows, cols_);
    // Rows already copied out of the file (CopyRowsTo) are not a mapping's
    // pages: releasing them would zero them.
    if (release_rows && !p.copied) ReleasePages(p.data, static_cast<size_t>(rows) * p.row_bytes);
  }
}

namespace {
// Each copied part starts on a cache line.
size_t CopySpan(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

// A packed part's products read the packed copy; its rows in place serve
// only the rows past its last whole group and embedding lookups, so it
// stays where it is. Rows copied once are not copied again.
bool WeightMatrix::Copyable(const Part& p) const { return owned_.empty() && p.packed == nullptr && !p.copied; }

size_t WeightMatrix::CopiedBytes() const {
  size_t n = 0;
  for (const Part& p : parts_) {
    if (Copyable(p)) n += CopySpan(p.row_bytes * static_cast<size_t>(p.rows));
  }
  return n;
}

size_t WeightMatrix::CopyRowsTo(uint8_t* dst, bool release_rows) {
  size_t used = 0;
  for (Part& p : parts_) {
    if (!Copyable(p)) continue;
    const size_t n = p.row_bytes * static_cast<size_t>(p.rows);
    // A slice at a time, each slice's file pages released before the next
    // is copied: resident memory grows by a slice, not by the part (a tied
    // output of 128 k rows is 280 MB in Q8_0). Slices end on page
    // boundaries of the source, so each page is released once, whole.
    constexpr size_t kSlice = size_t{16} << 20;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto base = reinterpret_cast<uintptr_t>(p.data);
    for (size_t off = 0; off < n;) {
      const size_t end = std::min(n, (base + off + kSlice) / page * page - base);
      std::memcpy(dst + used + off, p.data + off, end - off);
      if (release_rows) ReleasePages(p.data + off, end - off);
      off = end;
    }
    p.data = dst + used;
    p.copied = true;
    used += CopySpan(n);
  }
  return used;
}

Result<std::unique_ptr<HugePageBuffer>> MoveRowsToHugePages(const std::vector<WeightMatrix*>& matrices,
                                                            bool release_rows) {
  if (!HugePageBuffer::Available()) return std::unique_ptr<HugePageBuffer>();
  size_t total = 0;
  for (const WeightMatrix* m : matrices) total += m->CopiedBytes();
  if (total == 0) return std::unique_ptr<HugePageBuffer>();
  ASSIGN_OR_RETURN(std::unique_ptr<HugePageBuffer> buffer, HugePageBuffer::Allocate(total));
  uint8_t* at = buffer->data();
  for (WeightMatrix* m : matrices) at += m->CopyRowsTo(at, release_rows);
  return buffer;
}

// Drops the whole pages of a file mapping's range from memory: a private
// mapping of a file reads them again from the file if they are touched
// (the embedding rows of a tied output). Advice only: a failure leaves
// them resident.
void WeightMatrix::ReleasePages(const uint8_t* data, size_t n) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(data) + n) / page * page;
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

size_t WeightMatrix::bytes() const {
  size_t b = 0;
  for (const Part& p : parts_) b += p.row_bytes * static_cast<size_t>(p.rows);
  return b;
}

bool WeightMatrix::all_f32() const {
  return std::all_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.type == GgmlType::kF32; });
}

std::vector<WeightMatrix::PartInfo> WeightMatrix::parts() const {
  std::vector<PartInfo> out;
  for (const Part& p : parts_) out.push_back({p.type, p.rows, p.packed_rows, MaxRows(p)});
  return out;
}

void WeightMatrix::DequantizeRows(int r0, int n, float* out) const {
  const int r1 = r0 + n;
  for (const Part& p : parts_) {
    const int a = std::max(r0, p.row0), b = std::min(r1, p.row0 + p.rows);
    if (a >= b) continue;
    // Consecutive rows are whole blocks: one long row.
    DequantizeRow(p.type, p.data + static_cast<size_t>(a - p.row0) * p.row_bytes,
                  out + static_cast<size_t>(a - r0) * cols_, static_cast<size_t>(b - a) * cols_);
  }
}

std::vector<float> WeightMatrix::FloatValues() const {
  std::vector<float> v(static_cast<size_t>(rows_) * cols_);
  DequantizeRows(0, rows_, v.data());
  return v;
}

WeightMatrix WeightMatrix::ToFloats() const { return Floats(FloatValues(), rows_, cols_); }

// In-type products split their rows into this many parts per thread
// (kernels::ForColumnParts).
constexpr int kInTypePartsPerThread = 8;

// One product's activations in each format its parts need. The buffers are
// the calling thread's (thread_local, grown, never shrunk: no allocation per
// token once warm); pool threads only read them while the caller waits in
// ParallelFor.
struct WeightMatrix::Activations {
  const uint8_t* data[kActFormats] = {};  // by ActFormat; null: not needed
  size_t stride[kActFormats] = {};
  const uint32_t* side[kActFormats] = {};  // PackedSide of data, where a packed part reads it
  // Per part, InType's answer, taken once per product: the crossover may
  // change meanwhile (UseCrossover), and a part multiplied in type must have
  // had its activations prepared.
  const uint8_t* in_type = nullptr;
};

// Packed rows: every product in type (model/quant_pack.h).
int WeightMatrix::MaxRows(const Part& p) {
  return p.packed != nullptr ? std::numeric_limits<int>::max() : InTypeMaxRows(p.type);
}

// The one decision of a part's path, taken where activations are prepared
// and again where the part is multiplied.
bool WeightMatrix::InType(const Part& p, Path path, int M) {
  if (path == Path::kDequantize || ActivationFormat(p.type) == ActFormat::kNone) return false;
  return path == Path::kInType || M <= MaxRows(p);
}

// Rows [a, b) of part p in type: whole groups of 8 from the packed copy,
// any rows before or after them from the file's layout.
void WeightMatrix::DotRange(const Part& p, int a, int b, const uint8_t* act, size_t stride, const uint32_t* side,
                            int M, float beta, float* C, size_t ldc) const {
  int a8 = a, b8 = a;
  if (p.packed != nullptr) {
    a8 = p.row0 + (a - p.row0 + kPackRows - 1) / kPackRows * kPackRows;
    b8 = std::max(a8, p.row0 + std::min(b - p.row0, p.packed_rows) / kPackRows * kPackRows);
    if (a8 > b) a8 = b8 = b;
  }
  auto file_rows = [&](int r0, int r1) {
    if (r0 >= r1) return;
    DotRows(p.type, cols_, p.data + static_cast<size_t>(r0 - p.row0) * p.row_bytes, p.row_bytes, r1 - r0, act,
            stride, M, beta, C + (r0 - a), ldc);
  };
  file_rows(a, a8);
  if (b8 > a8) {
    DotRowsPacked(p.type, cols_, p.packed + PackedBytes(p.type, a8 - p.row0, cols_), b8 - a8, act, stride, side, M,
                  beta, C + (a8 - a), ldc);
  }
  file_rows(b8, b);
}

void WeightMatrix::MatMulRange(const Activations& acts, int M, const float* A, size_t lda, int c0,
                               int n, float beta, float* C, size_t ldc) const {
  thread_local std::vector<float> tile;
  const int c1 = c0 + n;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Part& p = parts_[i];
    const int a = std::max(c0, p.row0), b = std::min(c1, p.row0 + p.rows);
    if (a >= b) continue;
    float* out = C + (a - c0);
    if (acts.in_type[i] != 0) {
      const auto f = static_cast<size_t>(ActivationFormat(p.type));
      DotRange(p, a, b, acts.data[f], acts.stride[f], acts.side[f], M, beta, out, ldc);
      continue;
    }
    if (p.type == GgmlType::kF32) {
      const auto* B = reinterpret_cast<const float*>(p.data + static_cast<size_t>(a - p.row0) * p.row_bytes);
      kernels::MatMulNT(M, b - a, cols_, 1.0f, A, lda, B, cols_, beta, out, ldc);
      continue;
    }
    const int step = TileRows(cols_);
    for (int t = a; t < b; t += step) {
      const int rows_here = std::min(step, b - t);
      tile.resize(static_cast<size_t>(rows_here) * cols_);
      DequantizeRows(t, rows_here, tile.data());
      kernels::MatMulNT(M, rows_here, cols_, 1.0f, A, lda, tile.data(), cols_, beta, C + (t - c0), ldc);
    }
  }
}

void WeightMatrix::MatMulBy(Path path, ThreadPool* pool, int M, const float* A, size_t lda, int r0, int n,
                            float beta, float* C, size_t ldc) const {
  if (M == 0 || n == 0) return;
  thread_local std::vector<uint8_t> buffers[kActFormats];
  thread_local std::vector<uint32_t> sides[kActFormats];
  thread_local std::vector<uint8_t> decided;
  decided.assign(parts_.size(), 0);
  Activations acts;
  acts.in_type = decided.data();
  bool in_type = false;
  for (size_t j = 0; j < parts_.size(); ++j) {
    const Part& p = parts_[j];
    if (p.row0 >= r0 + n || p.row0 + p.rows <= r0 || !InType(p, path, M)) continue;
    decided[j] = 1;
    in_type = true;
    const ActFormat f = ActivationFormat(p.type);
    const auto i = static_cast<size_t>(f);
    if (acts.data[i] == nullptr && f == ActFormat::kF32) {  // the floats as given
      acts.data[i] = reinterpret_cast<const uint8_t*>(A);
      acts.stride[i] = lda * sizeof(float);
    } else if (acts.data[i] == nullptr) {
      acts.stride[i] = ActRowBytes(f, cols_);
      buffers[i].resize(static_cast<size_t>(M) * acts.stride[i]);
      uint8_t* dst = buffers[i].data();
      const size_t stride = acts.stride[i];
      auto quantize = [&](int m) {
        QuantizeActivations(f, A + static_cast<size_t>(m) * lda, cols_, dst + m * stride);
      };
      // Rows split over the threads too: on one thread this serial step
      // was 6% of a 20-token query's cycles with the other core idle.
      if (pool != nullptr && M > 1) {
        pool->ParallelFor(M, quantize);
      } else {
        for (int m = 0; m < M; ++m) quantize(m);
      }
      acts.data[i] = dst;
    }
    if (p.packed != nullptr && acts.side[i] == nullptr) {
      sides[i].resize(static_cast<size_t>(M) * PackedSideWords(p.type, cols_));
      PackedSide(p.type, acts.data[i], acts.stride[i], M, cols_, sides[i].data());
      acts.side[i] = sides[i].data();
    }
  }
  if (pool == nullptr) return MatMulRange(acts, M, A, lda, r0, n, beta, C, ldc);
  auto part = [&](int c0, int cn) { MatMulRange(acts, M, A, lda, r0 + c0, cn, beta, C + c0, ldc); };
  if (!in_type) return kernels::ForColumnParts(pool, n, part);
  kernels::ForColumnParts(pool, n, part, /*min_part=*/32, /*per_thread=*/kInTypePartsPerThread);
}

void WeightMatrix::MatMul(ThreadPool* pool, int M, const float* A, size_t lda, int r0, int n, float beta,
                          float* C, size_t ldc) const {
  MatMulBy(Path::kAuto, pool, M, A, lda, r0, n, beta, C, ldc);
}

Status WeightMatrix::CheckFinite(const std::string& name, const std::string& tensor) const {
  auto scan = [&](const float* v, size_t n, size_t first) -> Status {
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(v[i])) {
        return Status::Corruption(name + ": tensor " + tensor + " holds a non-finite value at index " +
                                  std::to_string(first + i) + " (corrupted file?)");
      }
    }
    return Status::Ok();
  };
  const int step = TileRows(cols_);
  std::vector<float> tile;
  for (const Part& p : parts_) {
    const size_t first = static_cast<size_t>(p.row0) * cols_;
    if (p.type == GgmlType::kF32) {  // read where it is
      RETURN_IF_ERROR(scan(reinterpret_cast<const float*>(p.data), static_cast<size_t>(p.rows) * cols_, first));
      continue;
    }
    for (int r = 0; r < p.rows; r += step) {
      const int rows = std::min(step, p.rows - r);
      tile.resize(static_cast<size_t>(rows) * cols_);
      DequantizeRows(p.row0 + r, rows, tile.data());
      RETURN_IF_ERROR(scan(tile.data(), tile.size(), first + static_cast<size_t>(r) * cols_));
    }
  }
  return Status::Ok();
}

}  // namespace tierkv::model
