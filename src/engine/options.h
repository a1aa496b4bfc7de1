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

}  // namespace tierkv::engine
