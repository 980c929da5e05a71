#pragma once
// Getting a model ready for evaluation: the checkpoint records that hold its weights, and the
// check that a data file fits it (before any collective, so a mismatch is one clear DataError).

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/checkpoint/checkpoint_manager.hpp"

namespace hpctrain::data {
class Dataset;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::eval {

/// "model/<name>" records for every named parameter of `model` (this rank's shard, with the
/// model's shard_info), as live views: CheckpointManager::load writes the weights in place,
/// resharding for any tp size. Optimizer state is not loaded. Local.
std::vector<checkpoint::TensorRecord> model_records(model::Model& model);

/// Checks that `dataset` fits `model`: same task; for classification, one sample goes through the
/// forward pass and the file's classes are within the model's outputs; for language models, the
/// file's vocabulary is within `vocab_size` (model.vocab_size). Throws DataError naming `key`
/// (the option or config key the file came from), the file, the shapes and what to do. Local
/// (classification models are data-parallel only; language models are not run here).
void check_data_fits_model(model::Model& model, data::Dataset& dataset, const std::string& key,
                           std::int64_t vocab_size);

}  // namespace hpctrain::eval
