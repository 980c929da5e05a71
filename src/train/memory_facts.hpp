#pragma once
// What the ledger records about memory (ledger.json "memory_per_rank"): the bytes of this rank's
// parameters, gradients and optimizer state as allocated, and the activation estimate of
// docs/PLAN.md for one micro-batch of the gpt. Private to the train layer.

#include "hpctrain/train/ledger.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain::model {
class Model;
}
namespace hpctrain::parallel {
class DataParallelStrategy;
}

namespace hpctrain::train {

class Optimizer;

/// Fills the memory fields of `facts`. Local.
void add_memory_facts(LedgerFacts& facts, model::Model& model, parallel::DataParallelStrategy& dp,
                      Optimizer& optimizer, const TrainConfig& cfg);

}  // namespace hpctrain::train
