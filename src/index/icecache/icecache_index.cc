// Placeholder until the icecache policy lands: the factory reports it as unavailable.
#include "index/policies.h"

namespace icecache {

Result<std::unique_ptr<SequenceIndex>> MakeIceCacheIndex(const IndexContext&) {
  return Unsupported("KV policy 'icecache' is not implemented yet");
}

}  // namespace icecache
