#pragma once
// Checks of the model section against the data that run before the model is built, so that a
// size that does not fit the data is reported as such instead of as a failed allocation of an
// enormous layer. Private to the train layer.

#include <string>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/runtime/config.hpp"

namespace hpctrain::train {

/// Throws DataError when the model section's input size (model.in_features of an mlp,
/// model.input_shape of a cnn) does not match the samples of `info` (the file named by config
/// key `key`), naming both and the value to set. Local; reads the keys with their defaults.
void check_model_input_fits_data(ConfigSection& model_section, const data::DatasetInfo& info,
                                 const std::string& key);

}  // namespace hpctrain::train
