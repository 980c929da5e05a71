#pragma once
// Small string helpers used by messages everywhere: concatenation and human-readable sizes.

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

namespace hpctrain {

/// Concatenates anything streamable: str("step ", 3, " loss ", 0.25). Local.
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

/// "64 KiB", "1.5 MiB", "3 B": binary units, at most one decimal. Local.
std::string format_bytes(double bytes);

/// "1.2 s", "35 ms", "2 h 03 min": a duration for humans. Local.
std::string format_seconds(double seconds);

/// The current UTC time as ISO 8601, "2026-11-30T19:32:05Z" (for created_at fields). Local.
std::string utc_timestamp();

/// `text` cut to at most `max_chars` characters for a message: a long value keeps its start and
/// end, joined by "...(N characters)...", so a 1 MB `--set` value does not become a 1 MB line.
/// Local.
std::string clip(const std::string& text, std::size_t max_chars = 200);

/// Parses "64K", "1M", "2GiB", "1048576" into bytes; throws ConfigError naming `what`. Local.
std::uint64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace hpctrain
