// A 64-bit value as the 16 lowercase hex digits the project writes wherever
// it names one (store fingerprints in STORE files, model and workload
// digests in bench identities, `tierkv info`).
#pragma once

#include <cstdint>
#include <string>

namespace tierkv {

std::string Hex64(uint64_t v);

}  // namespace tierkv
