#pragma once
// model.init_from in a training run: every rank loads the pretrained weights (its tensor-parallel
// slab) once the run is known to start fresh, and the ranks agree on the outcome. Private to the
// train layer.

#include <string>

#include "hpctrain/comm/environment.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/data_parallel_strategy.hpp"

namespace hpctrain::train {

/// Initialises `model`'s parameters from `path` (checkpoint::init_model_from) on every rank, then
/// agrees over the world: a rank that failed makes every rank throw its error once (exit 4, one
/// message from world rank 0). World rank 0 logs the source and the notes. The weights reach
/// `dp`'s master copy in float32: where the model's parameters are not the master copy
/// (parallel.shard: full, whose gathered copies may be bfloat16), they are loaded into a float32
/// copy of the layout and taken from there, as a checkpoint load does. Collective over the world.
void init_weights_from(model::Model& model, const std::string& path, comm::Environment& env,
                       parallel::DataParallelStrategy& dp);

}  // namespace hpctrain::train
