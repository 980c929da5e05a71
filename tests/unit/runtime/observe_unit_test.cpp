// The TensorBoard encoder's framing (CRC-32C test vector, masked CRC, TFRecord layout, Event
// bytes) and the resource monitor's memory figures (a touched buffer raises RSS and its peak).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hpctrain/runtime/resource_monitor.hpp"
#include "hpctrain/runtime/tensorboard_writer.hpp"

namespace hpctrain::runtime {
namespace {

TEST(TensorBoard, Crc32cMatchesTheStandardCheckValue) {
  // CRC-32C of "123456789" (RFC 3720, appendix B.4's check value).
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(TensorBoard, RecordFramingHoldsLengthPayloadAndMaskedCrcs) {
  const std::string payload = "abc";
  const std::string r = tfrecord(payload);
  ASSERT_EQ(r.size(), 8 + 4 + payload.size() + 4);
  std::uint64_t length = 0;
  std::memcpy(&length, r.data(), 8);
  EXPECT_EQ(length, 3u);
  std::uint32_t length_crc = 0, payload_crc = 0;
  std::memcpy(&length_crc, r.data() + 8, 4);
  std::memcpy(&payload_crc, r.data() + 15, 4);
  EXPECT_EQ(length_crc, masked_crc32c(r.data(), 8));
  EXPECT_EQ(payload_crc, masked_crc32c("abc", 3));
  const std::uint32_t crc = crc32c("abc", 3);
  EXPECT_EQ(payload_crc, ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, ScalarEventHasProtobufFieldsInOrder) {
  const std::string e = scalar_event(1.5, 300, {{"a", 2.0}});
  std::string want;
  want += '\x09';  // field 1, fixed64
  double wall = 1.5;
  want.append(reinterpret_cast<const char*>(&wall), 8);
  want += "\x10\xac\x02";  // field 2, varint 300
  want += "\x2a\x0a";      // field 5 (summary), 10 bytes
  want += "\x0a\x08";      // Summary.value, 8 bytes
  want +=
      "\x0a\x01"
      "a";         // Value.tag
  want += '\x15';  // Value.simple_value, fixed32
  float v = 2.0f;
  want.append(reinterpret_cast<const char*>(&v), 4);
  EXPECT_EQ(e, want);
}

TEST(ResourceMonitor, TouchedBufferRaisesResidentMemoryAndPeak) {
  ResourceMonitor monitor;
  const ResourceSample before = monitor.sample();
  ASSERT_GT(before.rss_bytes, 0);
  ASSERT_GE(before.peak_rss_bytes, before.rss_bytes);
  const std::size_t extra = std::size_t{96} << 20;
  std::vector<char> buffer(extra, 1);
  const ResourceSample after = monitor.sample();
  const double grew = static_cast<double>(after.rss_bytes - before.rss_bytes);
  EXPECT_NEAR(grew, static_cast<double>(extra), 0.1 * static_cast<double>(extra));
  EXPECT_GE(after.peak_rss_bytes, before.rss_bytes + static_cast<std::int64_t>(extra * 9 / 10));
  EXPECT_EQ(after.device_util_percent, -1);  // no device asked for
  EXPECT_GE(after.cpu_percent, 0);
  EXPECT_EQ(buffer[extra - 1], 1);
}

}  // namespace
}  // namespace hpctrain::runtime
