// The crossover between in-type products and dequantize-then-sgemm: the
// built-in table per kind of CPU and the crossover file (model/crossover.h).
#include "model/crossover.h"

#include <cpuid.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "model/dequant_avx2.h"
#include "model/quant_dot.h"
#include "tierkv/model.h"

namespace tierkv::model {
namespace {

// The kinds of CPU the built-in crossover was measured on (crossover.h).
enum class CpuKind {
  kAvx512,     // or no AVX2 at all: the portable loops take these figures
  kAvx2,       // AVX2 with full-width 256-bit units (Zen 2/3, Intel client)
  kAvx2Split,  // AVX2 run as two 128-bit halves (Zen 1 / Zen+: EPYC 7001)
};

CpuKind ThisCpu() {
  if (__builtin_cpu_supports("avx512f") || !HasAvx2()) return CpuKind::kAvx512;
  return Avx2InHalves() ? CpuKind::kAvx2Split : CpuKind::kAvx2;
}

int Avx2MaxRows(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return 32;
    case GgmlType::kQ8_0: return 48;
    case GgmlType::kQ6_K: return 64;
    case GgmlType::kQ4_K: return 128;
    case GgmlType::kQ5_K: return 256;
    default: return 16;  // F16, BF16
  }
}

int Avx2SplitMaxRows(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_K: return 256;  // a sub-block pair folded by unpacking
    case GgmlType::kQ5_K: return 128;
    case GgmlType::kQ6_K:
    case GgmlType::kBF16: return 32;
    case GgmlType::kF16: return 24;
    case GgmlType::kQ4_0:
    case GgmlType::kQ8_0: return 32;  // four blocks a step (quant_dot_avx2.cc)
    default: return 16;
  }
}

int Avx512MaxRows(GgmlType t) {
  if (ActivationFormat(t) != ActFormat::kF32) return 16;
  return t == GgmlType::kF16 ? 2 : 8;
}

}  // namespace

int BuiltInMaxRows(GgmlType t) {
  static const CpuKind cpu = ThisCpu();
  if (ActivationFormat(t) == ActFormat::kNone) return 0;  // the tables below hold kernel types only
  switch (cpu) {
    case CpuKind::kAvx512: return Avx512MaxRows(t);
    case CpuKind::kAvx2: return Avx2MaxRows(t);
    case CpuKind::kAvx2Split: return Avx2SplitMaxRows(t);
  }
  return 0;
}


