// The strategies that keep every parameter on every rank, in one flat buffer (flat_parameters.hpp):
//   none       gradients all-reduced bucket by bucket during backward; every rank updates all;
//   optimizer  (ZeRO-1) buckets reduce-scattered; each rank updates and keeps optimizer state for
//              its chunk of every bucket (data_parallel_shards.hpp); the updated chunks are
//              all-gathered, running on into the next forward;
//   gradients  (ZeRO-2) as optimizer, but no flat gradient buffer: when a bucket's gradients are
//              final they are copied into a bucket buffer, the parameters' own gradients are
//              freed, the buffer is reduce-scattered and only this rank's chunk is kept (added
//              into an owned float32 buffer). With accumulation every micro-batch is
//              reduce-scattered and added: accumulating locally would need the whole gradient,
//              the memory this mode exists to free (docs/MEMORY.md).

#include <chrono>
#include <deque>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/parallel/data_parallel_shards.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/parallel/gradient_finalizer.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"
#include "hpctrain/runtime/clock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "strategy_internal.hpp"

namespace hpctrain::parallel {
namespace {

using Clock = std::chrono::steady_clock;

using runtime::seconds_since;

// The gradient reduction of parallel.shard: gradients (see the top of this file).
class ShardedGradientReducer {
 public:
  ShardedGradientReducer(FlatParameters& flat, FlatBuckets buckets,
                         std::shared_ptr<comm::Communicator> dp, bool overlap,
                         c10::ScalarType reduce_dtype, torch::Tensor owned_grads)
      : flat_(flat),
        buckets_(std::move(buckets)),
        dp_(std::move(dp)),
        overlap_(overlap),
        reduce_dtype_(reduce_dtype),
        owned_grads_(owned_grads),
        reductions_(dp_, std::move(owned_grads)) {
    std::size_t first = 0;
    std::int64_t packed = 0;
    for (std::size_t b = 0; b < buckets_.offsets.size(); ++b) {
      first_entry_.push_back(first);
      first += static_cast<std::size_t>(buckets_.entry_counts[b]);
      packed_offset_.push_back(packed);
      packed += buckets_.sizes[b] / dp_->size();
      for (int k = 0; k < buckets_.entry_counts[b]; ++k) bucket_of_entry_.push_back(b);
    }
    std::vector<torch::Tensor> params;
    for (const auto& e : flat_.entries()) params.push_back(e.param);
    hooks_.install(params, [this](std::size_t i) { on_ready(i); });
    prepare();
  }
  ~ShardedGradientReducer() { reductions_.abandon(); }
  ShardedGradientReducer(const ShardedGradientReducer&) = delete;
  ShardedGradientReducer& operator=(const ShardedGradientReducer&) = delete;

  // Every bucket not yet launched is launched (unused parameters count as zero gradients), and
  // every reduction completes into the owned buffer. Returns the seconds spent. Collective.
  double flush() {
    const auto start = Clock::now();
    for (auto& count : pending_) count = 0;
    launch_ready();
    reductions_.drain();
    prepare();
    return seconds_since(start);
  }

  std::size_t buckets() const { return buckets_.offsets.size(); }

 private:
  void prepare() {
    pending_ = buckets_.entry_counts;
    next_ = 0;
  }

  void on_ready(std::size_t entry) {
    if (!overlap_) return;
    if (--pending_[bucket_of_entry_[entry]] == 0) launch_ready();
  }

  // In index order only: every rank issues the same collectives in the same order.
  void launch_ready() {
    while (next_ < buckets() && pending_[next_] <= 0) launch(next_++);
  }

  void launch(std::size_t b) {
    torch::NoGradGuard no_grad;
    const auto& entries = flat_.entries();
    torch::Tensor buffer =
        torch::zeros({buckets_.sizes[b]}, owned_grads_.options().dtype(reduce_dtype_));
    for (int k = 0; k < buckets_.entry_counts[b]; ++k) {
      const auto& e = entries[first_entry_[b] + static_cast<std::size_t>(k)];
      torch::Tensor& grad = e.param.mutable_grad();
      if (grad.defined()) {
        buffer.narrow(0, e.offset - buckets_.offsets[b], e.numel).copy_(grad.reshape(-1));
        grad = torch::Tensor();  // freed: only the owned chunk stays
      }
    }
    const std::int64_t chunk = buckets_.sizes[b] / dp_->size();
    reductions_.launch(std::move(buffer), packed_offset_[b], chunk);
  }

