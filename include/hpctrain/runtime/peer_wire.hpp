#pragma once
// The peer monitor's wire format (peer_monitor.hpp): fixed-size messages, the position records a
// kPositions message carries, and the framing of a connection's byte stream into messages. Pure:
// no sockets, no MPI, no clock, so every byte of it is unit-tested.
//
// Messages travel in host byte order: every rank of one job runs the same binary on the same
// architecture, and the job's token (a random number rank 0 draws at start) rejects anything else.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::runtime::peer {

constexpr std::uint32_t kMagic = 0x68707431;  // "hpt1"

enum MessageType : std::uint32_t {
  kHello = 1,         ///< connector -> acceptor: {from, subject = expected acceptor rank, token}
  kHelloAck = 2,      ///< acceptor -> connector
  kBeat = 3,          ///< heartbeat (sent when a position does not fit the outbox)
  kBye = 4,           ///< leaving on purpose (normal end)
  kAbort = 5,         ///< ending the job on purpose (abort_job): subject, detail = exit code
  kLost = 6,          ///< subject was lost; detail = LostReason, silent_ms
  kPositions = 7,     ///< detail = bytes of position records that follow the message
  kHang = 8,          ///< from claims the report of a collective timeout (flooded)
  kDumped = 9,        ///< from wrote its flight file after a hang claim (flooded)
  kDumpRequest = 10,  ///< from got SIGUSR2: every rank writes its flight file; detail = number
};
enum LostReason : std::uint32_t { kSilent = 1, kClosed = 2 };

/// One fixed-size message (32 bytes).
struct Message {
  std::uint32_t magic = kMagic;
  std::uint32_t type = 0;
  std::uint32_t from = 0;
  std::uint32_t subject = 0;
  std::uint32_t detail = 0;     ///< kLost: the LostReason; kAbort: the exit code; ...
  std::uint32_t silent_ms = 0;  ///< kLost: how long the subject had been silent
  std::uint64_t token = 0;
};
static_assert(sizeof(Message) == 32, "wire format");

/// One channel of a position on the wire (16 bytes). Sequence numbers travel as their low 32 bits
/// (enough to compare numbers a few billion apart).
struct WireChannel {
  std::uint32_t id = 0;
  std::uint32_t entered = 0;
  std::uint32_t completed = 0;
  std::uint16_t entered_op = 0;  ///< op_code of the operation
  std::uint16_t completed_op = 0;
};
static_assert(sizeof(WireChannel) == 16, "wire format");

/// The operation a position names (hang_attribution.hpp's OperationPosition) on the wire: 16
/// bytes, then `peer_count` world ranks of 4 bytes each. Names travel as op_code hashes (the
/// channel's name too: every rank names its channels alike).
struct WireOperation {
  std::uint32_t channel_id = 0;  ///< Channel::id(); 0: point-to-point (not numbered)
  std::uint32_t seq = 0;         ///< low 32 bits of its number on the channel
  std::uint16_t op = 0;          ///< op_code of the operation
  std::uint16_t channel = 0;     ///< op_code of the channel's name (point-to-point: the group's)
  std::uint8_t active = 0;       ///< 1: the rank is in it now; 0: the last one it left
  std::uint8_t peer_count = 0;
  std::uint16_t reserved = 0;
};
static_assert(sizeof(WireOperation) == 16, "wire format");

constexpr int kMaxWireChannels = 64;
/// At most this many peers of an operation travel (a collective over more: none).
constexpr int kMaxWirePeers = 8;
/// A kPositions payload larger than this is not a message of this job's monitor.
constexpr std::uint32_t kMaxPayload = 1u << 24;
/// Bytes of a position record's header (then 16 per channel, then 16 and 4 per peer for an
/// operation).
constexpr std::size_t kPositionHeaderBytes = 24;

/// One rank's position as the ring carries it (position.hpp: step, phase, channels).
struct PositionRecord {
  int rank = 0;
  std::uint32_t version = 0;  ///< counts up with each record that rank sends: newer replaces older
  std::int64_t step = 0;
  std::uint8_t phase = 0;
  std::uint32_t in_phase_ms = 0;
  std::vector<WireChannel> channels;  ///< at most kMaxWireChannels travel
  bool has_operation = false;         ///< an operation entered (or left) yet
  WireOperation operation;            ///< its peer_count is set from `peers` when encoded
  std::vector<std::int32_t> peers;    ///< the operation's peers; at most kMaxWirePeers travel
  /// Whether `other` is at the same place: step, phase, every channel counter and the operation
  /// (the version and the time in the phase aside). Local.
  bool same_place(const PositionRecord& other) const;
};

/// A message of `type` from world rank `from` of the job with `token`. Local.
Message make_message(MessageType type, int from, std::uint64_t token);
/// The bytes of `m` followed by `payload`. Local.
std::string encode(const Message& m, const std::string& payload = {});
/// Appends the bytes of `record` to `out`. Local.
void encode_position(const PositionRecord& record, std::string& out);
/// One kPositions message from `from` carrying `records`. Local.
std::string encode_positions(int from, std::uint64_t token,
                             const std::vector<PositionRecord>& records);
/// The records of a kPositions payload, in order; a record that runs past the end (a malformed
/// tail) ends the list. Local.
std::vector<PositionRecord> decode_positions(const char* payload, std::size_t size);

/// Splits one connection's byte stream into the messages of one job: a message with another
/// magic number or token is skipped (32 bytes), a kPositions message waits for its whole payload,
/// and one announcing a payload over kMaxPayload breaks the stream (not this job's monitor).
class FrameReader {
 public:
  enum class Next { kMessage, kNeedMore, kBroken };
  explicit FrameReader(std::uint64_t token) : token_(token) {}
  /// Adds received bytes. Local.
  void append(const char* data, std::size_t size);
  /// The next whole message (and its payload, empty for all but kPositions). Local.
  Next next(Message& m, std::string& payload);
  /// Bytes received and not yet returned as messages. Local.
  std::size_t buffered() const { return pending_.size() - used_; }

 private:
  std::uint64_t token_;
  std::string pending_;
  std::size_t used_ = 0;
};

}  // namespace hpctrain::runtime::peer
