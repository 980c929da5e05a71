#pragma once
// Private to the eval layer: how results look on rank 0's terminal.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace hpctrain::eval::detail {

/// One line for a result just written: step, metrics, throughput, file, best so far. Local.
std::string result_line(const nlohmann::ordered_json& record, const std::string& file,
                        const nlohmann::json& best);

/// A table of `records` (one family, step order): step, samples, loss, accuracy or perplexity,
/// time, samples/s; the best is starred and `now` marks the steps evaluated by this command. Local.
std::string result_table(const std::vector<nlohmann::json>& records,
                         const std::set<std::int64_t>& now, const std::string& dir);

}  // namespace hpctrain::eval::detail
