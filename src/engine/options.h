// The public engine options mapped onto the modules that own their meaning:
// aggregation is select's, pool policies are the cache's (their names and
// parsing live there too).
#pragma once

#include "cache/policy.h"
#include "engine/system_table.h"
#include "select/identify.h"
#include "tierkv/engine.h"

namespace tierkv::engine {

select::Aggregation ToSelect(Aggregation a);
// The pools' policy: the option's, or the system's own for kSystemDefault.
cache::PolicyKind PolicyFor(PoolPolicy p, const SystemRow& row);
// Consecutive rows a selection unit chooses or skips together: 1 for
// tokens, the rows of one 4 KiB page of a chunk's record, a block's tokens;
// u resolved (ResolveUnit): 1 for auto.
size_t RowsPerUnit(const SelectionUnit& u, uint32_t row_bytes);

}  // namespace tierkv::engine
