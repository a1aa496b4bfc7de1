// A weight matrix of a projection: rows are output features, each `cols`
// input features long. Held either as fp32 the matrix owns, or as the rows
// of one or more GGUF tensors read in place (from the model file's mapping,
// or from the huge-page copy the loader moves them into: CopyRowsTo) in
// their own types: the fused Q/K/V and gate/up matrices stack several
// tensors, and a llama.cpp mix (Q4_K_M) gives them different types.
//
// Products with in-place rows take one of two paths:
// - up to InTypeMaxRows(type) activation rows (model/crossover.h: decode, short batches; 16
//   for the 8-bit types with AVX-512, 32-256 with AVX2 only), or any number for packed rows (below), in the
//   rows' own type (model/quant_dot.h): the activations are quantized once
//   per product to 8 bits per block and multiplied with integer dot products,
//   so a token reads the weights' bytes once and converts none to fp32;
// - more rows, dequantize-then-sgemm: a tile of rows at a time (the format's
//   own DequantizeRow, so the values are those llama.cpp computes with) into
//   the calling thread's scratch, handed to sgemm, whose blocking wins once
//   the conversion is shared by many rows.
// F32 rows (and types without an in-type kernel) go to sgemm either way.
// PackForProducts() copies Q4_K and Q8_0 rows, repacked 8 rows at a time,
// where the CPU has AVX-512 VNNI (model/quant_pack.h): resident memory grows
// by those tensors' size until the file's pages are released, and products
// read the copy for whole groups (a part's rows past its last whole group
// stay in the file's layout). The model loader packs the matrices of mapped
// weights that products read (not an untied embedding table) and releases
// the file's pages of the packed rows.
//
// For unpacked rows the path depends on M: a product of a few rows takes
// its activations to 8 bits, a longer one keeps them in fp32, so the same
// row can get logits that differ by that rounding as part of a short or a
// long product. Packed rows, like llama.cpp, round every product to 8 bits.
//
// Thread safety: const methods may run concurrently; each thread uses its
// own thread_local tile. Not copyable (parts point into owned storage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/quant.h"
#include "tierkv/status.h"
#include "util/huge_pages.h"

namespace tierkv {
class ThreadPool;
}

namespace tierkv::model {

class WeightMatrix {
 public:
  WeightMatrix() = default;
  WeightMatrix(WeightMatrix&&) = default;
  WeightMatrix& operator=(WeightMatrix&&) = default;
  WeightMatrix(const WeightMatrix&) = delete;
  WeightMatrix& operator=(const WeightMatrix&) = delete;

  // rows × cols fp32 values, row-major, owned.
  static WeightMatrix Floats(std::vector<float> values, int rows, int cols);

  // Appends `rows` rows of type t read in place from `data` (RowBytes(t, cols)
  // bytes each; cols a multiple of t's block). `data` must outlive the
  // matrix. InvalidArgument when cols differs from the rows already held.
  Status AppendInPlace(GgmlType t, const uint8_t* data, int rows, int cols);

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  bool empty() const { return rows_ == 0; }
  // Bytes of the rows as held (fp32 owned, or their types in place).
  size_t bytes() const;
  // True when every row is fp32 (owned or in place): products need no tiles.
  bool all_f32() const;
  // Copies whole 8-row groups of Q4_K and Q8_0 parts into the packed layout, where
  // the CPU has AVX-512 VNNI (else nothing). Call once the rows are checked;
  // not thread-safe (products may run only after it returns).
  // release_rows: the rows are in a private mapping of a file, whose pages
  // of the packed rows are then released (they are read again from the
  // file if touched: embedding rows).
  void PackForProducts(bool release_rows = false);
  // Bytes of the packed copies (beside bytes()).
  size_t packed_bytes() const { return packed_bytes_; }
  // Moves the rows read in place (every part neither packed nor copied
  // before) into memory the caller owns: CopiedBytes() bytes at dst, which
  // must outlive the matrix; products, tiles and embedding lookups then
  // read dst (a huge-page buffer: util/huge_pages.h says why). Returns the
  // bytes used. Not thread-safe (call before products). release_rows as
  // for PackForProducts: the copied rows' whole pages of the file's mapping
  // are released (never those of copied rows, whatever is called after).
  size_t CopiedBytes() const;
  size_t CopyRowsTo(uint8_t* dst, bool release_rows);
  // The stacked tensors, in row order: type, rows, rows packed, and the
  // largest M MatMul multiplies them in type at.
  struct PartInfo {
    GgmlType type;
    int rows, packed_rows, max_rows_in_type;
  };
  std::vector<PartInfo> parts() const;

