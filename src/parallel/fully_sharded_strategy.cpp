// parallel.shard: full (ZeRO-3 / FSDP). Parameters live as owned chunks only: the model's units
// (model::Model::parameter_units: gpt blocks, mlp and cnn layers) are each laid out in a buffer
// padded to a multiple of the dp size, and dp rank r keeps chunk r of each, in float32, with its
// gradient and optimizer state. The parameters not in a unit form the root (the gpt's embeddings,
// final norm and head), gathered once per step and kept until its gradients are reduced.
//
// Forward: enter_unit gathers the unit (all-gather in place into its buffer, whose storage the
// parameters are views of), waits, and starts gathering the next unit (prefetch); leave_unit
// frees the buffer's storage (parallel.reshard_after_forward) and routes the output through an
// identity whose backward gathers the unit again (and prefetches the unit before it) just before
// the unit's backward, which reads the parameters autograd saved: views of the same storage,
// filled again. Backward: the unit's gradients accumulate into a buffer laid out like it; when
// every one is final (a hook on each parameter's gradient accumulator) the buffer is
// reduce-scattered, this rank's chunk is added into the owned gradients and the gathered copy is
// freed. Reductions are launched in one order on every rank (the last unit first, the root last).
//
// Outside training forward (evaluation, a save, the end of the run) parameters_ready() gathers
// every unit and keeps them until the next training forward: the model is then whole, and a
// forward runs no collective (evaluation batches differ between ranks).

#include <c10/core/CPUAllocator.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "strategy_internal.hpp"

namespace hpctrain::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// The storage of `t` (a whole buffer) dropped and allocated again: every view of it (the
// parameters, what autograd saved of them) sees the new memory.
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  if (s->nbytes() >= bytes) return;
  at::Allocator* allocator = s->allocator() ? s->allocator() : c10::GetAllocator(t.device().type());
  s->set_data_ptr_noswap(allocator->allocate(bytes));
  s->set_nbytes(bytes);
}

class FullyShardedStrategy;

// The identity at a unit's output: its backward gathers the unit before the unit's backward.
struct UnitBackwardGather : torch::autograd::Function<UnitBackwardGather> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               std::int64_t strategy, std::int64_t unit) {
    ctx->saved_data["strategy"] = strategy;
    ctx->saved_data["unit"] = unit;
    return x;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads);
};

