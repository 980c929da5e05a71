#pragma once
// What commands print: a table of quantity / value / unit rows under section titles (plan, bench
// train), numbers in the digits those tables use, and a command's JSON document. A command
// builds its figures first (as JSON or a struct) and prints them with these, so its text and its
// --json output come from the same numbers.

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpctrain::cli {

/// Integers as integers (below 1e9), everything else in 4 significant digits: "1200", "3.5e+12".
std::string number_text(double v);
/// "+12.3%" for a relative error of 0.123 ("+0.0%", never "-0.0%").
std::string percent_text(double fraction);
/// "(2 h 03 min)" or "(3.5 days)" to put beside a value in seconds; empty below two minutes.
std::string human_seconds(double seconds);

/// Rows of quantity, value and unit under section titles, aligned when printed:
///   model: gpt (config configs/gpt-small.yaml)
///     parameters                 1200
///     forward FLOPs per sample   3.5e+09  FLOP
class Table {
 public:
  /// A title line; the rows after it belong to it.
  void section(const std::string& title);
  /// A row; `note` follows the unit ("(2 h 03 min)").
  void row(const std::string& quantity, double value, const std::string& unit,
           const std::string& note = "");
  /// A row whose value is words, printed "quantity: value" outside the columns.
  void text(const std::string& quantity, const std::string& value);
  void print(std::ostream& out) const;

 private:
  struct Row {
    std::string quantity, value, unit, note;
    bool words = false;
  };
  std::vector<Row> rows_;
};

/// A command's --json output: `j` on one line (`pretty` false: one record a line, for scripts that
/// read lines) or indented by two, then a newline and a flush.
void print_json(const nlohmann::ordered_json& j, bool pretty = true);

}  // namespace hpctrain::cli