  // Rows [r0, r0 + n) as fp32 into out (n × cols).
  void DequantizeRows(int r0, int n, float* out) const;
  // The whole matrix as owned fp32 (the values DequantizeRows gives).
  WeightMatrix ToFloats() const;
  std::vector<float> FloatValues() const;

  // C[M × n] = A[M × cols] · W[r0 .. r0+n)^T + beta · C (beta 0 or 1), the
  // n output columns split across the pool's threads and the caller (pool
  // null: the caller alone). Each part's path follows M and its type (above).
  void MatMul(ThreadPool* pool, int M, const float* A, size_t lda, int r0, int n, float beta,
              float* C, size_t ldc) const;
  void MatMul(ThreadPool* pool, int M, const float* A, size_t lda, float beta, float* C, size_t ldc) const {
    MatMul(pool, M, A, lda, 0, rows_, beta, C, ldc);
  }

  // A path for every part, whatever M (benchmarks and tests), or kAuto
  // (MatMul's choice). kInType leaves F32 parts and types without kernels to sgemm.
  enum class Path { kAuto, kInType, kDequantize };
  void MatMulBy(Path path, ThreadPool* pool, int M, const float* A, size_t lda, int r0, int n, float beta,
                float* C, size_t ldc) const;

  // Non-OK naming the tensor (and row) if any value is NaN or infinite.
  Status CheckFinite(const std::string& name, const std::string& tensor) const;

 private:
  struct Part {
    GgmlType type;
    const uint8_t* data;
    int row0, rows;
    size_t row_bytes;
    const uint8_t* packed = nullptr;  // rows 8 at a time (model/quant_pack.h), or null
    int packed_rows = 0;              // the first packed_rows rows are in `packed`
    bool copied = false;              // `data` points into CopyRowsTo's buffer
  };
  struct Activations;  // A quantized for the in-type kernels (weight_matrix.cc)
  // Products of up to this many rows multiply p in type.
  static int MaxRows(const Part& p);
  static void ReleasePages(const uint8_t* data, size_t n);
  bool Copyable(const Part& p) const;
  // Whether part p is multiplied in type in a product of M rows by `path`.
  static bool InType(const Part& p, Path path, int M);
  // Rows [a, b) of part p in type (packed groups, with the activations'
  // PackedSide; the rest from the file).
  void DotRange(const Part& p, int a, int b, const uint8_t* act, size_t stride, const uint32_t* side, int M,
                float beta, float* C, size_t ldc) const;
  // Columns [c0, c0 + n) of C (rows of W), on the calling thread; each part
  // in type (from acts) or by sgemm, as MatMulBy decided with InType.
  void MatMulRange(const Activations& acts, int M, const float* A, size_t lda, int c0, int n,
                   float beta, float* C, size_t ldc) const;

  int rows_ = 0, cols_ = 0;
  std::vector<float> owned_;  // Floats(): the parts point into it
  std::vector<Part> parts_;   // by row, contiguous
  // Packed copies of Q4_K and Q8_0 parts on CPUs with the packed kernels (their
  // heap buffers stay put when the matrix moves). In-type products read
  // them; tiles and embedding rows still read the rows in place.
  std::vector<std::unique_ptr<uint8_t[]>> packed_;
  size_t packed_bytes_ = 0;
};

// The rows of `matrices` that products read (CopiedBytes of each) moved
// into one new buffer of transparent huge pages, which the caller keeps as
// long as the matrices: decode streams every weight once per token, faster
// from 2 MiB pages than from a file mapping's 4 KiB ones (docs/engine.md,
// "Weights in huge pages"). release_rows as for CopyRowsTo. Null, with the
// rows left where they are, when the kernel gives no transparent huge
// pages or nothing is to be copied; the buffer's error when it cannot be
// had (the rows then stay too: slower, not wrong).
Result<std::unique_ptr<HugePageBuffer>> MoveRowsToHugePages(const std::vector<WeightMatrix*>& matrices,
                                                            bool release_rows);

}  // namespace tierkv::model
