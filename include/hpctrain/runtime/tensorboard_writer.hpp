#pragma once
// TensorBoard event files written without TensorFlow: TFRecord framing (length, masked CRC-32C of
// the length, the record, masked CRC-32C of the record) around Event protobufs with scalar
// summaries, encoded by hand (the field numbers of tensorflow/core/util/event.proto and
// summary.proto: Event.wall_time = 1, step = 2, file_version = 3, summary = 5; Summary.value = 1;
// Value.tag = 1, simple_value = 2). Every record is one write(2) to the file, so a run killed at
// any moment leaves only whole records.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::runtime {

/// CRC-32C (Castagnoli) of `bytes`. Local.
std::uint32_t crc32c(const void* data, std::size_t bytes);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. Local.
std::uint32_t masked_crc32c(const void* data, std::size_t bytes);

/// One TFRecord: the framing around `payload`. Local.
std::string tfrecord(const std::string& payload);
/// A serialised Event holding scalar summaries (`values`: tag, value). Local.
/// An Event holding `text` under `tag` for TensorBoard's text plugin (SummaryMetadata plugin
/// "text", a scalar DT_STRING tensor). Local.
std::string text_event(double wall_time, std::int64_t step, const std::string& tag,
                       const std::string& text);
std::string scalar_event(double wall_time, std::int64_t step,
                         const std::vector<std::pair<std::string, double>>& values);

/// Appends events to `<dir>/events.out.tfevents.<seconds>.<host>`. Local; one writer per file.
class TensorBoardWriter {
 public:
  /// Creates `dir` if needed and the event file, starting with the file_version record
  /// ("brain.Event:2"). Throws Error naming the path when it cannot. Local.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  /// Writes one Event with these scalars at `step` (wall time now). A failed write is reported
  /// once as a warning and the run goes on (the event file is a view, not the record). Local.
  void add_scalars(std::int64_t step, const std::vector<std::pair<std::string, double>>& values);
  /// Writes one Event with `text` under `tag` at `step`, as TensorBoard's text plugin reads it
  /// (a string tensor with plugin "text"; shown as markdown). Local.
  void add_text(std::int64_t step, const std::string& tag, const std::string& text);
  /// The event file's path. Local.
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  int fd_ = -1;
  bool warned_ = false;
};

}  // namespace hpctrain::runtime
