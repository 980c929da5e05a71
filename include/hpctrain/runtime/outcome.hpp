#pragma once
// How a training job ended, in a file (run.dir/outcome.json, or train --outcome-file): one JSON
// line {"exit_code", "reason", "step", "rank", "time"}, and for exit 5 and 7 "flight": the
// directory of the ranks' flight recorder files. A caller of mpirun does not see the ranks'
// exit code when the launcher itself was signalled (OpenMPI's mpirun ends with 1 after forwarding
// SIGTERM or SIGINT) or a rank was killed (137): the file says 75 or 5. jobs/train.sbatch and
// jobs/train-chain.sh decide from it (README.md, "Exit codes").

#include <cstdint>
#include <string>

namespace hpctrain::runtime {

/// Where this process writes the outcome (empty: nowhere). The previous start's file is removed
/// by `remove_old` (world rank 0 at the start of a run). Local.
void set_outcome_file(const std::string& path, bool remove_old);
/// The step the outcome names (the training loop updates it each step). Local, lock-free.
void set_outcome_step(std::int64_t step);
/// Writes the outcome atomically (a temporary file of this process, then rename); never throws,
/// safe to call from any thread while the process ends. Local.
void write_outcome(int exit_code, const std::string& reason, int rank);

}  // namespace hpctrain::runtime