  FlatParameters& flat_;
  FlatBuckets buckets_;
  std::shared_ptr<comm::Communicator> dp_;
  bool overlap_;
  c10::ScalarType reduce_dtype_;
  torch::Tensor owned_grads_;
  std::vector<std::size_t> first_entry_;
  std::vector<std::int64_t> packed_offset_;
  std::vector<std::size_t> bucket_of_entry_;
  std::vector<int> pending_;
  std::size_t next_ = 0;
  OwnedGradientReductions reductions_;
  GradientReadyHooks hooks_;
};

class FlatStrategy : public DataParallelStrategy {
 public:
  explicit FlatStrategy(StrategyInputs in)
      : mode_(in.config.shard),
        dp_(in.shard),
        replica_(in.replica),
        tp_(in.tp),
        dp_control_(in.shard_control),
        set_parameter_wait_(in.set_parameter_wait),
        waits_(in.waits_for_parameters) {
    const bool sharded = mode_ != ShardMode::kNone;
    // A parameter two pipeline stages hold gets a gradient bucket of its own on both, so a
    // sharded optimizer owns the same elements of it on each (GradientFinalizer).
    FlatLayout layout{in.bucket_bytes, sharded ? dp_->size() : 1, {}};
    for (const auto& [name, peer] : in.stage_copies) layout.own_bucket.push_back(name);
    layout.gradients = mode_ != ShardMode::kGradients;
    flat_ = std::make_unique<FlatParameters>(in.module, layout);
    broadcast_parameters(*flat_, *in.dp);  // the whole dp group (replicas too)
    broadcast_buffers(in.module, *in.dp);
    const auto& entries = flat_->entries();
    std::vector<torch::Tensor> replicated;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& name = entries[i].name;
      if (std::find(in.tp_replicated.begin(), in.tp_replicated.end(), name) !=
          in.tp_replicated.end()) {
        replicated.push_back(entries[i].param);
        if (tp_->size() > 1) replicated_entries_.push_back(i);
      }
      if (std::find(in.secondary_copies.begin(), in.secondary_copies.end(), name) !=
          in.secondary_copies.end()) {
        copy_entries_.push_back(i);
      }
    }
    const FlatBuckets buckets = flat_->buckets(in.bucket_bytes);
    bucket_count_ = static_cast<std::int64_t>(buckets.offsets.size());
    if (mode_ == ShardMode::kGradients) {
      shards_ = std::make_unique<DataParallelShards>(*flat_, buckets.offsets, buckets.sizes, dp_);
      owned_grads_ = torch::zeros({shards_->owned_numel()}, flat_->params().options());
      std::int64_t packed = 0;
      for (const auto& r : shards_->owned()) {
        owned_pieces_.emplace_back(r.offset, r.numel);
        packed += r.numel;
      }
      for (auto i : replicated_entries_) {
        for (auto piece : packed_overlap(owned_pieces_, entries[i].offset, entries[i].numel)) {
          replicated_pieces_.push_back(piece);
        }
      }
      const auto reduce =
          in.config.reduce_dtype == ShardDtype::kBFloat16 ? torch::kBFloat16 : torch::kFloat;
      reducer_ = std::make_unique<ShardedGradientReducer>(*flat_, buckets, dp_, in.overlap, reduce,
                                                          owned_grads_);
    } else {
      sync_ =
          std::make_unique<GradientSynchronizer>(*flat_, dp_, in.bucket_bytes, in.overlap, sharded);
      if (sharded) {
        shards_ = std::make_unique<DataParallelShards>(*flat_, sync_->bucket_offsets(),
                                                       sync_->bucket_sizes(), dp_);
      }
      finalizer_ = std::make_unique<GradientFinalizer>(*sync_, tp_, std::move(replicated));
      if (!in.stage_copies.empty()) {
        std::vector<std::pair<torch::Tensor, int>> pairs;
        for (const auto& [name, peer] : in.stage_copies) {
          pairs.emplace_back(flat_->entry(name).param, peer);
        }
        finalizer_->set_stage_copies(in.pp, std::move(pairs));
      }
    }
    if (shards_ && waits_ && set_parameter_wait_) {
      auto* shards = shards_.get();
      set_parameter_wait_([shards](const torch::Tensor& w) { shards->wait_parameter(w); });
    }
    for (const auto& e : entries) layout_.push_back({e.name, e.param, e.offset, e.numel});
  }

