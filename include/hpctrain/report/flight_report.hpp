#pragma once
// `hpctrain trace flight RUN_DIR`: merges the flight recorder files of a run
// (RUN_DIR/flight/rank-K.json, runtime/flight_recorder.hpp) into the hang attribution the
// watchdog prints (runtime/hang_attribution.hpp) and one table per channel: each rank's step,
// phase and last collective entered and completed. A rank that wrote no file (it died, or was
// stopped) is described by the freshest position the other ranks' files hold for it, as the
// heartbeat ring last carried it.

#include <nlohmann/json.hpp>
#include <string>

namespace hpctrain::report {

/// The merge as JSON: {"directory", "files": [{rank, host, reason, time}], "missing": [ranks],
/// "hangs": [{channel, seq, op, waiting_ranks, text, not_entered, desynchronised}],
/// "channels": [{name, members, rows: [{rank, host, source, step, phase, entered, entered_op,
/// completed, completed_op, waiting_s}]}]}. Throws ConfigError when RUN_DIR/flight holds no
/// flight file, DataError when a file is not one. Local.
nlohmann::ordered_json summarize_flight(const std::string& run_dir);

/// The same for people: the attribution paragraphs, then a table per channel. Local.
std::string flight_summary_text(const nlohmann::ordered_json& summary);

}  // namespace hpctrain::report
