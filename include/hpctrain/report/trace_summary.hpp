#pragma once
// `hpctrain trace summary RUN_DIR`: per step and rank of RUN_DIR/trace.json (logging.trace), the
// step time split into compute (input copy, forward, backward, optimizer), exposed communication
// (the step waiting for gradient all-reduces), data wait and the rest (other), which add up to
// the step time; beside them the communication lanes' busy time in the step and the part of it
// hidden behind backward; and per step the slowest rank (the straggler).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace hpctrain::report {

/// The summary as JSON: {"rows": [{step, rank, step_ms, compute_ms, comm_ms, hidden_ms,
/// exposed_ms, data_wait_ms, other_ms}], "stragglers": [{step, rank, step_ms, spread_ms}]}.
/// Throws ConfigError when RUN_DIR has no trace.json, DataError when it is not a trace of
/// hpctrain. Local.
nlohmann::ordered_json summarize_trace(const std::string& run_dir);

/// The same as a table for people. Local.
std::string trace_summary_text(const nlohmann::ordered_json& summary, const std::string& run_dir);

}  // namespace hpctrain::report
