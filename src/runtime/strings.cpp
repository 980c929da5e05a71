#include "hpctrain/runtime/strings.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "hpctrain/runtime/error.hpp"

namespace hpctrain {

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0 || std::fabs(bytes - std::round(bytes)) < 0.05) {
    std::snprintf(buf, sizeof buf, "%.0f %s", bytes, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, kUnits[unit]);
  }
  return buf;
}

std::string format_seconds(double s) {
  char buf[48];
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  } else if (s < 1.0) {
    std::snprintf(buf, sizeof buf, "%.0f ms", s * 1e3);
  } else if (s < 120.0) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else if (s < 7200.0) {
    std::snprintf(buf, sizeof buf, "%.0f min %02.0f s", std::floor(s / 60), std::fmod(s, 60.0));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f h %02.0f min", std::floor(s / 3600),
                  std::floor(std::fmod(s, 3600.0) / 60));
  }
  return buf;
}

std::string clip(const std::string& text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  const std::size_t keep = max_chars < 40 ? max_chars : max_chars - 30;
  const std::size_t head = keep * 2 / 3;
  const std::size_t tail = keep - head;
  return str(text.substr(0, head), "...(", text.size(), " characters)...",
             text.substr(text.size() - tail));
}

std::uint64_t parse_bytes(const std::string& text, const std::string& what) {
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw ConfigError(str(what, ": '", text, "' is not a size; write e.g. 65536, 64K, 25MiB, 1G"));
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "B") {
    scale = 1;
  } else if (unit == "K" || unit == "KB" || unit == "KIB") {
    scale = 1024.0;
  } else if (unit == "M" || unit == "MB" || unit == "MIB") {
    scale = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    throw ConfigError(str(what, ": unknown size unit '", unit, "' in '", text,
                          "'; use B, K, M or G (binary multiples)"));
  }
  if (value < 0) throw ConfigError(str(what, ": size '", text, "' is negative"));
  return static_cast<std::uint64_t>(std::llround(value * scale));
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace hpctrain
