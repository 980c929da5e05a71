#pragma once
// Rank 0's view of a run: metrics.jsonl (one JSON object per logged step, evaluation and
// checkpoint event) and the progress output — a live, rewritten line on a terminal, plain
// periodic lines when the output is a file (Slurm logs).

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::runtime {
class TensorBoardWriter;
}

namespace hpctrain::train {

/// How progress is shown: auto (live line on a terminal, else plain lines), live, plain, off.
enum class ProgressMode { kAuto, kLive, kPlain, kOff };

class RunLog {
 public:
  /// `active` is true on the rank that writes (world rank 0).
  /// Appends to <run_dir>/metrics.jsonl so a resumed run continues the same file, which stays one
  /// consistent history: a run resuming at `resume_step` > 0 first moves every record of a later
  /// step (written after that checkpoint by a run that was killed) to metrics.jsonl.superseded,
  /// so no step is recorded twice. A run starting at step 0 (`resume_step` 0) moves an existing
  /// file aside to metrics.jsonl.prev-<time>. Throws Error naming the file when it cannot be
  /// written. Local.
  RunLog(bool active, const std::string& run_dir, ProgressMode mode, std::int64_t total_steps,
         std::int64_t resume_step);
  ~RunLog();

  /// Appends one object to metrics.jsonl (adds "time", seconds since the epoch), and with
  /// TensorBoard enabled writes its numbers as scalars (tensorboard_scalars). Local.
  void record(nlohmann::ordered_json object);
  /// From now on, mirrors the numbers of every train, eval and checkpoint record into a
  /// TensorBoard event file in `dir`. Throws Error naming the file when it cannot be created.
  /// Local (only the active rank writes).
  void enable_tensorboard(const std::string& dir);
  /// Updates the live line (terminal only; at most 5 times a second); `memory_bytes` > 0 is
  /// shown as this rank's resident memory. Local.
  void live(std::int64_t step, std::int64_t epoch, double loss, double lr, double samples_per_s,
            std::int64_t memory_bytes = 0);
  /// Prints a permanent line (clearing the live line first). Local.
  void line(const std::string& text);
  /// Whether the live line is in use. Local.
  bool is_live() const { return live_; }

 private:
  bool active_;
  bool live_ = false;
  bool off_ = false;
  bool live_shown_ = false;
  std::int64_t total_steps_;
  std::ofstream metrics_;
  std::unique_ptr<runtime::TensorBoardWriter> tensorboard_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_live_;
};

/// The TensorBoard scalars of a metrics.jsonl record: "<type>/<key>" for every number of a
/// train, eval or checkpoint record (nested objects add "/<key>" per level), without step,
/// epoch and time; none for other records. Local.
std::vector<std::pair<std::string, double>> tensorboard_scalars(
    const nlohmann::ordered_json& record);

}  // namespace hpctrain::train
