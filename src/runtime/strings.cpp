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

std::string and_list(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  }
  return out;
}

std::string clip(const std::string& text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  const std::size_t keep = max_chars < 40 ? max_chars : max_chars - 30;
  const std::size_t head = keep * 2 / 3;
  const std::size_t tail = keep - head;
  return str(text.substr(0, head), "...(", text.size(), " characters)...",
             text.substr(text.size() - tail));
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
