// Index updates beside the next decode step's device work (EngineImpl::UpdatesBeside).
//
// After a decode step each sequence's index takes in the tokens that left the recent window
// (SequenceIndex::OnAppend): host work that, run right after the step, leaves the device idle.
// Run beside the next step instead, it overlaps that step's device work. The next step first
// grows its sequences and prepares its attention from the lists as they are (the pages still
// waiting to be taken in are loose pages there, selectable as any other), then queues its device
// work; only then does the update start, on a host thread. Meanwhile the device reads pages the
// lists showed at Prepare, so the pool holds every page the update frees (PagePool::HoldFrees)
// and the index rewrites no row that a page already holds (SequenceIndex::
// UpdatesBesideDeviceReads); once the step's device work is done the held pages return to the
// pool. The step after that prepares from the updated lists.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/env_switch.h"
#include "core/process.h"
#include "engine/engine_impl.h"

namespace icecache {
namespace {

// ICECACHE_TRACE_STEPS=1: one line per batched decode step on stderr with the host time of each
// phase (Transformer::PhaseTimes, the wait for the sampled ids, the join of index updates run
// beside), to place a slow step without a profiler. `gap` is the host time from the last step's
// ids reaching the host to this step's forward pass: with grow, stage and prepare it bounds how
// long the device waits for the host between two steps (-1 for a decode loop's first step).
bool TraceSteps() {
  static const bool on = EnvSwitch("ICECACHE_TRACE_STEPS", false);
  return on;
}

void PrintStepTrace(size_t batch, int64_t length, double gap_s, const Transformer::PhaseTimes& p,
                    double sample_s, double updates_s, double step_s) {
  std::fprintf(stderr,
               "step trace: batch %zu length %lld | gap %.3f grow %.3f stage %.3f prepare %.3f "
               "layers %.3f logits %.3f sample %.3f updates %.3f | step %.3f ms\n",
               batch, static_cast<long long>(length), gap_s < 0 ? -1.0 : 1e3 * gap_s, 1e3 * p.grow,
               1e3 * p.stage, 1e3 * p.prepare, 1e3 * p.layers, 1e3 * p.logits, 1e3 * sample_s,
               1e3 * updates_s, 1e3 * step_s);
}

}  // namespace

void EngineImpl::ChargeUpdates(std::span<const IndexUpdate> updates,
                               const std::vector<double>& took, bool beside) {
  for (size_t k = 0; k < updates.size(); ++k) {
    KvAccounting& acct = updates[k].state->acct;
    acct.update_s += took[k];
    if (beside) acct.update_beside_s += took[k];
    if (!acct.step_update_s.empty()) acct.step_update_s.back() += took[k];
  }
}

class EngineImpl::BesideUpdates : public BesideWork {
 public:
  explicit BesideUpdates(EngineImpl* engine) : e_(engine) {}
  ~BesideUpdates() override { (void)Finish(); }

  void Start() override {
    updates_.swap(e_->pending_);
    e_->pool_->HoldFrees();
    started_ = true;
    thread_ = std::thread([this] { status_ = e_->RunIndexUpdates(updates_, &took_); });
  }
  void Join() override {
    if (thread_.joinable()) thread_.join();
  }

  // Joins the updates, waits for the step's device work and returns the held pages to the pool.
  // Returns the updates' status (Ok when they did not start).
  Status Finish() {
    if (!started_) return Status::Ok();
    Join();
    if (e_->backend_->device() != Device::kCpu) e_->backend_->Synchronize();
    e_->pool_->ReleaseHeld();
    started_ = false;
    ran_ = true;
    return status_;
  }
  bool ran() const { return ran_; }

  // Charges the updates to the step that ran them (after that step's own accounting).
  void Charge() { ChargeUpdates(updates_, took_, true); }

