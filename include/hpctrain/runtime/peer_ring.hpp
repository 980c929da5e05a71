#pragma once
// The peer monitor's policy (peer_monitor.hpp): what one rank of the heartbeat ring does with each
// message, with a neighbour's silence or closed connection, and with its own position. Pure:
// events and the time come in, the messages to send and what the process must do come out; no
// sockets, no MPI, no clock of its own, so every rule is unit-tested.
//
// The rules:
// - Positions: this rank sends its own position to both neighbours when it moves (a new step, a
//   phase, a collective entered or completed), at most once per `min_gap_s`, and at least once
//   per `period_s` (the heartbeat). A record newer than the one known (a higher version) is kept
//   and passed on at once to the other neighbour, never back to the rank it describes; an older
//   one stops. So every rank knows every other rank's position as of its last move, within the
//   ring's latency, not as of its last heartbeat.
// - Loss: a neighbour silent for `timeout_s`, or whose connection closes without a goodbye, is
//   lost; a kLost message passes the loss on, and every rank that learns it ends.
// - Ending on purpose: a neighbour's kBye ends its watch (its close is no loss). A kAbort (a rank
//   ends the job with an error and the launcher will end every rank) ends the watch of every
//   neighbour, since the launcher's kills close connections that are no loss either; it goes
//   along the ring once, and names the rank and its exit code to every rank (note_job_abort).
// - Flooded messages (hang claims, flight-file acknowledgements, dump requests) go along the ring
//   once per origin (per request number for dump requests), never back to their origin.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/runtime/peer_wire.hpp"

namespace hpctrain::runtime::peer {

using Clock = std::chrono::steady_clock;

/// Bytes for the connection to one neighbour.
struct Send {
  int link = 0;
  std::string bytes;
  bool droppable = false;        ///< a position: may be dropped when the outbox is full
  bool beat_if_dropped = false;  ///< this rank's own position: a heartbeat goes in its place
};

/// A rank the ring lost: the process logs it and ends with kExitComm.
struct Loss {
  int lost_rank = -1;
  int reported_by = -1;  ///< this rank, or the neighbour whose kLost said so
  std::uint32_t reason = kSilent;
  double silent_s = 0;
};

/// What an event asks of the transport and the process.
struct Actions {
  std::vector<Send> sends;
  std::optional<Loss> loss;
  bool dump_for_hang = false;   ///< write the flight file for a hang claim
  bool dump_requested = false;  ///< write the flight file for another rank's SIGUSR2
  int abort_rank = -1;          ///< >= 0: that rank ends the job on purpose (note_job_abort)
  int abort_code = 0;
  void append(Actions other);
};

/// What the ring carried about another rank.
struct PeerState {
  bool known = false;
  PositionRecord record;
  Clock::time_point heard;  ///< when this rank received the record
};

/// One rank's view of the ring. Not thread-safe: the monitor serialises the calls.
class PeerRing {
 public:
  struct Options {
    int world_rank = 0;
    int world_size = 1;
    std::uint64_t token = 0;
    double timeout_s = 20;  ///< silence that makes a neighbour lost
    double period_s = 1;    ///< heartbeat: this rank's position goes out at least this often
    double min_gap_s = 0;   ///< least time between two sends of this rank's position
  };
  /// `link_peers`: the world rank at the other end of each connection (link index = position).
  PeerRing(const Options& options, std::vector<int> link_peers, Clock::time_point now);

  /// Bytes arrived on `link`: the neighbour is alive. Local.
  void heard(int link, Clock::time_point now);
  /// One whole message arrived on `link` (`payload`: a kPositions message's records). Local.
  Actions on_message(int link, const Message& m, const std::string& payload, Clock::time_point now);
  /// `link` closed or failed: a loss unless its neighbour said goodbye. Local.
  Actions on_closed(int link);
  /// This rank's position now (its version is set here): sent when the heartbeat is due, or when
  /// it moved and `min_gap_s` has passed since the last send. Local.
  Actions on_position(PositionRecord own, Clock::time_point now);
  /// When on_position must run again without news: the heartbeat, or the end of the gap when a
  /// move is waiting for it. Local.
  Clock::time_point position_due() const { return next_send(move_waiting_); }
  /// When this rank's position can go out next: one gap after the last send when it `moved`,
  /// else one period after it (the heartbeat). Local.
  Clock::time_point next_send(bool moved) const;
  /// This process was stopped or starved: the silence it saw is its own, so the neighbours'
  /// silence clocks restart. Local.
  void stalled(Clock::time_point now);
  /// A neighbour silent for longer than the timeout is lost. Local.
  Actions check_silence(Clock::time_point now) const;

  /// Messages this rank originates, to every neighbour still watched. Local.
  Actions broadcast(const Message& m) const;
  /// kLost for `loss`, to every neighbour (sent before this rank ends). Local.
  Actions announce_loss(const Loss& loss) const;

  /// The lowest other rank that claimed a hang report (-1: none). Local.
  int hang_claim() const { return hang_claim_; }
  /// Flight files written by other ranks after a hang claim. Local.
  int dumps_seen() const { return dumps_seen_; }
  /// Whether some rank announced it ends the job on purpose. Local.
  bool job_ending() const { return abort_noted_; }
  /// What is known of every world rank (this rank's own entry stays unknown). Local.
  const std::vector<PeerState>& peers() const { return peers_; }
  /// Other ranks heard from within `fresh_s`. Local.
  int fresh_peers(Clock::time_point now, double fresh_s) const;
  int link_count() const { return static_cast<int>(links_.size()); }
  int link_peer(int link) const { return links_[static_cast<std::size_t>(link)].peer; }
  bool link_finished(int link) const { return links_[static_cast<std::size_t>(link)].finished; }

 private:
  struct LinkState {
    int peer = -1;
    bool finished = false;  ///< said goodbye, or the job ends on purpose: silence is no loss
    Clock::time_point last_heard;
  };
  bool valid_origin(int from) const;
  /// `bytes` to every watched link except `except` and the link to `origin`.
  void flood(Actions& out, const std::string& bytes, int except, int origin) const;
  Actions take_positions(int link, const std::string& payload, Clock::time_point now);

  Options o_;
  std::vector<LinkState> links_;
  std::vector<PeerState> peers_;
  // This rank's own position: its version counter, the last one sent and when.
  std::uint32_t version_ = 0;
  std::optional<PositionRecord> last_sent_;
  Clock::time_point last_sent_at_;
  bool move_waiting_ = false;
  // Flooded messages: what each origin sent last.
  std::vector<char> hang_seen_;
  std::vector<char> dumped_seen_;
  std::vector<std::uint32_t> request_seen_;
  int hang_claim_ = -1;
  int dumps_seen_ = 0;
  bool abort_noted_ = false;
};

}  // namespace hpctrain::runtime::peer