  ~FlatStrategy() override {
    if (shards_ && waits_ && set_parameter_wait_) set_parameter_wait_(nullptr);
  }

  ShardMode mode() const override { return mode_; }

  void before_backward(bool last) override {
    if (sync_) sync_->set_sync_enabled(last);  // accumulate locally on the first K-1
  }

  double after_backward() override {
    if (!reducer_) return 0.0;
    runtime::trace::Scope traced(0, "gradient reduce-scatter wait");
    return reducer_->flush();
  }

  double finish_gradients() override {
    const auto start = Clock::now();
    if (finalizer_) {
      const double waited = finalizer_->finalize();
      if (replica_ && shards_) {  // hybrid: the owned chunks averaged across the shard groups
        std::vector<torch::Tensor> owned;
        for (const auto& r : shards_->owned()) {
          if (r.numel > 0) owned.push_back(flat_->grads().narrow(0, r.offset, r.numel));
        }
        average_over_replicas(owned, replica_);
        return waited + seconds_since(start);
      }
      return waited;
    }
    average_over_replicas({owned_grads_}, replica_);
    if (!replicated_pieces_.empty()) average_packed_pieces(owned_grads_, replicated_pieces_, *tp_);
    return seconds_since(start);
  }

  double grad_square_sum() override {
    torch::NoGradGuard no_grad;
    const int tp = tp_->size();
    if (mode_ == ShardMode::kNone) {
      double sq = flat_->grad_square_sum(0, flat_->numel());
      const auto& entries = flat_->entries();
      for (auto i : copy_entries_)
        sq -= flat_->grad_square_sum(entries[i].offset, entries[i].numel);
      for (auto i : replicated_entries_) {
        sq -= (1.0 - 1.0 / tp) * flat_->grad_square_sum(entries[i].offset, entries[i].numel);
      }
      return sq;
    }
    double sq = 0;
    if (mode_ == ShardMode::kOptimizer) {
      // Each dp rank holds the averaged gradient of its shards only: partial sums over the dp
      // group (host doubles on the control plane).
      sq = shards_->owned_grad_square_sum(replicated_entries_, 1.0 / tp);
      for (auto i : copy_entries_) sq -= shards_->owned_entry_square_sum(i);
    } else {
      std::int64_t at = 0;
      for (const auto& [offset, numel] : owned_pieces_) {
        sq += square_sum(owned_grads_.narrow(0, at, numel));
        at += numel;
      }
      sq = count_replicated_once(sq, owned_grads_, replicated_pieces_, tp);
    }
    return dp_control_->sum(sq);
  }

  void scale_grads(double factor) override {
    torch::NoGradGuard no_grad;
    if (mode_ == ShardMode::kNone) {
      flat_->grads().mul_(factor);
    } else if (mode_ == ShardMode::kOptimizer) {
      shards_->scale_owned_grads(factor);
    } else {
      owned_grads_.mul_(factor);
    }
  }

  void zero_grads() override {
    if (owned_grads_.defined()) {
      owned_grads_.zero_();
    } else {
      flat_->zero_grads();
    }
  }

  std::vector<OptimizerSegment> segments() override {
    if (mode_ == ShardMode::kNone) return {{flat_->params(), flat_->grads()}};
    std::vector<OptimizerSegment> out;
    std::int64_t at = 0;
    for (const auto& r : shards_->owned()) {
      out.push_back({flat_->params().narrow(0, r.offset, r.numel),
                     owned_grads_.defined() ? owned_grads_.narrow(0, at, r.numel)
                                            : flat_->grads().narrow(0, r.offset, r.numel)});
      at += r.numel;
    }
    return out;
  }

  void before_update() override {
    if (shards_) shards_->wait_parameters();  // the update writes chunks a gather may still read
  }

