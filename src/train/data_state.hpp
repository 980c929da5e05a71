#pragma once
// What a checkpoint records of the training data beyond the sampler's position: the sample
// order's kind, a mixture's per-source counts, and the files (names, sample counts, metadata
// checksums) so that a resume with other files is refused unless data.allow_changed_files.
// Private to the train layer.

#include <nlohmann/json.hpp>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/sampler.hpp"

namespace hpctrain::train {

/// Adds sample_order, source_consumed (mixtures) and data_files to a checkpoint's trainer_state.
/// Local.
void record_data_state(nlohmann::json& trainer_state, const data::TrainSampler& sampler,
                       const data::SamplerState& state, const data::DatasetInfo& train);

/// Checks the checkpoint's data_files against this run's files (DataError, exit 3,
/// naming the difference, unless `allow_changed_files`, then a warning), restores the
/// mixture's per-source counts into `state`, and returns the sample order to continue with (a
/// checkpoint without one predates keyed orders: held). Every rank alike; local.
data::SampleOrder restore_data_state(const nlohmann::json& trainer_state,
                                     const data::DatasetInfo& train, bool allow_changed_files,
                                     data::SamplerState& state);

/// Per-source samples consumed between two states, {name: count}; empty without a mixture.
/// Local.
nlohmann::ordered_json source_counts(const data::TrainSampler& sampler,
                                     const data::SamplerState& before,
                                     const data::SamplerState& after);

}  // namespace hpctrain::train
