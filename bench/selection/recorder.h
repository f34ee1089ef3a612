// Records real keys and queries from a model run for the selection benchmark: the text is
// prefilled in chunks through the real Transformer on the CPU backend with dense attention; a
// LayerAttention wrapper copies the query vectors of the chosen positions as each layer runs
// (the queries these tokens would issue at their decode step: teacher-forced on the text), and
// after the run the post-RoPE keys of the chosen layers are read from the KV pages.
#pragma once

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/process.h"
#include "engine/dense_attention.h"
#include "engine/transformer.h"
#include "index/key_reader.h"
#include "key_file.h"
#include "kv/kv_sequence.h"
#include "kv/page_pool.h"
#include "model/loader.h"

namespace icecache::bench {

// Dense attention that also copies the queries of chosen (layer, position) pairs.
class QueryTap : public LayerAttention {
 public:
  QueryTap(std::unique_ptr<DenseAttention> inner, const ModelConfig& c, RecordedKeys* out)
      : inner_(std::move(inner)), config_(c), out_(out) {
    for (size_t i = 0; i < out->layers.size(); ++i) slot_of_layer_[out->layers[i]] = i;
  }
  Status Prepare(const StepContext& step) override {
    start_ = step.start[0];
    n_ = step.n_tokens;
    return inner_->Prepare(step);
  }
  Status Attend(int layer, const Tensor& q, const Tensor& out) override {
    auto it = slot_of_layer_.find(layer);
    if (it != slot_of_layer_.end()) {
      const int64_t row = static_cast<int64_t>(config_.n_heads) * config_.head_dim;
      const std::vector<int64_t>& qp = out_->query_positions;
      for (size_t i = 0; i < qp.size(); ++i) {
        if (qp[i] < start_ || qp[i] >= start_ + n_) continue;
        const float* src = q.data_as<const float>() + (qp[i] - start_) * row;
        std::copy(
            src, src + row,
            const_cast<float*>(out_->Query(static_cast<int>(it->second), static_cast<int64_t>(i))));
      }
    }
    return inner_->Attend(layer, q, out);
  }

 private:
  std::unique_ptr<DenseAttention> inner_;
  ModelConfig config_;
  RecordedKeys* out_;
  std::map<int, size_t> slot_of_layer_;
  int64_t start_ = 0, n_ = 0;
};

// Runs `tokens` through the model at `model_path` and returns the keys of `layers` and the
// queries at `query_positions`. Prints progress to stderr.
inline Result<RecordedKeys> RecordKeys(const std::string& model_path,
                                       const std::vector<int32_t>& tokens,
                                       const std::vector<int32_t>& layers,
                                       const std::vector<int64_t>& query_positions, int threads,
                                       int chunk) {
  ICECACHE_ASSIGN_OR_RETURN(auto model, LoadModel(model_path));
  const ModelConfig& c = model->config;
  for (int l : layers) {
    if (l < 0 || l >= c.n_layers) return InvalidArgument("layer out of range");
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  RecordedKeys r;
  r.layers = layers;
  r.n_kv_heads = c.n_kv_heads;
  r.n_heads = c.n_heads;
  r.head_dim = c.head_dim;
  r.tokens = tokens;
  r.query_positions = query_positions;
  r.keys.assign(static_cast<size_t>(layers.size() * n * c.n_kv_heads * c.head_dim), 0.0f);
  r.queries.assign(
      static_cast<size_t>(layers.size() * query_positions.size() * c.n_heads * c.head_dim), 0.0f);
  auto backend = MakeCpuBackend({.threads = threads});
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 16, DType::kF32};
  const int64_t capacity = layout.PagesForTokens(n);
  ICECACHE_ASSIGN_OR_RETURN(auto pool, PagePool::Create(*backend, layout, capacity));
  ICECACHE_ASSIGN_OR_RETURN(
      auto transformer, Transformer::Create(c, model->weights, backend.get(), chunk, 1, capacity));
  ICECACHE_ASSIGN_OR_RETURN(auto dense, DenseAttention::Create(backend.get(), c, c.n_kv_heads,
                                                               capacity / c.n_layers + 8));
  QueryTap tap(std::move(dense), c, &r);
  KvSequence seq(pool.get());
  KvSequence* seqs[] = {&seq};
  const double t0 = NowSeconds();
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min<int64_t>(chunk, n - done);
    const int32_t counts[] = {static_cast<int32_t>(m)};
    ForwardInput in{seqs,   std::span<const int32_t>(tokens).subspan(done, m),
                    counts, LogitsMode::kNone,
                    {},     &tap};
    ICECACHE_RETURN_IF_ERROR(transformer->Forward(in).status());
    done += m;
    std::fprintf(stderr, "\rrecording: %lld / %lld tokens (%.0f s)", static_cast<long long>(done),
                 static_cast<long long>(n), NowSeconds() - t0);
  }
  std::fprintf(stderr, "\n");
  KeyReader keys(pool->view());
  for (size_t li = 0; li < layers.size(); ++li) {
    for (int h = 0; h < c.n_kv_heads; ++h) {
      for (const PageRef& p : seq.pages(layers[li], h)) {
        const float* k = keys.Keys(p.id, p.len);
        const int32_t* pos = keys.Positions(p.id);
        for (int t = 0; t < p.len; ++t) {
          std::copy(k + t * c.head_dim, k + (t + 1) * c.head_dim,
                    const_cast<float*>(r.Key(static_cast<int>(li), pos[t], h)));
        }
      }
    }
  }
  r.source = model->config.name + " (" + model_path + "), " + std::to_string(n) + " tokens";
  return r;
}

}  // namespace icecache::bench
