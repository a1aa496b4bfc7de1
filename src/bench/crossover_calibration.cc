#include "tierkv/tools/crossover_calibration.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "bench/product_timing.h"
#include "model/crossover.h"
#include "model/quant_dot.h"
#include "model/quant_pack.h"
#include "tierkv/filesystem.h"

namespace tierkv::bench {
namespace {

Status CheckLadder(const std::vector<int>& rows) {
  if (rows.empty()) return Status::InvalidArgument("calibration: no row counts to try");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 1 || rows[i] > model::kMaxCrossoverRows || (i > 0 && rows[i] <= rows[i - 1])) {
      return Status::InvalidArgument("calibration: row counts must ascend within [1, " +
                                     std::to_string(model::kMaxCrossoverRows) + "], got " +
                                     std::to_string(rows[i]) + " at position " + std::to_string(i + 1));
    }
  }
  return Status::Ok();
}

// One type up the ladder until sgemm wins twice in a row (header's rule).
CalibrateReport::Limit Climb(const TypedMatrix& m, const CalibrateOptions& o, std::vector<ProductPoint>* points) {
  CalibrateReport::Limit limit{m.type, 0, false};
  int losses = 0;
  for (size_t i = 0; i < o.rows.size() && losses < 2; ++i) {
    ProductPoint p = MeasureProduct(m, o.rows[i], o.repeats);
    const bool won = p.in_type_wins();
    if (o.progress) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s at %d rows: in type %.2f ms, dequantize + sgemm %.2f ms", m.type.c_str(),
                    p.rows, p.in_type_ms, p.dequantize_ms);
      o.progress(buf);
    }
    points->push_back(p);
    losses = won ? 0 : losses + 1;
    if (won) limit.max_rows = o.rows[i];
    limit.at_top = won && i + 1 == o.rows.size();
  }
  return limit;
}

}  // namespace

Result<CalibrateReport> CalibrateCrossover(const CalibrateOptions& o) {
  RETURN_IF_ERROR(CheckLadder(o.rows));
  CalibrateReport r;
  r.cpu = model::CpuName();
  r.kernels = model::DotKernelName();
  r.product_n = kProductN;
  r.product_k = kProductK;
  model::Crossover c{r.cpu, r.kernels, {}};
  std::vector<model::GgmlType> types;  // all checked before minutes of measuring
  for (const std::string& type : o.types) {
    ASSIGN_OR_RETURN(model::GgmlType t, model::ParseGgmlType(type));
    if (std::find(types.begin(), types.end(), t) != types.end()) {
      return Status::InvalidArgument("calibration: type " + type + " named twice");
    }
    types.push_back(t);
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (model::HasPacked(types[i])) {  // not built: packed rows ignore any limit
      r.limits.push_back({o.types[i], 0, false, true});
      continue;
    }
    ASSIGN_OR_RETURN(auto m, MakeProductMatrix(o.types[i]));
    r.limits.push_back(Climb(*m, o, &r.products));
    c.max_rows.emplace_back(types[i], r.limits.back().max_rows);
  }
  r.file_text = model::FormatCrossover(c);
  return r;
}

Status CheckCrossoverPath(const std::string& path) {
  if (path.empty() || path.back() == '/') {
    return Status::InvalidArgument("crossover file: \"" + path + "\" is not a file name");
  }
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument("cannot write the crossover file " + path + ": " + why);
  };
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return refuse(S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
  }
  // Where WriteFileAtomically writes first (util/filesystem.cc).
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return refuse(tmp + ": " + std::strerror(errno));
  ::close(fd);
  ::unlink(tmp.c_str());
  return Status::Ok();
}

Status SaveCrossover(const CalibrateReport& report, const std::string& path) {
  return WriteFileAtomically(FileSystem::Default(), path, report.file_text)
      .WithContext("writing the crossover file " + path);
}

std::string CalibrateReportToText(const CalibrateReport& r) {
  std::string s = "cpu: " + r.cpu + "\nin-type kernels: " + r.kernels + "\n";
  char buf[200];
  std::snprintf(buf, sizeof buf, "products %d x %d (median ms): in type | dequantize + sgemm\n", r.product_n,
                r.product_k);
  s += buf;
  for (const ProductPoint& p : r.products) {
    std::snprintf(buf, sizeof buf, "  %-5s %4d %10.2f | %10.2f   %s\n", p.type.c_str(), p.rows, p.in_type_ms,
                  p.dequantize_ms, p.in_type_wins() ? "in type" : "sgemm");
    s += buf;
  }
  s += "in type up to (rows):\n";
  for (const CalibrateReport::Limit& l : r.limits) {
    if (l.packed) {
      std::snprintf(buf, sizeof buf, "  %-5s packed for this CPU: in type at every length, not measured\n",
                    l.type.c_str());
    } else {
      std::snprintf(buf, sizeof buf, "  %-5s %4d%s\n", l.type.c_str(), l.max_rows,
                    l.at_top ? "  (still ahead at the last row count tried)" : "");
    }
    s += buf;
  }
  return s;
}

std::string CalibrateReportToJson(const CalibrateReport& r) {
  nlohmann::json j;
  j["cpu"] = r.cpu;
  j["kernels"] = r.kernels;
  j["product_n"] = r.product_n;
  j["product_k"] = r.product_k;
  j["products"] = nlohmann::json::array();
  for (const ProductPoint& p : r.products) {
    j["products"].push_back(
        {{"type", p.type}, {"rows", p.rows}, {"in_type_ms", p.in_type_ms}, {"dequantize_ms", p.dequantize_ms}});
  }
  for (const CalibrateReport::Limit& l : r.limits) {
    j["max_rows"][l.type] = {{"rows", l.max_rows}, {"at_top", l.at_top}, {"packed", l.packed}};
  }
  return j.dump(2);
}

}  // namespace tierkv::bench
