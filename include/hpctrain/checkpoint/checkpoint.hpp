#pragma once
// Checkpoints that survive preemption (docs/ARCHITECTURE.md, invariants 3 and 4): the whole public
// API of the checkpoint layer. Format and commit protocol: docs/CHECKPOINTS.md.
//   checkpoint_manager.hpp  CheckpointManager: save (background), wait, resolve, load
//   manifest.hpp            directory names, tensor locations, manifest and checksums
//   verify.hpp              verify, list_checkpoints, read_latest
//   retention.hpp           which checkpoints a run keeps

#include "hpctrain/checkpoint/checkpoint_manager.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/retention.hpp"
#include "hpctrain/checkpoint/verify.hpp"
