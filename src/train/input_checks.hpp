#pragma once
// Checks of the model section against the data that run before the model is built, so that a
// size that does not fit the data is reported as such instead of as a failed allocation of an
// enormous layer. Private to the train layer.

#include <string>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/model/model_spec.hpp"

namespace hpctrain::train {

/// Throws DataError when the input the model section declares (model.in_features of an mlp,
/// model.input_shape of a cnn: ModelSpec::input_shape) does not match the samples of `info` (the
/// file named by config key `key`), naming both and the value to set. Local.
void check_model_input_fits_data(const model::ModelSpec& spec, const data::DatasetInfo& info,
                                 const std::string& key);

}  // namespace hpctrain::train
