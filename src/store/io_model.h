// What a batch of reads costs on this machine's disk, measured, so that the
// read planner can trade bytes for reads: a batch of n reads of b bytes in
// all, kept `queue_depth` deep, takes about n * per_io_us + b / bandwidth.
//
// The model is measured once per cache directory (CalibrateIo: random 4 KiB
// reads and 128 KiB reads of a scratch file beside the store, through the
// store's own backend at its queue depth; ChunkStore's LoadIoModel decides
// when) and kept in the directory's
// IO-MODEL file with the machine it was measured on (host name, the
// directory's device, backend, depth); a file from another machine, another
// backend or depth, or a damaged one, is measured again. Where nothing can
// be measured (a file system without O_DIRECT descriptors, a read-only
// open) the built-in default is used.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tierkv/filesystem.h"
#include "tierkv/status.h"

namespace tierkv::store {

inline constexpr const char* kIoModelFile = "IO-MODEL";
inline constexpr const char* kIoScratchFile = "IO-MODEL.scratch";

// Where the model was (or is to be) measured; a saved model is used only on
// the same one.
struct IoMachine {
  std::string host;
  std::string device;   // "major:minor" of the cache directory's file system
  std::string backend;  // "uring" or "pread"
  uint32_t queue_depth = 0;
  bool operator==(const IoMachine&) const = default;
  std::string ToString() const;
};

struct IoCostModel {
  IoMachine machine;
  double per_io_us = 20;    // fixed cost of one read, as throughput at the depth in use
  double mb_per_s = 1000;   // bandwidth at that depth (1 MB = 10^6 bytes)
  // "measured" (this machine), "saved" (read back from IO-MODEL) or "default".
  std::string source = "default";

  // Predicted seconds for `reads` reads of `bytes` bytes in all.
  double Seconds(uint64_t reads, uint64_t bytes) const;
  // The largest gap, in 4 KiB blocks, worth reading through to save a read:
  // gap bytes cost less than one read's fixed cost.
  uint32_t MergeGapBlocks() const;
};

class IoBackend;

// The machine a cache directory is on, read through `io` (its backend and depth).
Result<IoMachine> MachineOf(const std::string& dir, const IoBackend& io);

// Text form of IO-MODEL, and its parser (Corruption naming the bad field).
std::string IoModelToText(const IoCostModel& m);
Result<IoCostModel> ParseIoModel(const std::string& text);

// The directory's saved model if it was measured on `here`; NotFound when
// there is none or it is another machine's, Corruption when it does not
// parse.
Result<IoCostModel> LoadSavedIoModel(const std::string& dir, const IoMachine& here);
// Saves `m` as the directory's IO-MODEL (atomically).
Status SaveIoModel(const std::string& dir, const IoCostModel& m);

struct CalibrateOptions {
  uint64_t scratch_mib = 32;
  int rounds = 3;          // the median of the rounds is kept
  std::function<void(const std::string&)> progress;
};

// Measures the model of `dir`'s disk through `io` (the store's own backend:
// its kind and depth are the model's; about a tenth of a second on an SSD).
// The scratch file is removed afterwards, also on failure. REQUIRES: the
// default file system (the measurement needs OS descriptors); no other
// read in flight on `io`.
Result<IoCostModel> CalibrateIo(const std::string& dir, IoBackend& io, const CalibrateOptions& options = {});

}  // namespace tierkv::store
