#include "hpctrain/train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/tensorboard_writer.hpp"

namespace hpctrain::train {
namespace {

// Whether the person who started the job sees this process's stdout on a terminal. OpenMPI gives
// the ranks it starts a pseudo-terminal of their own even when mpirun's output goes to a file or a
// pipe (`mpirun ... > log`, `| tee`, mpirun inside a batch job): under mpirun, mpirun's own stdout
// decides (rank 0's parent on the launching node). Under srun, a terminal means `srun --pty`.
bool output_is_terminal() {
  if (isatty(STDOUT_FILENO) == 0) return false;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return true;
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(str("/proc/", getppid(), "/fd/1"), ec);
  if (ec) return false;  // parent not readable (e.g. a remote daemon): plain lines are safe
  const std::string name = target.string();
  return name.rfind("/dev/pts/", 0) == 0 || name.rfind("/dev/tty", 0) == 0;
}

// metrics.jsonl present (true), absent (false), or refused (a FIFO, a directory: exit 2).
bool require_metrics_file(const std::string& path) {
  return runtime::require_regular_file_if_present(
      path, runtime::FileKind::kConfig, "run.dir's metrics file",
      "a run directory holds regular files only: remove it, or use another run.dir");
}

// Keeps the records of `path` up to `resume_step` and moves those of later steps (a killed run
// went on past the checkpoint that is being resumed) to `path`.superseded; the kept ones are
// written to a temporary file renamed over `path`, so a crash leaves the old or the new file.
void drop_records_after(const std::string& path, std::int64_t resume_step) {
  if (!require_metrics_file(path)) return;
  std::ifstream in(path);
  if (!in) return;
  std::string kept, dropped;
  std::int64_t count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const bool later = !j.is_discarded() && j.is_object() && j.contains("step") &&
                       j.at("step").is_number_integer() &&
                       j.at("step").get<std::int64_t>() > resume_step;
    (later ? dropped : kept) += line + "\n";
    count += later ? 1 : 0;
  }
  in.close();
  if (count == 0) return;
  const std::string temp = path + ".tmp";
  {
    std::ofstream aside(path + ".superseded", std::ios::app);
    aside << dropped;
    std::ofstream out(temp, std::ios::trunc);
    out << kept;
    out.flush();
    if (!out || !aside) {
      throw Error(str("cannot rewrite ", path, " on resume (", std::strerror(errno),
                      "): check that run.dir is writable and has free space"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) throw Error(str("cannot replace ", path, " on resume: ", ec.message()));
  log::info(str("metrics.jsonl: moved ", count, " record(s) of steps after ", resume_step,
                " (written by a run that stopped before its next checkpoint) to ", path,
                ".superseded"));
}

}  // namespace

RunLog::RunLog(bool active, const std::string& run_dir, ProgressMode mode, std::int64_t total_steps,
               std::int64_t resume_step)
    : active_(active), total_steps_(total_steps), start_(std::chrono::steady_clock::now()) {
  if (!active_) return;
  live_ = mode == ProgressMode::kLive || (mode == ProgressMode::kAuto && output_is_terminal());
  off_ = mode == ProgressMode::kOff;
  const std::string path = run_dir + "/metrics.jsonl";
  std::error_code ec;
  if (resume_step == 0 && std::filesystem::file_size(path, ec) > 0 && !ec) {
    const auto stamp = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    std::filesystem::rename(path, str(path, ".prev-", stamp), ec);
  } else if (resume_step > 0) {
    drop_records_after(path, resume_step);
  }
  require_metrics_file(path);  // opening a FIFO to append would block
  metrics_.open(path, std::ios::app);
  if (!metrics_) {
    throw Error(str("cannot open ", path, " for appending: check that run.dir is writable"));
  }
}

RunLog::~RunLog() {
  if (active_ && live_shown_) std::printf("\n");
}

void RunLog::record(nlohmann::ordered_json object) {
  if (!active_) return;
  object["time"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  // Text (a sample of a byte-level model) may hold a cut UTF-8 sequence: written replaced.
  metrics_ << object.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
  metrics_.flush();
  if (tensorboard_ && object.contains("step") && object["step"].is_number_integer()) {
    const auto step = object["step"].get<std::int64_t>();
    tensorboard_->add_scalars(step, tensorboard_scalars(object));
    // A sample (logging.sample_every, docs/GENERATE.md) is text: TensorBoard's text plugin.
    if (object.value("type", "") == "sample") {
      tensorboard_->add_text(step, "sample", object.value("prompt", "") + object.value("text", ""));
    }
  }
}

void RunLog::enable_tensorboard(const std::string& dir) {
  if (!active_) return;
  tensorboard_ = std::make_unique<runtime::TensorBoardWriter>(dir);
  log::debug(str("TensorBoard events: ", tensorboard_->path()));
}

namespace {
void add_numbers(const std::string& prefix, const nlohmann::ordered_json& object,
                 std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [key, value] : object.items()) {
    if (key == "type" || key == "step" || key == "epoch" || key == "time") continue;
    if (value.is_number()) {
      out.emplace_back(prefix + key, value.get<double>());
    } else if (value.is_object()) {
      add_numbers(prefix + key + "/", value, out);
    }
  }
}
}  // namespace

std::vector<std::pair<std::string, double>> tensorboard_scalars(
    const nlohmann::ordered_json& record) {
  std::vector<std::pair<std::string, double>> out;
  const std::string type = record.value("type", "");
  if (type == "train" || type == "eval" || type == "checkpoint")
    add_numbers(type + "/", record, out);
  if (type == "straggler" && record.contains("rank") && record.contains("ratio")) {
    // One series per rank and time: "straggler/rank_2/compute" is how much slower than the
    // median rank 2 was while named.
    std::string which = record.value("which", "compute");
    std::replace(which.begin(), which.end(), ' ', '_');
    out.emplace_back(str("straggler/rank_", record["rank"].get<int>(), "/", which),
                     record["ratio"].get<double>());
  }
  return out;
}

void RunLog::live(std::int64_t step, std::int64_t epoch, double loss, double lr,
                  double samples_per_s, std::int64_t memory_bytes) {
  if (!active_ || !live_ || off_) return;
  auto now = std::chrono::steady_clock::now();
  if (live_shown_ && now - last_live_ < std::chrono::milliseconds(200) && step < total_steps_)
    return;
  last_live_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = step > 0 ? elapsed / step * static_cast<double>(total_steps_ - step) : 0;
  const std::string memory =
      memory_bytes > 0 ? str(" | mem ", format_bytes(static_cast<double>(memory_bytes))) : "";
  std::printf(
      "\r\033[K step %lld/%lld | epoch %lld | loss %.4f | lr %.2e | %.0f samples/s%s | ETA %s",
      static_cast<long long>(step), static_cast<long long>(total_steps_),
      static_cast<long long>(epoch), loss, lr, samples_per_s, memory.c_str(),
      format_seconds(eta).c_str());
  std::fflush(stdout);
  live_shown_ = true;
}

void RunLog::line(const std::string& text) {
  if (!active_ || off_) return;
  if (live_shown_) std::printf("\r\033[K");
  std::printf("[hpctrain] %s\n", text.c_str());
  std::fflush(stdout);
  live_shown_ = false;
}

}  // namespace hpctrain::train
