#include "output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {

std::string number_text(double v) {
  char buf[64];
  if (std::fabs(v - std::round(v)) < 1e-9 && std::fabs(v) < 1e9) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

std::string percent_text(double fraction) {
  char buf[32];
  const double pct = std::round(fraction * 1000) / 10;
  std::snprintf(buf, sizeof buf, "%+.1f%%", pct == 0 ? 0.0 : pct);
  return buf;
}

std::string human_seconds(double s) {
  if (s < 120) return "";
  if (s >= 2 * 86400) return str("(", number_text(std::round(s / 86400 * 10) / 10), " days)");
  return str("(", format_seconds(s), ")");
}

void Table::section(const std::string& title) {
  rows_.push_back({"", title, "", ""});
}

void Table::row(const std::string& quantity, double value, const std::string& unit,
                const std::string& note) {
  rows_.push_back({quantity, number_text(value), unit, note});
}

void Table::text(const std::string& quantity, const std::string& value) {
  rows_.push_back({quantity, value, "", "", true});
}

void Table::print(std::ostream& out) const {
  std::size_t q = 8, v = 5;
  for (const auto& r : rows_) {
    if (r.quantity.empty() || r.words) continue;
    q = std::max(q, r.quantity.size());
    v = std::max(v, r.value.size());
  }
  auto pad = [](const std::string& s, std::size_t n) {
    return s + std::string(n > s.size() ? n - s.size() : 0, ' ');
  };
  out << "  " << pad("quantity", q) << "  " << pad("value", v) << "  unit\n";
  for (const auto& r : rows_) {
    if (r.quantity.empty()) {
      out << r.value << "\n";
      continue;
    }
    if (r.words) {
      out << "  " << r.quantity << ": " << r.value << "\n";
      continue;
    }
    std::string unit = r.unit;
    if (!r.note.empty()) unit += (unit.empty() ? "" : "  ") + r.note;
    std::string line = "  " + pad(r.quantity, q) + "  " + pad(r.value, v) + "  " + unit;
    line.erase(line.find_last_not_of(' ') + 1);  // no trailing blanks where the unit is empty
    out << line << "\n";
  }
}

void print_json(const nlohmann::ordered_json& j, bool pretty) {
  std::cout << (pretty ? j.dump(2) : j.dump()) << std::endl;
}

}  // namespace hpctrain::cli
