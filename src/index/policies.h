// Factories of the selection policies, one file each.
#pragma once

#include <memory>

#include "index/policy.h"

namespace icecache {

Result<std::unique_ptr<SequenceIndex>> MakeStreamingIndex(const IndexContext& context);
Result<std::unique_ptr<SequenceIndex>> MakeQuestIndex(const IndexContext& context);
Result<std::unique_ptr<SequenceIndex>> MakeOracleIndex(const IndexContext& context);
Result<std::unique_ptr<SequenceIndex>> MakeIceCacheIndex(const IndexContext& context);
Result<std::unique_ptr<SequenceIndex>> MakeLycheeIndex(const IndexContext& context);

}  // namespace icecache