  void after_update() override {
    if (!shards_) return;
    // A model that waits for each layer's parameters lets the gather run on into the next
    // forward (docs/MEMORY.md); for any other model it completes here.
    shards_->start_parameter_gather();
    if (!waits_) shards_->wait_parameters();
  }

  void parameters_ready() override {
    if (shards_) shards_->wait_parameters();
  }

  GradientSynchronizer* synchronizer() override { return sync_.get(); }

  const std::vector<LayoutEntry>& layout() const override { return layout_; }

  torch::Tensor gather_state(const torch::Tensor& packed) override {
    // A snapshot (not a live view) when sharded: the deferred copy may read it while the step
    // updates.
    return shards_ ? shards_->gather_state(packed) : packed;
  }

  torch::Tensor state_load_target(const torch::Tensor& packed) override {
    return shards_ ? torch::zeros({flat_->numel()}, packed.options()) : packed;
  }

  void restore_state(const torch::Tensor& loaded, torch::Tensor& packed) override {
    if (shards_) shards_->scatter_state(loaded, packed);
  }

  std::int64_t parameter_bytes() const override {
    return flat_->numel() * static_cast<std::int64_t>(flat_->params().element_size());
  }

  std::int64_t gradient_bytes() const override {
    if (owned_grads_.defined()) {
      return owned_grads_.numel() * static_cast<std::int64_t>(owned_grads_.element_size());
    }
    return parameter_bytes();
  }

  StrategyTraffic traffic_per_step(int micro_batches) const override {
    StrategyTraffic t;
    if (dp_->size() == 1 && !replica_) return t;
    const std::int64_t bytes = parameter_bytes();
    if (mode_ == ShardMode::kNone) {
      t.all_reduce_bytes = bytes;
      t.collectives = bucket_count_;
      return t;
    }
    const int reductions = mode_ == ShardMode::kGradients ? micro_batches : 1;
    t.reduce_scatter_bytes = bytes * reductions;
    t.all_gather_bytes = bytes;
    t.collectives = bucket_count_ * (reductions + 1);
    if (replica_ && replica_->size() > 1) {  // the owned chunks across the shard groups
      t.all_reduce_bytes = bytes / dp_->size();
      t.collectives += 1;
    }
    return t;
  }

  std::int64_t trace_slices_per_step(int micro_batches) const override {
    // Per bucket: an all-reduce; sharded, a reduce-scatter (per micro-batch under gradients),
    // an all-gather and a gather wait.
    if (mode_ == ShardMode::kNone) return bucket_count_;
    return bucket_count_ * ((mode_ == ShardMode::kGradients ? micro_batches : 1) + 2);
  }

 private:
  ShardMode mode_;
  std::shared_ptr<comm::Communicator> dp_;       // the shard group (the dp group unless hybrid)
  std::shared_ptr<comm::Communicator> replica_;  // across shard groups (hybrid only)
  std::shared_ptr<comm::Communicator> tp_;
  std::shared_ptr<comm::ControlPlane> dp_control_;
  std::function<void(std::function<void(const torch::Tensor&)>)> set_parameter_wait_;
  bool waits_ = false;
  std::unique_ptr<FlatParameters> flat_;
  std::unique_ptr<GradientSynchronizer> sync_;
  std::unique_ptr<DataParallelShards> shards_;
  std::unique_ptr<GradientFinalizer> finalizer_;
  torch::Tensor owned_grads_;  // gradients: this rank's chunks, packed
  std::vector<std::pair<std::int64_t, std::int64_t>> owned_pieces_;       // flat {offset, numel}
  std::vector<std::pair<std::int64_t, std::int64_t>> replicated_pieces_;  // packed
  std::unique_ptr<ShardedGradientReducer> reducer_;
  std::vector<std::size_t> replicated_entries_;  // flat entries replicated across tp (tp > 1)
  std::vector<std::size_t> copy_entries_;        // flat entries another stage saves and counts
  std::vector<LayoutEntry> layout_;
  std::int64_t bucket_count_ = 0;
};

}  // namespace

std::unique_ptr<DataParallelStrategy> make_flat_strategy(StrategyInputs inputs) {
  return std::make_unique<FlatStrategy>(std::move(inputs));
}

}  // namespace hpctrain::parallel
