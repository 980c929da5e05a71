#pragma once
// Logging: rank 0 speaks by default so a 512-rank job log stays readable; every rank on request
// (--log-all-ranks), each line then prefixed with rank and host. Errors and rank-specific
// warnings always come from the rank that has them.

#include <string>

namespace hpctrain::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

/// Sets who logs and how much. Local; call once after the runtime knows the rank and host.
void configure(int world_rank, const std::string& host, Level level, bool all_ranks);

/// Current verbosity. Local.
Level level();

/// Whether this rank prints info/debug lines (rank 0, or every rank with all_ranks). Local.
bool this_rank_speaks();

/// Progress and facts: rank 0 (or every rank with all_ranks), to stdout. Local.
void info(const std::string& message);
/// Details for debugging, shown with -vv. Local.
void debug(const std::string& message);
/// A warning about the whole job: rank 0 (or every rank with all_ranks), to stderr. Local.
void warn(const std::string& message);
/// A warning about this rank only: printed by this rank, prefixed with rank and host. Local.
void rank_warn(const std::string& message);
/// An error: printed by this rank, prefixed with rank and host, to stderr. Local.
void error(const std::string& message);

/// "rank 3 (node17)" for messages. Local.
std::string where();

}  // namespace hpctrain::log
