#include "hpctrain/eval/result_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {

namespace fs = std::filesystem;

nlohmann::json EvalKey::to_json() const {
  nlohmann::json j = family();
  j["step"] = step;
  j["checkpoint_xxh3"] = checkpoint_xxh3;
  return j;
}

nlohmann::json EvalKey::family() const {
  return {{"split", split},           {"data_xxh3", data_xxh3},
          {"batch_size", batch_size}, {"max_samples", max_samples},
          {"precision", precision},   {"tag", tag}};
}

namespace {

[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  throw Error(str("cannot ", what, " '", path, "': ", std::strerror(errno),
                  ": check that the results directory is writable (--results DIR)"));
}

void write_all(int fd, const std::string& text, const std::string& path) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail_io("write", path);
    }
    done += static_cast<std::size_t>(n);
  }
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// False when `path` does not exist yet; throws (exit 2) when it is a FIFO, a directory or a
// device: reading or appending to a FIFO would block.
bool results_file_present(const std::string& path) {
  return runtime::require_regular_file_if_present(
      path, runtime::FileKind::kConfig, "results file",
      "the results directory (--results DIR, or the run's eval/) holds regular files only: "
      "remove it or pass another --results");
}

std::optional<nlohmann::json> read_json(const std::string& path) {
  if (!results_file_present(path)) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  const fs::path target(path);
  const std::string dir = target.parent_path().empty() ? "." : target.parent_path().string();
  const std::string tmp = str(path, ".tmp-", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io("create", tmp);
  write_all(fd, text, tmp);
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail_io("sync", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail_io("rename into place", path);
  fsync_dir(dir);
}

ResultStore::ResultStore(std::string dir) : dir_(std::move(dir)) {}

std::string ResultStore::results_file() const {
  return dir_ + "/results.jsonl";
}

std::string ResultStore::step_file(const EvalKey& key) const {
  return step_file(key.step, key.tag);
}

std::string ResultStore::step_file(std::int64_t step, const std::string& tag) const {
  return str(dir_, "/", checkpoint::step_dir_name(step), tag.empty() ? "" : "." + tag, ".json");
}

bool ResultStore::line_present(const nlohmann::json& key_json) const {
  if (!results_file_present(results_file())) return false;
  std::ifstream in(results_file());
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      if (j.contains("key") && j.at("key") == key_json) return true;
    } catch (const nlohmann::json::exception&) {
      // A line cut short by a crash: ignored.
    }
  }
  return false;
}

void ResultStore::append_line(const std::string& line) {
  const std::string path = results_file();
  results_file_present(path);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail_io("open", path);
  // A line cut short by a crash (no final newline) stays on its own line, unreadable and
  // ignored, instead of swallowing the new one.
  std::string text = line + "\n";
  struct stat st {};
  char last = '\n';
  if (::fstat(fd, &st) == 0 && st.st_size > 0 && ::pread(fd, &last, 1, st.st_size - 1) == 1 &&
      last != '\n') {
    text.insert(0, "\n");
  }
  // One write() of the whole line with O_APPEND: concurrent or interrupted writers never
  // interleave parts of lines.
  write_all(fd, text, path);
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail_io("sync", path);
}

bool ResultStore::has(const EvalKey& key) {
  const auto stored = read_json(step_file(key));
  const nlohmann::json key_json = key.to_json();
  if (!stored || !stored->contains("key") || stored->at("key") != key_json) return false;
  if (!line_present(key_json)) append_line(stored->dump());
  return true;
}

nlohmann::json ResultStore::write(const EvalKey& key, const nlohmann::ordered_json& record,
                                  const std::string& metric, bool higher_is_better) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error(str("cannot create '", dir_, "': ", ec.message()));
  write_file_atomic(step_file(key), record.dump(2) + "\n");
  append_line(record.dump());

  nlohmann::json best;
  for (const auto& r : family_records(key)) {
    if (!r.contains(metric) || !r.at(metric).is_number()) continue;
    const double value = r.at(metric).get<double>();
    if (best.is_null()) {
      best = r;
      continue;
    }
    const double best_value = best.at(metric).get<double>();
    // Ties go to the later step, as checkpoint retention's keep-best does.
    if (higher_is_better ? value >= best_value : value <= best_value) best = r;
  }
  if (!best.is_null()) {
    nlohmann::ordered_json out{{"metric", metric},
                               {"higher_is_better", higher_is_better},
                               {"value", best.at(metric)},
                               {"step", best.at("step")},
                               {"checkpoint", best.value("checkpoint", std::string())},
                               {"result", step_file(best.at("step").get<std::int64_t>(), key.tag)},
                               {"key", best.at("key")}};
    // What producing that checkpoint cost against evaluating it (docs/EVAL.md).
    if (best.contains("cost")) out["cost"] = best.at("cost");
    write_file_atomic(str(dir_, "/best", key.tag.empty() ? "" : "." + key.tag, ".json"),
                      out.dump(2) + "\n");
  }
  return best;
}

std::vector<nlohmann::json> ResultStore::family_records(const EvalKey& key) const {
  const nlohmann::json family = key.family();
  std::map<std::int64_t, nlohmann::json> by_step;
  if (!results_file_present(results_file())) return {};
  std::ifstream in(results_file());
  std::string line;
  while (std::getline(in, line)) {
    try {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("key") || !j.contains("step")) continue;
      nlohmann::json k = j.at("key");
      k.erase("step");
      k.erase("checkpoint_xxh3");
      if (k != family) continue;
      by_step[j.at("step").get<std::int64_t>()] = j;
    } catch (const nlohmann::json::exception&) {
      // A line cut short by a crash: ignored.
    }
  }
  std::vector<nlohmann::json> out;
  for (auto& [step, j] : by_step) out.push_back(std::move(j));
  return out;
}

}  // namespace hpctrain::eval
