#pragma once
// Small string helpers used by messages everywhere: concatenation, human-readable sizes and
// durations, and the one reading of a size in bytes that every option and config key taking one
// uses (data.chunk_cache, --memory-budget, --device-memory, --ckpt-bandwidth, ...), with one unit
// table: binary units are powers of 2 (KiB = 2^10 ...; K, M, G, T alone mean the same, as in dd
// and numfmt), decimal units powers of 10 (KB = 10^3 ...); docs/CONFIG.md ("Sizes"). Header-only
// but for the formatting functions, so the pure plan library parses sizes the same way.

#include <cctype>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/runtime/error.hpp"

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

/// `items` as a message lists them: "a", "a and b", "a, b and c" ("" for none). Local.
std::string and_list(const std::vector<std::string>& items);

/// The unit table every size error ends with.
inline const char* byte_units_help() {
  return "units: KiB, MiB, GiB, TiB (or K, M, G, T) = 2^10, 2^20, 2^30, 2^40 bytes; KB, MB, GB, "
         "TB = 10^3, 10^6, 10^9, 10^12 bytes";
}

/// The multiple of unit `unit` (case-insensitive, "" and "B": 1), or 0 when it is none. Local.
inline double byte_unit_scale(std::string unit) {
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.empty() || unit == "B") return 1;
  const std::string prefixes = "KMGT";
  const auto power = prefixes.find(unit[0]);
  if (power == std::string::npos) return 0;
  const std::string rest = unit.substr(1);
  if (rest.empty() || rest == "IB") return std::ldexp(1.0, 10 * static_cast<int>(power + 1));
  if (rest == "B") return std::pow(10.0, 3.0 * static_cast<double>(power + 1));
  return 0;
}

/// Parses a size: a positive number (65536, 0.5KiB, 1.5e9) and an optional unit of the table
/// above, spaces allowed between ("141 GB"). Throws ConfigError naming `what` (the key or option)
/// and the units. Local.
inline std::uint64_t parse_bytes(const std::string& text, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return ConfigError(str(what, " = '", text,
                           "': expected a positive size such as 80GiB, 141GB or 1.5e9 (", why,
                           "); ", byte_units_help()));
  };
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw bad("not a number");
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  const double scale = byte_unit_scale(unit);
  if (scale == 0) throw bad(str("unknown size unit '", unit, "'"));
  if (!std::isfinite(value)) throw bad("not finite");
  if (value < 0) throw bad("negative");
  const double bytes = std::round(value * scale);
  if (bytes >= 18446744073709551615.0) throw bad("too large");
  if (bytes < 1) throw bad("less than one byte");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace hpctrain
