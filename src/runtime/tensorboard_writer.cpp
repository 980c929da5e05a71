#include "hpctrain/runtime/tensorboard_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;  // reflected 0x1EDC6F41
    table[i] = c;
  }
  return table;
}

// Protobuf wire format: varints, fixed-width little-endian fields, length-delimited fields.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire_type));
}
template <typename T>
void put_fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86 and ARM Linux are little-endian, as protobuf is
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(double wall_time, std::int64_t step) {
  std::string e;
  put_tag(e, 1, 1);  // wall_time: double
  put_fixed(e, wall_time);
  put_tag(e, 2, 0);  // step: int64
  put_varint(e, static_cast<std::uint64_t>(step));
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t bytes) {
  static const std::array<std::uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < bytes; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t bytes) {
  const std::uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string out;
  const std::uint64_t length = payload.size();
  put_fixed(out, length);
  put_fixed(out, masked_crc32c(out.data(), sizeof length));
  out += payload;
  put_fixed(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

std::string scalar_event(double wall_time, std::int64_t step,
                         const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, 1, tag);  // Value.tag
    put_tag(v, 2, 5);      // Value.simple_value: float
    put_fixed(v, static_cast<float>(value));
    put_bytes(summary, 1, v);  // Summary.value (repeated)
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

std::string text_event(double wall_time, std::int64_t step, const std::string& tag,
                       const std::string& text) {
  std::string plugin;
  put_bytes(plugin, 1, "text");  // PluginData.plugin_name
  std::string metadata;
  put_bytes(metadata, 1, plugin);  // SummaryMetadata.plugin_data
  std::string tensor;
  put_tag(tensor, 1, 0);  // TensorProto.dtype = DT_STRING
  put_varint(tensor, 7);
  put_bytes(tensor, 2, "");    // TensorProto.tensor_shape: a scalar
  put_bytes(tensor, 8, text);  // TensorProto.string_val
  std::string v;
  put_bytes(v, 1, tag);       // Value.tag
  put_bytes(v, 8, tensor);    // Value.tensor
  put_bytes(v, 9, metadata);  // Value.metadata
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const auto seconds = static_cast<long long>(now_seconds());
  path_ = str(dir, "/events.out.tfevents.", seconds, ".", host);
  // A second writer in the same second (a quick restart) must not interleave with the first file.
  for (int i = 1; std::filesystem::exists(path_, ec); ++i) {
    path_ = str(dir, "/events.out.tfevents.", seconds, ".", host, ".", i);
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw Error(str("cannot create the TensorBoard event file ", path_, " (", std::strerror(errno),
                    "): check that run.dir is writable, or set logging.tensorboard=false"));
  }
  std::string e = event_header(now_seconds(), 0);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version
  write_record(e);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(std::int64_t step,
                                    const std::vector<std::pair<std::string, double>>& values) {
  if (values.empty()) return;
  write_record(scalar_event(now_seconds(), step, values));
}

void TensorBoardWriter::add_text(std::int64_t step, const std::string& tag,
                                 const std::string& text) {
  write_record(text_event(now_seconds(), step, tag, text));
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const std::string record = tfrecord(payload);
  // One write per record: the file holds whole records whenever the process dies. A short write
  // (a full disk) is cut off again, so that later records stay readable.
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  ssize_t n = ::write(fd_, record.data(), record.size());
  if (n == static_cast<ssize_t>(record.size())) return;
  if (n > 0 && before >= 0 && ::ftruncate(fd_, before) != 0) n = -1;
  if (!warned_) {
    warned_ = true;
    log::warn(str("TensorBoard event file ", path_, ": write failed (",
                  n < 0 ? std::strerror(errno) : "short write",
                  "); later records may be missing there (metrics.jsonl has them)"));
  }
}

}  // namespace hpctrain::runtime