class FullyShardedStrategy : public DataParallelStrategy, public ParameterUnitHooks {
 public:
  explicit FullyShardedStrategy(StrategyInputs in)
      : dp_(in.shard),
        replica_(in.replica),
        tp_(in.tp),
        dp_control_(in.shard_control),
        set_unit_hooks_(in.set_unit_hooks),
        reshard_(in.config.reshard_after_forward),
        unit_dtype_(in.config.param_dtype == ShardDtype::kBFloat16 ? torch::kBFloat16
                                                                   : torch::kFloat),
        reduce_dtype_(in.config.reduce_dtype == ShardDtype::kBFloat16 ? torch::kBFloat16
                                                                      : torch::kFloat) {
    if (!in.stage_copies.empty()) {
      throw ConfigError(
          "parallel.shard: full does not run with pipeline stages (parallel.pp > 1): use "
          "parallel.shard: none or optimizer with pipelines");
    }
    auto named = in.module.named_parameters(/*recurse=*/true);
    if (named.size() == 0) throw Error("the model has no parameters to train");
    std::map<std::string, std::size_t> index_of;
    for (std::size_t i = 0; i < named.size(); ++i) index_of[named[i].key()] = i;
    std::vector<int> unit_of(named.size(), -1);
    for (std::size_t u = 0; u < in.units.size(); ++u) {
      units_.push_back(Unit{});
      units_.back().name = str("unit ", u);
      for (const auto& name : in.units[u]) {
        auto it = index_of.find(name);
        if (it == index_of.end()) {
          throw ConfigError(str("model ", in.model_name, ": unit ", u, " names parameter '", name,
                                "', which the model does not have: its parameter_units() must "
                                "list the state_dict names of its parameters"));
        }
        if (unit_of[it->second] >= 0) {
          throw ConfigError(str("model ", in.model_name, ": parameter '", name, "' is in units ",
                                unit_of[it->second], " and ", u,
                                ": each parameter belongs to one unit of parallel.shard: full"));
        }
        unit_of[it->second] = static_cast<int>(u);
        units_.back().members.push_back(it->second);
      }
    }
    model_units_ = units_.size();
    Unit root;
    root.name = "root";
    for (std::size_t i = 0; i < named.size(); ++i) {
      if (unit_of[i] < 0) root.members.push_back(i);
    }
    if (!root.members.empty()) {
      root_ = static_cast<int>(units_.size());
      units_.push_back(std::move(root));
    }
    if (in.units.empty() && in.dp->rank() == 0) {
      log::warn(str("model ", in.model_name,
                    " names no units (model::Model::parameter_units): parallel.shard: full "
                    "gathers the whole model for forward and backward, which is correct but saves "
                    "no parameter memory"));
    }
    const int size = dp_->size();
    const int rank = dp_->rank();
    const auto options = named[0].value().options();
    std::int64_t layout_at = 0;
    std::int64_t packed_at = 0;
    torch::NoGradGuard no_grad;
    std::vector<std::vector<std::int64_t>> numels;
    for (const auto& x : units_) {
      numels.emplace_back();
      for (auto i : x.members) numels.back().push_back(named[i].value().numel());
    }
    const std::vector<UnitSpan> spans = layout_units(numels, size);
    for (std::size_t u = 0; u < units_.size(); ++u) {
      Unit& x = units_[u];
      for (std::size_t k = 0; k < x.members.size(); ++k) {
        const auto i = x.members[k];
        entries_.push_back(
            {named[i].key(), named[i].value(), u, spans[u].offsets[k], named[i].value().numel()});
        x.entries.push_back(entries_.size() - 1);
      }
      x.numel = spans[u].numel;
      x.chunk = spans[u].chunk;
      x.layout_offset = layout_at;
      x.packed_offset = packed_at;
      layout_at += x.numel;
      packed_at += x.chunk;
      // The root computes in float32 (its embeddings and head meet the loss); the units in the
      // gathered dtype, their inputs cast on entry and their outputs cast back on exit.
      const auto dtype = static_cast<int>(u) == root_ ? torch::kFloat : unit_dtype_;
      x.gathered = torch::zeros({x.numel}, options.dtype(dtype));
      x.allocated = true;
      for (auto k : x.entries) {
        Entry& e = entries_[k];
        auto view = x.gathered.narrow(0, e.offset, e.numel).view(e.param.sizes());
        view.copy_(e.param);
        e.param.set_data(view);
      }
    }
    owned_params_ = torch::empty({packed_at}, options.dtype(torch::kFloat));
    owned_grads_ = torch::zeros({packed_at}, options.dtype(torch::kFloat));
    reductions_ = std::make_unique<OwnedGradientReductions>(dp_, owned_grads_);
    for (auto& x : units_) {
      if (in.dp->size() > 1) in.dp->broadcast(x.gathered, 0);  // all start from dp rank 0's
      owned_params_.narrow(0, x.packed_offset, x.chunk)
          .copy_(x.gathered.narrow(0, rank * x.chunk, x.chunk));
      owned_ranges_.emplace_back(x.layout_offset + rank * x.chunk, x.chunk);
    }
    layout_numel_ = layout_at;
    pinned_ = true;  // gathered until the first training forward (a load may write them)
    broadcast_buffers(in.module, *in.dp);
    for (const auto& e : entries_) {
      layout_.push_back({e.name, e.param, units_[e.unit].layout_offset + e.offset, e.numel});
      if (tp_->size() > 1 && std::find(in.tp_replicated.begin(), in.tp_replicated.end(), e.name) !=
                                 in.tp_replicated.end()) {
        for (auto piece : packed_overlap(owned_ranges_, layout_.back().offset, e.numel)) {
          replicated_pieces_.push_back(piece);
        }
      }
    }
    std::vector<torch::Tensor> params;
    for (const auto& e : entries_) params.push_back(e.param);
    hooks_.install(params, [this](std::size_t i) { on_ready(i); });
    if (set_unit_hooks_) set_unit_hooks_(this);
  }

  ~FullyShardedStrategy() override {
    if (set_unit_hooks_) set_unit_hooks_(nullptr);
    for (auto& x : units_) {
      if (x.gather) {
        try {
          x.gather->wait();
        } catch (...) {  // reported by the step that failed; do not throw here
        }
      }
    }
    if (reductions_) reductions_->abandon();
  }

  ShardMode mode() const override { return ShardMode::kFull; }