namespace {

constexpr std::string_view kMagic = "tierkv-crossover";
constexpr int kVersion = 1;
constexpr size_t kMaxFileBytes = 4096;

// One limit per GgmlType value (BF16, 30, is the largest), stored as rows +
// 1: 0, the zero-initialised value, means the built-in figure.
constexpr size_t kTypeSlots = 31;
std::atomic<int> g_crossover_rows[kTypeSlots];

size_t Slot(GgmlType t) { return static_cast<size_t>(t); }

// Text from the file as an error message may show it: control bytes (an
// escape sequence, a NUL, a CR) as \xNN.
std::string Shown(std::string_view s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

Status LineError(int line, const std::string& what) {
  return Status::InvalidArgument("crossover file line " + std::to_string(line) + ": " + what);
}

// The words of a line: a key and the rest with spaces collapsed.
std::string Collapse(std::string_view s) {
  std::istringstream in{std::string(s)};
  std::string word, out;
  while (in >> word) out += (out.empty() ? "" : " ") + word;
  return out;
}

}  // namespace

int InTypeMaxRows(GgmlType t) {
  if (ActivationFormat(t) == ActFormat::kNone) return 0;
  const int n = Slot(t) < kTypeSlots ? g_crossover_rows[Slot(t)].load(std::memory_order_relaxed) : 0;
  return n > 0 ? n - 1 : BuiltInMaxRows(t);
}

std::string CpuName() {
  unsigned regs[12] = {};
  unsigned top = __get_cpuid_max(0x80000000u, nullptr);
  if (top < 0x80000004u) return "unknown";
  for (unsigned i = 0; i < 3; ++i) {
    __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
  }
  char brand[49] = {};
  std::memcpy(brand, regs, 48);
  const std::string name = Collapse(brand);
  return name.empty() ? "unknown" : name;
}

std::string FormatCrossover(const Crossover& c) {
  std::ostringstream s;
  s << kMagic << " " << kVersion << "\ncpu " << c.cpu << "\nkernels " << c.kernels << "\n";
  for (const auto& [t, rows] : c.max_rows) {
    Result<GgmlTypeInfo> info = TypeInfo(static_cast<uint32_t>(t));
    s << (info.ok() ? info->name : std::string_view("?")) << " " << rows << "\n";
  }
  return s.str();
}

Result<Crossover> ParseCrossover(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  auto next = [&]() -> bool { return static_cast<bool>(std::getline(in, line)) && (++n, true); };
  if (!next() || Collapse(line) != std::string(kMagic) + " " + std::to_string(kVersion)) {
    return LineError(1, "not a crossover file (want \"" + std::string(kMagic) + " " + std::to_string(kVersion) +
                            "\", from tierkv bench-engine --calibrate)");
  }
  Crossover c;
  auto field = [&](const char* key, std::string* out) -> Status {
    const std::string prefix = std::string(key) + " ";
    if (!next() || line.rfind(prefix, 0) != 0 || Collapse(line.substr(prefix.size())).empty()) {
      return LineError(n + (in ? 0 : 1), std::string("field ") + key + " missing");
    }
    *out = Collapse(line.substr(prefix.size()));
    return Status::Ok();
  };
  RETURN_IF_ERROR(field("cpu", &c.cpu));
  RETURN_IF_ERROR(field("kernels", &c.kernels));
  while (next()) {
    std::istringstream words(line);
    std::string name, rows_text, extra;
    if (!(words >> name)) continue;  // a blank line
    if (!(words >> rows_text) || (words >> extra)) {
      return LineError(n, "want \"TYPE ROWS\", got \"" + Shown(line) + "\"");
    }
    Result<GgmlType> t = ParseGgmlType(name);
    if (!t.ok() || ActivationFormat(*t) == ActFormat::kNone) {
      return LineError(n, "type " + Shown(name) + " has no in-type kernel");
    }
    for (const auto& seen : c.max_rows) {
      if (seen.first == *t) return LineError(n, "type " + Shown(name) + " named twice");
    }
    int rows = -1;
    size_t used = 0;
    try {
      rows = std::stoi(rows_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != rows_text.size() || rows < 0 || rows > kMaxCrossoverRows) {
      return LineError(n, "rows of " + Shown(name) + " \"" + Shown(rows_text) + "\" not in [0, " +
                              std::to_string(kMaxCrossoverRows) + "]");
    }
    c.max_rows.emplace_back(*t, rows);
  }
  return c;
}

Result<Crossover> ReadCrossover(const std::string& path) {
  // Checked before opening: opening a FIFO would wait for a writer.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Status::NotFound("crossover file " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument("crossover file " + path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    return Status::InvalidArgument("crossover file " + path + ": " + std::to_string(st.st_size) +
                                   " bytes, more than " + std::to_string(kMaxFileBytes));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(FileSystem::Default(), path));
  Result<Crossover> c = ParseCrossover(text.substr(0, kMaxFileBytes));
  RETURN_IF_ERROR(c.status().WithContext(path));
  const std::string again = " (measure it here: tierkv bench-engine --calibrate " + path + ")";
  if (c->cpu != CpuName()) {
    return Status::InvalidArgument(path + " was measured on \"" + Shown(c->cpu) + "\", this CPU is \"" + CpuName() +
                                   "\"" + again);
  }
  if (c->kernels != DotKernelName()) {
    return Status::InvalidArgument(path + " was measured with the " + Shown(c->kernels) + " kernels, these are " +
                                   DotKernelName() + again);
  }
  return c;
}

void UseCrossover(const Crossover& c) {
  // Each slot written once with its new value: a product meanwhile sees
  // the old limit or the new one, never the built-in figure in between.
  int next[kTypeSlots] = {};
  for (const auto& [t, rows] : c.max_rows) {
    if (Slot(t) < kTypeSlots) next[Slot(t)] = rows + 1;
  }
  for (size_t i = 0; i < kTypeSlots; ++i) g_crossover_rows[i].store(next[i], std::memory_order_relaxed);
}

}  // namespace tierkv::model

namespace tierkv {

Status UseCrossoverFile(const std::string& path) {
  ASSIGN_OR_RETURN(model::Crossover c, model::ReadCrossover(path));
  model::UseCrossover(c);
  return Status::Ok();
}

}  // namespace tierkv
