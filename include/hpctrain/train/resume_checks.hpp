#pragma once
// What a resuming trainer takes from a checkpoint's manifest, checked for range and consistency
// beyond types: a manifest edited and resealed (its checksum recomputed) passes its own check, and
// the manifest's reader checks only what holds for any checkpoint (checkpoint/manifest.hpp).
// Here: the trainer state against the manifest's fields, the sample position against the training
// set, the RNG state against the world (docs/CHECKPOINTS.md, "Trust").

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hpctrain::train {

/// What the checks know of the run that resumes (each optional: `inspect checkpoint` has no run).
struct ResumeFacts {
  /// Samples in one epoch of the training set; nullopt: the sum of the sample counts the
  /// checkpoint's trainer_state.data_files records, or unchecked when it records none.
  std::optional<std::int64_t> samples_per_epoch;
  /// The resuming world's size: an RNG state must be present when it equals the saved one.
  /// nullopt: the saved world's (a checkpoint written by `train` always holds one).
  std::optional<std::int64_t> world_size;
};

/// Every problem of `manifest`'s trainer state, each naming the field, its value and what it must
/// be ("trainer_state.epoch is 99 but ..."); empty when there is none. Local.
std::vector<std::string> resume_state_problems(const nlohmann::json& manifest,
                                               const ResumeFacts& facts);

}  // namespace hpctrain::train