  // --- the unit hooks ---------------------------------------------------------------------------
  torch::Tensor enter(std::size_t unit, const torch::Tensor& input) override {
    if (pinned_) return cast_in(input);
    ensure_gathered(unit);
    if (unit + 1 < model_units_ && !units_[unit + 1].allocated) launch_gather(unit + 1);
    return cast_in(input);
  }

  torch::Tensor leave(std::size_t unit, const torch::Tensor& output) override {
    if (pinned_) return cast_out(output);
    torch::Tensor out = cast_out(output);
    if (!torch::GradMode::is_enabled() || !out.requires_grad()) {
      free_unit(unit);
      return out;
    }
    if (reshard_) free_unit(unit);
    return UnitBackwardGather::apply(out, reinterpret_cast<std::int64_t>(this),
                                     static_cast<std::int64_t>(unit));
  }

  // Called by UnitBackwardGather's backward.
  void before_unit_backward(std::size_t unit) {
    ensure_gathered(unit);
    if (unit > 0 && !units_[unit - 1].allocated) launch_gather(unit - 1);  // backward goes there
    attach_grads(units_[unit]);
  }

  // --- one step ---------------------------------------------------------------------------------
  void before_forward(bool first) override {
    (void)first;
    if (pinned_) {
      pinned_ = false;
      for (std::size_t u = 0; u < units_.size(); ++u) free_unit(u);
    }
    if (root_ >= 0) ensure_gathered(static_cast<std::size_t>(root_));  // kept for the step
  }

  void before_backward(bool last) override {
    (void)last;
    for (auto& x : units_) x.pending = static_cast<int>(x.entries.size());
    next_reduce_ = static_cast<int>(model_units_) - 1;
    if (root_ >= 0) attach_grads(units_[static_cast<std::size_t>(root_)]);
  }

  double after_backward() override {
    runtime::trace::Scope traced(0, "gradient reduce-scatter wait");
    const auto start = Clock::now();
    // The units backward did not reach (unused parameters) and the root, then every reduction
    // completes.
    for (; next_reduce_ >= 0; --next_reduce_) launch_reduce(static_cast<std::size_t>(next_reduce_));
    if (root_ >= 0) launch_reduce(static_cast<std::size_t>(root_));
    reductions_->drain();
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  double finish_gradients() override {
    if (root_ >= 0) free_unit(static_cast<std::size_t>(root_));
    const auto start = Clock::now();
    average_over_replicas({owned_grads_}, replica_);  // hybrid: across the shard groups
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (!replicated_pieces_.empty()) average_packed_pieces(owned_grads_, replicated_pieces_, *tp_);
    return waited;
  }

  double grad_square_sum() override {
    torch::NoGradGuard no_grad;
    const double sq = count_replicated_once(square_sum(owned_grads_), owned_grads_,
                                            replicated_pieces_, tp_->size());
    return dp_control_->sum(sq);
  }

  void scale_grads(double factor) override {
    torch::NoGradGuard no_grad;
    owned_grads_.mul_(factor);
  }

  void zero_grads() override { owned_grads_.zero_(); }

  std::vector<OptimizerSegment> segments() override { return {{owned_params_, owned_grads_}}; }

  void parameters_ready() override {
    if (pinned_) return;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      if (!units_[u].allocated) launch_gather(u);
    }
    for (std::size_t u = 0; u < units_.size(); ++u) ensure_gathered(u);
    pinned_ = true;
  }

  void parameters_written() override {
    torch::NoGradGuard no_grad;
    const int rank = dp_->rank();
    for (auto& x : units_) {
      owned_params_.narrow(0, x.packed_offset, x.chunk)
          .copy_(x.gathered.narrow(0, rank * x.chunk, x.chunk));
    }
  }

  // --- checkpoints ------------------------------------------------------------------------------
  const std::vector<LayoutEntry>& layout() const override { return layout_; }
  torch::Tensor master_parameters() override { return gather_state(owned_params_); }
  torch::Tensor parameter_load_target() override {
    return torch::zeros({layout_numel_}, owned_params_.options());
  }
  void restore_parameters(const torch::Tensor& loaded) override {
    restore_state(loaded, owned_params_);
    // Gathered copies are stale now: the next reader gathers again.
    pinned_ = false;
    for (std::size_t u = 0; u < units_.size(); ++u) free_unit(u);
  }

