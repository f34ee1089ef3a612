// Checks of a sequence's KV lists for engine-level tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "index/key_reader.h"
#include "kv/kv_sequence.h"

namespace icecache::testing {

// Every list of `seq` holds every position once, in pages no other list holds. Adds the pages
// listed to *pages (ids) and returns, in *absorbed, the positions before the lists' tails summed
// over the lists (tokens an index re-arranged).
inline void ExpectEveryPositionOnce(const KvSequence& seq, std::set<int32_t>* pages,
                                    int64_t* absorbed) {
  KeyReader keys(seq.pool().view());
  *absorbed = 0;
  for (int l = 0; l < seq.layout().n_layers; ++l) {
    for (int h = 0; h < seq.layout().n_kv_heads; ++h) {
      std::vector<int32_t> positions;
      for (const PageRef& p : seq.pages(l, h)) {
        ASSERT_TRUE(pages->insert(p.id).second) << "page listed twice";
        positions.insert(positions.end(), keys.Positions(p.id), keys.Positions(p.id) + p.len);
      }
      std::sort(positions.begin(), positions.end());
      ASSERT_EQ(static_cast<int64_t>(positions.size()), seq.length()) << l << "," << h;
      for (int64_t i = 0; i < seq.length(); ++i) ASSERT_EQ(positions[i], i) << l << "," << h;
      *absorbed += seq.tail_pos(l, h);
    }
  }
}

}  // namespace icecache::testing
