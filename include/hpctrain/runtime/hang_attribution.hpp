#pragma once
// Which rank, which operation: from the positions of the ranks (heard on the heartbeat ring, or
// read from flight recorder files), the ranks a waiting collective waits for, where each of them
// is, and whether the ranks run different collectives at the same sequence number (a
// desynchronised program). A rank that is itself waiting is followed to the rank it waits for, and
// so on (a pipeline stage waits on its neighbour, which waits on the stopped rank), until a rank
// that waits for nobody or fell silent: that one is named as the cause. Pure: the watchdog (at a
// collective timeout) and `hpctrain trace flight` (afterwards, from the files) write the same
// message from the same function.

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

/// The operation a rank is in (the one it has waited in longest), or else the last it left.
struct OperationPosition {
  bool known = false;            ///< one was heard; false: nothing below is meaningful
  bool active = false;           ///< the rank is in it now (false: the last one it left)
  std::uint32_t channel_id = 0;  ///< Channel::id(); 0: point-to-point (not numbered)
  std::string channel;           ///< "dp", "world control"; point-to-point: the group ("pp")
  std::uint64_t seq = 0;         ///< its number on the channel (0: point-to-point)
  std::string op;                ///< "all_reduce", "send_recv"
  std::vector<int> peers;        ///< point-to-point: the world ranks it exchanges with;
                                 ///< a collective: the other members (at most 8 travel)
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
  OperationPosition operation;
  /// The channel with `id`, or nullptr. Local.
  const ChannelPosition* find(std::uint32_t id) const;
};

/// A collective that has waited too long on one rank.
struct WaitingCollective {
  int world_rank = -1;  ///< the rank that waits
  std::string host;
  std::string group;             ///< "dp"
  std::string channel;           ///< "dp control"
  std::uint32_t channel_id = 0;  ///< Channel::id(); 0: point-to-point (not numbered)
  std::vector<int> members;      ///< world ranks of the group; point-to-point: the peers
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
  std::vector<int> waiting;  ///< ranks that hold it up only because they wait for others in turn
  std::vector<int> causes;   ///< ranks named as the cause at the end of such a chain of waits
};

/// Attributes `waiting` from `positions` (indexed by world rank or not; looked up by world_rank):
/// the members that have not entered it (named with their positions), those that entered it
/// and then fell silent (heard more than 3 s ago: stopped, starved or cut off), those in another
/// collective at the same number or past it (a desynchronised program), and those whose
/// position is unknown. A member that has not entered it because it waits in another operation
/// (its position's `operation`) is followed to the ranks that operation waits for, rank by rank,
/// to the ranks that wait for nobody or fell silent (the causes, each named with its position
/// relative to the wait that names it); a cycle of live waiting ranks is named as one. A
/// point-to-point wait (channel_id 0) waits for all its peers. Local, pure.
HangAttribution attribute_hang(const WaitingCollective& waiting,
                               const std::vector<RankPosition>& positions);

/// "rank 3 on n2, which is in backward at step 12 since 6.1 s (last heard 0.3 s ago)". Local.
std::string describe_position(const RankPosition& position);

/// The ranks `position` waits for now, from its operation and the others' positions: the peers
/// of a point-to-point operation; the members of a collective's channel (those heard on it, and
/// the operation's peers) that have not entered it or fell silent after. Empty when it is in no
/// operation. Local, pure.
std::vector<int> waits_for(const RankPosition& position,
                           const std::vector<RankPosition>& positions);

/// "dp all_reduce #57", "pp send_recv with rank 3". Local.
std::string describe_operation(const OperationPosition& operation);

}  // namespace hpctrain::runtime