  torch::Tensor gather_state(const torch::Tensor& packed) override {
    torch::NoGradGuard no_grad;
    torch::Tensor full = torch::zeros({layout_numel_}, packed.options());
    const int rank = dp_->rank();
    std::vector<comm::WorkHandle> works;
    for (auto& x : units_) {
      full.narrow(0, x.layout_offset + rank * x.chunk, x.chunk)
          .copy_(packed.narrow(0, x.packed_offset, x.chunk));
      if (dp_->size() > 1) {
        works.push_back(dp_->all_gather_in_place_async(full.narrow(0, x.layout_offset, x.numel)));
      }
    }
    for (auto& w : works) w->wait();
    return full;
  }

  torch::Tensor state_load_target(const torch::Tensor& packed) override {
    return torch::zeros({layout_numel_}, packed.options());
  }

  void restore_state(const torch::Tensor& loaded, torch::Tensor& packed) override {
    torch::NoGradGuard no_grad;
    const int rank = dp_->rank();
    for (auto& x : units_) {
      packed.narrow(0, x.packed_offset, x.chunk)
          .copy_(loaded.narrow(0, x.layout_offset + rank * x.chunk, x.chunk));
    }
  }

  // --- accounting -------------------------------------------------------------------------------
  std::int64_t parameter_bytes() const override {
    return owned_params_.numel() * static_cast<std::int64_t>(owned_params_.element_size());
  }
  std::int64_t gradient_bytes() const override {
    return owned_grads_.numel() * static_cast<std::int64_t>(owned_grads_.element_size());
  }

