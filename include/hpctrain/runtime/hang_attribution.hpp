#pragma once
// Which rank, which operation: from the positions of the ranks (heard on the heartbeat ring, or
// read from flight recorder files), the ranks a waiting collective waits for, where each of them
// is, and whether the ranks run different collectives at the same sequence number (a
// desynchronised program). Pure: the watchdog (at a collective timeout) and `hpctrain trace
// flight` (afterwards, from the files) write the same message from the same function.

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/runtime/position.hpp"

namespace hpctrain::runtime {

/// One channel of one rank's position.
struct ChannelPosition {
  std::uint32_t id = 0;  ///< Channel::id()
  std::string name;      ///< "dp", "world control" ("" when only the id was heard)
  std::uint64_t entered = 0;
  std::string entered_op;
  std::uint64_t completed = 0;
  std::string completed_op;
};

/// What is known of one rank's position.
struct RankPosition {
  int world_rank = -1;
  bool known = false;  ///< a position was heard (or read); false: nothing below is meaningful
  std::string host;    ///< Slurm's node name where there is one (node_name)
  std::int64_t step = 0;
  Phase phase = Phase::kStartup;
  double in_phase_s = 0;   ///< how long it had been in `phase` when the position was current
  double heard_ago_s = 0;  ///< how long ago the position was current
  std::vector<ChannelPosition> channels;
  /// The channel with `id`, or nullptr. Local.
  const ChannelPosition* find(std::uint32_t id) const;
};

/// A collective that has waited too long on one rank.
struct WaitingCollective {
  int world_rank = -1;  ///< the rank that waits
  std::string host;
  std::string group;             ///< "dp"
  std::string channel;           ///< "dp control"
  std::uint32_t channel_id = 0;  ///< Channel::id()
  std::vector<int> members;      ///< world ranks of the group
  std::uint64_t seq = 0;
  std::string op;  ///< "all_reduce"
  double waited_s = 0;
  std::int64_t step = 0;
};

struct HangAttribution {
  std::string text;                 ///< the message (one paragraph, no trailing period)
  std::vector<int> not_entered;     ///< ranks that have not entered the collective
  std::vector<int> desynchronised;  ///< ranks in another collective at the same number, or ahead
  std::vector<int> unknown;         ///< ranks whose position is not known
  std::vector<int> silent;          ///< ranks that entered it, then stopped sending heartbeats
};

/// Attributes `waiting` from `positions` (indexed by world rank or not; looked up by world_rank):
/// the members that have not entered it (named with their positions), those that entered it
/// and then fell silent (heard more than 3 s ago: stopped, starved or cut off), those in another
/// collective at the same number or past it (a desynchronised program), and those whose
/// position is unknown. Local, pure.
HangAttribution attribute_hang(const WaitingCollective& waiting,
                               const std::vector<RankPosition>& positions);

/// "rank 3 on n2, which is in backward at step 12 since 6.1 s (last heard 0.3 s ago)". Local.
std::string describe_position(const RankPosition& position);

}  // namespace hpctrain::runtime
