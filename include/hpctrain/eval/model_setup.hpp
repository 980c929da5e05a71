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

/// Whose fix an error message suggests: the training config's, or the evaluation's data choice.
enum class FitAdvice { kTraining, kEvaluation };

/// Checks that `dataset` fits `model`, for training and evaluation alike: same task, at least one
/// sample, for language models a vocabulary within `vocab_size` (model.vocab_size); one sample
/// goes through the forward pass, and for classification the file's classes must be within the
/// model's outputs. Throws DataError naming `key` (the option or config key the file came from),
/// the file, the shapes and what to do (`advice`). Collective over the tp group (the forward
/// pass of a tensor-parallel model communicates): every rank calls it. `trial_forward` false
/// skips the forward pass (pipeline stages: one stage cannot run alone; the gpt checks its sizes
/// when it is built and the trainer the sequence length).
void check_data_fits_model(model::Model& model, data::Dataset& dataset, const std::string& key,
                           std::int64_t vocab_size, FitAdvice advice = FitAdvice::kEvaluation,
                           bool trial_forward = true);

}  // namespace hpctrain::eval
