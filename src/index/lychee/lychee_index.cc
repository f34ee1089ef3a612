// Placeholder until the lychee policy lands: the factory reports it as unavailable.
#include "index/policies.h"

namespace icecache {

Result<std::unique_ptr<SequenceIndex>> MakeLycheeIndex(const IndexContext&) {
  return Unsupported("KV policy 'lychee' is not implemented yet");
}

}  // namespace icecache