 private:
  EngineImpl* e_;
  std::vector<IndexUpdate> updates_;
  std::vector<double> took_;
  Status status_ = Status::Ok();
  std::thread thread_;
  bool started_ = false, ran_ = false;
};

bool EngineImpl::UpdatesBeside(std::span<SequenceState* const> states) const {
  if (!beside_scope_ || options_.kv_timing) return false;
  const std::string& mode = options_.index_update;
  if (mode == "after" || (mode == "auto" && backend_->device() == Device::kCpu)) return false;
  bool any = false;
  for (const SequenceState* st : states) {
    if (st->kv.recall) return false;  // measures on the host, from the lists
    if (!st->index) continue;
    // Host-side selection would read the lists (and use the index workers) during the step.
    if (!st->device_select || !st->index->UpdatesBesideDeviceReads()) return false;
    any = true;
  }
  return any;
}

Status EngineImpl::FlushPendingUpdates(std::span<SequenceState* const> waiting) {
  if (pending_.empty()) return Status::Ok();
  std::vector<IndexUpdate> updates;
  updates.swap(pending_);
  // Indexes read and re-arrange the host tier on the host: wait for the device's KV writes.
  if (backend_->device() != Device::kCpu) backend_->Synchronize();
  std::vector<double> took;
  const double t0 = NowSeconds();
  Status s = RunIndexUpdates(updates, &took);
  const double wall = NowSeconds() - t0;
  ChargeUpdates(updates, took, false);
  std::vector<SequenceState*> charged(waiting.begin(), waiting.end());
  for (const IndexUpdate& u : updates) charged.push_back(u.state);
  // Each sequence waited for all of the updates.
  std::sort(charged.begin(), charged.end());
  charged.erase(std::unique(charged.begin(), charged.end()), charged.end());
  for (SequenceState* st : charged) st->acct.total_s += wall;
  return s;
}

Result<Tensor> EngineImpl::DecodeBatch(std::span<SequenceState* const> states,
                                       std::span<const int32_t> tokens,
                                       std::vector<int32_t>* sampled) {
  const bool beside = UpdatesBeside(states);
  if (!beside) ICECACHE_RETURN_IF_ERROR(FlushPendingUpdates());
  std::vector<KvSequence*> seqs;
  std::vector<int32_t> counts(states.size(), 1);
  bool sparse = false;
  for (SequenceState* s : states) {
    seqs.push_back(&s->seq);
    // --kv-recall runs full sequences through the sparse path too (it measures there).
    sparse = sparse || s->sparse() || s->kv.recall;
  }
  ForwardInput in{seqs, tokens, counts, LogitsMode::kLast, {}};
  in.attention = staged_.get();
  in.logits_in_backend = sampled != nullptr;
  if (sparse) {
    sparse_->SetBatch(states);
    in.attention = sparse_.get();
  }
  BesideUpdates work(this);
  if (!pending_.empty()) in.beside = &work;
  const double t0 = NowSeconds();
  ICECACHE_ASSIGN_OR_RETURN(Tensor out, transformer_->Forward(in));
  const double t_forward = NowSeconds();
  if (sampled != nullptr) {
    // Greedy on the device: only the ids cross to the host (SampleTokens waits for them).
    sampled->assign(states.size(), 0);
    const std::vector<SampleRowParams> greedy(states.size());
    ICECACHE_RETURN_IF_ERROR(backend_->SampleTokens(out, greedy, *sampled));
    out = Tensor();
  }
  const double t_sampled = NowSeconds();
  const Status updated = work.Finish();
  const double dt = NowSeconds() - t0;
  if (TraceSteps()) {
    const double gap = trace_ids_at_ > 0 ? t0 - trace_ids_at_ : -1;
    PrintStepTrace(states.size(), states[0]->seq.length(), gap, transformer_->last_phases(),
                   t_sampled - t_forward, t0 + dt - t_sampled, dt);
    trace_ids_at_ = t_sampled;
  }
  if (sparse) sparse_->EndStep(dt);
  for (size_t i = 0; i < states.size(); ++i) {
    SequenceState& st = *states[i];
    ChargeStep(st, tokens[i], dt, st.seq.length(), sparse);
  }
  if (work.ran()) {
    ++beside_index_updates_;
    work.Charge();
  }
  ICECACHE_RETURN_IF_ERROR(updated);
  ICECACHE_RETURN_IF_ERROR(AfterDecodeStep(states, tokens, beside));
  return out;
}

}  // namespace icecache