  StrategyTraffic traffic_per_step(int micro_batches) const override {
    StrategyTraffic t;
    if (dp_->size() == 1 && !replica_) return t;
    const std::int64_t reduce_element = reduce_dtype_ == torch::kBFloat16 ? 2 : 4;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const Unit& x = units_[u];
      const auto element = static_cast<std::int64_t>(x.gathered.element_size());
      const bool is_root = static_cast<int>(u) == root_;
      // A unit: gathered for forward and again for backward (once when kept), per micro-batch;
      // the root once per step. Every unit's gradients reduce-scattered per micro-batch.
      const int gathers = is_root ? 1 : micro_batches * (reshard_ ? 2 : 1);
      t.all_gather_bytes += gathers * x.numel * element;
      t.reduce_scatter_bytes += micro_batches * x.numel * reduce_element;
      t.collectives += gathers + micro_batches;
    }
    if (replica_ && replica_->size() > 1) {  // the owned chunks across the shard groups
      t.all_reduce_bytes = owned_grads_.numel() * 4;
      t.collectives += 1;
    }
    return t;
  }

  std::int64_t trace_slices_per_step(int micro_batches) const override {
    // Per unit and micro-batch: two gathers and a wait each, a reduce-scatter.
    return static_cast<std::int64_t>(units_.size()) * micro_batches * 5;
  }

 private:
  struct Entry {
    std::string name;
    torch::Tensor param;
    std::size_t unit;
    std::int64_t offset;  // in the unit's buffer
    std::int64_t numel;
  };
  struct Unit {
    std::string name;
    std::vector<std::size_t> members;  // named_parameters indices
    std::vector<std::size_t> entries;  // entries_ indices
    std::int64_t numel = 0;            // padded to a multiple of the dp size
    std::int64_t chunk = 0;
    std::int64_t layout_offset = 0;
    std::int64_t packed_offset = 0;
    torch::Tensor gathered;  // storage freed while not gathered
    bool allocated = false;
    comm::WorkHandle gather;  // in flight
    torch::Tensor grad;       // while backward accumulates
    int pending = 0;          // gradients not final yet; -1 once reduced
  };

  torch::Tensor cast_in(const torch::Tensor& x) const {
    if (unit_dtype_ == torch::kFloat || !x.is_floating_point() || x.scalar_type() == unit_dtype_) {
      return x;
    }
    return x.to(unit_dtype_);
  }
  torch::Tensor cast_out(const torch::Tensor& y) const {
    if (unit_dtype_ == torch::kFloat || y.scalar_type() != unit_dtype_) return y;
    return y.to(torch::kFloat);
  }

  void launch_gather(std::size_t u) {
    torch::NoGradGuard no_grad;
    Unit& x = units_[u];
    allocate_storage(x.gathered);
    x.allocated = true;
    x.gathered.narrow(0, dp_->rank() * x.chunk, x.chunk)
        .copy_(owned_params_.narrow(0, x.packed_offset, x.chunk));
    if (dp_->size() > 1) x.gather = dp_->all_gather_in_place_async(x.gathered);
  }

  void ensure_gathered(std::size_t u) {
    Unit& x = units_[u];
    if (!x.allocated) launch_gather(u);
    if (x.gather) {
      runtime::trace::Scope traced(0, "parameter gather wait");
      x.gather->wait();
      x.gather.reset();
    }
  }

  void free_unit(std::size_t u) {
    Unit& x = units_[u];
    if (!x.allocated) return;
    if (x.gather) {  // a prefetch still in flight writes into the storage
      x.gather->wait();
      x.gather.reset();
    }
    free_storage(x.gathered);
    x.allocated = false;
  }

  // The unit's gradients accumulate into one buffer laid out like its parameters.
  void attach_grads(Unit& x) {
    if (x.grad.defined()) return;
    x.grad = torch::zeros({x.numel}, x.gathered.options());
    for (auto k : x.entries) {
      Entry& e = entries_[k];
      torch::Tensor view = x.grad.narrow(0, e.offset, e.numel).view(e.param.sizes());
      if (e.param.grad().defined()) view.copy_(e.param.grad());  // not expected: kept
      e.param.mutable_grad() = view;
    }
  }

  void on_ready(std::size_t entry) {
    Unit& x = units_[entries_[entry].unit];
    if (x.pending > 0) --x.pending;
    // In one order on every rank: the last unit first (backward's order), down to the first.
    while (next_reduce_ >= 0 && units_[static_cast<std::size_t>(next_reduce_)].pending == 0 &&
           units_[static_cast<std::size_t>(next_reduce_)].grad.defined()) {
      launch_reduce(static_cast<std::size_t>(next_reduce_--));
    }
  }

  void launch_reduce(std::size_t u) {
    torch::NoGradGuard no_grad;
    Unit& x = units_[u];
    attach_grads(x);  // a unit backward did not reach: zeros (and any gradient it got)
    torch::Tensor buffer =
        x.grad.scalar_type() == reduce_dtype_ ? x.grad : x.grad.to(reduce_dtype_);
    reductions_->launch(buffer, x.packed_offset, x.chunk);
    for (auto k : x.entries) entries_[k].param.mutable_grad() = torch::Tensor();
    x.grad = torch::Tensor();
    x.pending = -1;
    if (static_cast<int>(u) != root_) free_unit(u);  // its backward is done
  }

  std::shared_ptr<comm::Communicator> dp_;       // the shard group (the dp group unless hybrid)
  std::shared_ptr<comm::Communicator> replica_;  // across shard groups (hybrid only)
  std::shared_ptr<comm::Communicator> tp_;
  std::shared_ptr<comm::ControlPlane> dp_control_;  // over the shard group
  std::function<void(ParameterUnitHooks*)> set_unit_hooks_;
  bool reshard_ = true;
  c10::ScalarType unit_dtype_;
  c10::ScalarType reduce_dtype_;
  std::vector<Unit> units_;  // the model's units in forward order, then the root
  std::size_t model_units_ = 0;
  int root_ = -1;
  std::vector<Entry> entries_;
  std::vector<LayoutEntry> layout_;
  std::int64_t layout_numel_ = 0;
  torch::Tensor owned_params_;  // float32 master chunks, unit after unit
  torch::Tensor owned_grads_;
  std::vector<std::pair<std::int64_t, std::int64_t>> owned_ranges_;       // layout {offset, numel}
  std::vector<std::pair<std::int64_t, std::int64_t>> replicated_pieces_;  // packed
  bool pinned_ = false;
  int next_reduce_ = -1;
  std::unique_ptr<OwnedGradientReductions> reductions_;
  GradientReadyHooks hooks_;
};

torch::autograd::variable_list UnitBackwardGather::backward(torch::autograd::AutogradContext* ctx,
                                                            torch::autograd::variable_list grads) {
  auto* strategy = reinterpret_cast<FullyShardedStrategy*>(ctx->saved_data["strategy"].toInt());
  strategy->before_unit_backward(static_cast<std::size_t>(ctx->saved_data["unit"].toInt()));
  return {grads.at(0), torch::Tensor(), torch::Tensor()};
}

}  // namespace

std::unique_ptr<DataParallelStrategy> make_fully_sharded_strategy(StrategyInputs inputs) {
  return std::make_unique<FullyShardedStrategy>(std::move(inputs));
}

}  // namespace hpctrain::parallel
