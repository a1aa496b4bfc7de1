// Where a product stops running in the weights' own type. Products of up to
// InTypeMaxRows(type) activation rows multiply the weights in their type
// against 8-bit activations (model/quant_dot.h); longer ones dequantize a
// tile of rows at a time and call sgemm (WeightMatrix::MatMul), whose
// blocking wins once the conversion is shared by many rows. The limit per
// type comes from a table per kind of CPU built in here (BuiltInMaxRows),
// or from a crossover file measured on this machine: `tierkv bench-engine
// --calibrate FILE` writes one, `--crossover FILE` on every
// command that loads a model reads it (ReadCrossover, UseCrossover).
//
// The limit is fixed for a process, from the table or a file, rather than
// timed at every load: which products round their activations to 8 bits,
// and so a row's logits, must not change between runs on one machine.
//
// Thread safety: InTypeMaxRows may run concurrently with UseCrossover (each
// type's limit is one atomic, written once per call); a product running
// meanwhile takes the old limit or the new one (WeightMatrix decides each
// part's path once per product). Call it before models run, so that every
// product of a run follows one table.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/quant.h"
#include "tierkv/filesystem.h"
#include "tierkv/status.h"

namespace tierkv::model {

// The built-in limit for weights of type t on this kind of CPU; 0 for a
// type without kernels. The crossover depends on how fast sgemm is
// next to the 8-bit kernels, so it is per kind of CPU, measured with
// `tierkv bench-engine --decode --product-rows ...` on an 8192 x 8192
// matrix, 2 threads (docs/engine.md):
// - with AVX-512 (an Intel CPU with VNNI, where sgemm runs at ~300 GFLOP/s):
//   16 rows for the 8-bit kernels (Q4_K: 16.7 against 31.2 ms at 16 rows, 70
//   against 40 at 64); F16's fp32 products lose from 4 rows on (16.7 against
//   11.3 ms at 4; F16C makes sgemm's tiles cheap), so they stop at 2; BF16's
//   at 16 (its tiles are converted by a portable loop), so they stop at 8;
// - AVX2 with 256-bit units, no AVX-512 (an AMD EPYC, Zen 3, where sgemm
//   peaks at ~135 GFLOP/s and dequantizing a tile costs as much as
//   multiplying it): in type up to 32 rows for Q4_0 (46.4 against 44.7 ms
//   at 32), 64 for Q8_0 and Q6_K (at 64 level: 92.4 | 90.1, 71.0 | 67.0;
//   at 32: 44.4 | 60.6, 32.7 | 42.7), 128
//   for Q4_K (78.7 against 87.4 at 64, level at 128) and 256 for Q5_K (308
//   against 361 at 256). With 16 there, a 19-token query after a reused
//   prefix dequantized every weight of the model (~800 ms on a 1B model).
//   Measured again on 2026-11-28 (same CPU): Q8_0 level at 48 rows and
//   behind at 64 (98-114 against 89-94 ms), so 48; F16 and BF16 in
//   registers up to 16 (F16: 10.5 against 28.4 ms at 4, 34.8 against 39.3
//   at 16, 144 against 87 at 64; BF16: 36.6 against 67.0 at 16). These
//   predate the folded Q4_K/Q5_K/Q6_K kernels and the four-blocks-a-step
//   Q8_0/Q4_0 ones (2026-11-29), all timed on Zen 1 only (where every
//   change made the in-type side faster; an earlier one-row fold had been
//   1.03-1.12x slower there): unmeasured since on that CPU.
// - AVX2 run as two 128-bit halves (AMD EPYC 7001, Zen 1; its one 128-bit
//   integer multiply pipe bounds the 8-bit kernels at ~40-53 GFLOP/s on 2
//   cores, sgemm reaches ~60-68), each the lowest limit of several runs of
//   `bench-engine --calibrate` (2026-11-29; in type | dequantize + sgemm
//   ms): Q4_K up to 256 rows and Q5_K up to 128, with the kernels that
//   fold a sub-block pair by unpacking (three runs: 384, 256, 384 and 192,
//   128, 192; run 3: Q4_K 520.0 | 540.8 at 256, 785.1 | 795.7 at 384,
//   1175.7 | 1119.1 at 512; Q5_K 463.0 | 476.2 at 192, 618.2 | 602.4 at
//   256); Q8_0 and Q4_0 up to 32 with the four-blocks-a-step kernels
//   (Q8_0 32, 64, 48; Q4_0 32, 32); Q6_K up to 32 (83.3 | 94.2 at 32;
//   125.0 | 121.7 at 48), F16 up to 24 (72.6 | 76.4; 69.6 | 74.6 at 24;
//   sgemm ahead at 32), BF16 up to 32 (98.3 | 116.3 at 32; at 48 149.9 |
//   141.8; 127.9 | 135.5).
// Other CPUs with AVX-512 (Zen 4, Skylake without VNNI) take the first
// figures unmeasured, other AVX2 CPUs (Zen 2, Intel client cores) Zen 3's,
// Zen+ (also reported as znver1) Zen 1's: a crossover file measured there
// replaces them.
int BuiltInMaxRows(GgmlType t);

// The limit products follow: the crossover file's figure for t where
// UseCrossover gave one, else BuiltInMaxRows(t). 0 for a type without
// kernels.
int InTypeMaxRows(GgmlType t);

// The most rows a crossover may name (bench-engine's --product-rows bound).
inline constexpr int kMaxCrossoverRows = 4096;

// A crossover measured on one machine.
struct Crossover {
  std::string cpu;      // CpuName() where it was measured
  std::string kernels;  // DotKernelName() there
  // Per type with an in-type kernel, each at most once: products of up to
  // that many rows run in type (0: never).
  std::vector<std::pair<GgmlType, int>> max_rows;
};

// This CPU's brand string from cpuid (e.g. "AMD EPYC 7551 32-Core
// Processor"), spaces collapsed; "unknown" where cpuid has none.
std::string CpuName();

// The crossover file, text:
//   tierkv-crossover 1
//   cpu AMD EPYC 7551 32-Core Processor
//   kernels avx2
//   Q4_K 64
//   Q8_0 16            (one line per type)
std::string FormatCrossover(const Crossover& c);
// Validates every line; errors name the line and the bad field (a type
// without an in-type kernel, one named twice, rows outside [0,
// kMaxCrossoverRows]).
Result<Crossover> ParseCrossover(std::string_view text);
// `path` read (at most 4 KiB), parsed, and checked to be measured on this
// CPU (CpuName) with these kernels (DotKernelName): a file from another
// machine or from before a kernel change is an error that says so.
Result<Crossover> ReadCrossover(const std::string& path);
// Makes every later product follow c's limits (types it does not name keep
// the built-in figure); an empty Crossover restores the built-in table.
void UseCrossover(const Crossover& c);

}  // namespace tierkv::model
