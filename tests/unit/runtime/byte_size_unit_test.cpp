// The one size parser every option and key uses (runtime/strings.hpp, docs/CONFIG.md "Sizes"):
// binary units are powers of 2 and decimal units powers of 10, whatever the option, so "1GB"
// means one size everywhere; the error names the key and the whole unit table.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain {
namespace {

TEST(ByteSize, BinaryUnitsArePowersOfTwo) {
  EXPECT_EQ(parse_bytes("1KiB", "x"), 1024u);
  EXPECT_EQ(parse_bytes("1MiB", "x"), 1024u * 1024);
  EXPECT_EQ(parse_bytes("1GiB", "x"), 1024ull * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1TiB", "x"), 1024ull * 1024 * 1024 * 1024);
  // A bare prefix is binary too (as dd and numfmt read it).
  EXPECT_EQ(parse_bytes("3K", "x"), 3u * 1024);
  EXPECT_EQ(parse_bytes("3M", "x"), 3u * 1024 * 1024);
  EXPECT_EQ(parse_bytes("3G", "x"), 3ull << 30);
  EXPECT_EQ(parse_bytes("3T", "x"), 3ull << 40);
}

TEST(ByteSize, DecimalUnitsArePowersOfTen) {
  EXPECT_EQ(parse_bytes("1KB", "x"), 1000u);
  EXPECT_EQ(parse_bytes("1MB", "x"), 1000u * 1000);
  EXPECT_EQ(parse_bytes("1GB", "x"), 1000ull * 1000 * 1000);
  EXPECT_EQ(parse_bytes("1TB", "x"), 1000ull * 1000 * 1000 * 1000);
  EXPECT_EQ(parse_bytes("141 GB", "x"), 141000000000ull);
  // The same word is the same size whatever the option: 1 GB is not 1 GiB.
  EXPECT_NE(parse_bytes("1GB", "--ckpt-bandwidth"), parse_bytes("1GiB", "--device-memory"));
}

TEST(ByteSize, NumbersCaseAndSpaces) {
  EXPECT_EQ(parse_bytes("65536", "x"), 65536u);
  EXPECT_EQ(parse_bytes("512B", "x"), 512u);
  EXPECT_EQ(parse_bytes("1.5e9", "x"), 1500000000u);
  EXPECT_EQ(parse_bytes("0.5KiB", "x"), 512u);
  EXPECT_EQ(parse_bytes("2 mib", "x"), 2u << 20);
  EXPECT_EQ(parse_bytes("2gb", "x"), 2000000000u);
  EXPECT_EQ(parse_bytes("2 kB", "x"), 2000u);
}

// The message of the ConfigError parse_bytes throws for data.chunk_cache, or "" when it reads.
std::string size_error_of(const std::string& text) {
  try {
    parse_bytes(text, "data.chunk_cache");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ByteSize, ErrorsNameTheKeyAndTheUnitTable) {
  // A size is positive (0 bytes of cache, of memory, of bandwidth means nothing).
  for (const char* bad : {"", "lots", "GiB", "12 parsecs", "1 KiBB", "1 Ki", "-1KiB", "0", "0.1",
                          "1e400", "inf", "nan"}) {
    const std::string message = size_error_of(bad);
    EXPECT_NE(message.find("data.chunk_cache = '"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("expected a positive size such as 80GiB, 141GB"), std::string::npos)
        << bad << ": " << message;
    EXPECT_NE(message.find("KiB, MiB, GiB, TiB"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("2^10"), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("KB, MB, GB, TB = 10^3"), std::string::npos) << bad << ": " << message;
  }
  EXPECT_NE(size_error_of("12 parsecs").find("unknown size unit 'parsecs'"), std::string::npos);
  EXPECT_NE(size_error_of("-1KiB").find("negative"), std::string::npos);
  EXPECT_NE(size_error_of("0").find("less than one byte"), std::string::npos);
}

}  // namespace
}  // namespace hpctrain
