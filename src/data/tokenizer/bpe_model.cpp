// The BPE merge loop. Short pieces (almost all) merge in a flat array, scanning for the lowest
// rank: for a dozen bytes that beats any heap. Long pieces (a run of a thousand spaces, a base64
// blob) merge through a linked list and a heap, so a piece of n bytes costs O(n log n), not O(n^2).

#include "bpe_model.hpp"

#include <algorithm>
#include <queue>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {
namespace {

constexpr std::size_t kShortPiece = 64;
constexpr std::size_t kCacheMaxPieceBytes = 256;
constexpr std::size_t kCacheMaxIds = std::size_t{1} << 24;

std::string printable(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", u);
      out += hex;
    }
  }
  return out;
}

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept
    : tokens_(std::move(other.tokens_)),
      present_(std::move(other.present_)),
      ids_(std::move(other.ids_)),
      merges_(std::move(other.merges_)),
      byte_ids_(other.byte_ids_),
      whole_pieces_first_(other.whole_pieces_first_) {}

void BpeModel::index_tokens(const std::string& where) {
  present_.assign(tokens_.size(), false);
  ids_.reserve(tokens_.size());
  for (std::size_t id = 0; id < tokens_.size(); ++id) {
    if (tokens_[id].empty()) continue;
    present_[id] = true;
    if (!ids_.insert(tokens_[id], static_cast<std::uint32_t>(id))) {
      throw DataError(str(where, ": token '", printable(tokens_[id]), "' has two ids (",
                          *ids_.find(tokens_[id]), " and ", id,
                          "): the vocabulary is damaged; use the file as published"));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto* id = ids_.find(std::string(1, static_cast<char>(b)));
    if (id == nullptr) {
      throw DataError(str(where, ": the vocabulary has no token for the byte 0x", std::hex, b,
                          std::dec,
                          ": a byte-level BPE vocabulary needs all 256 bytes; use the file as "
                          "published"));
    }
    byte_ids_[static_cast<std::size_t>(b)] = *id;
  }
}

BpeModel BpeModel::from_ranks(std::vector<std::string> tokens, const std::string& where) {
  BpeModel model;
  model.tokens_ = std::move(tokens);
  model.whole_pieces_first_ = true;
  model.index_tokens(where);
  // Two adjacent tokens merge when their concatenation is a token; its rank is the priority.
  model.merges_.reserve(model.tokens_.size() * 2);
  for (std::size_t rank = 0; rank < model.tokens_.size(); ++rank) {
    const std::string_view token = model.tokens_[rank];
    for (std::size_t k = 1; k < token.size(); ++k) {
      const auto* left = model.ids_.find(token.substr(0, k));
      if (left == nullptr) continue;
      const auto* right = model.ids_.find(token.substr(k));
      if (right == nullptr) continue;
      const auto r = static_cast<std::uint32_t>(rank);
      model.merges_.insert(*left, *right, {r, r});
    }
  }
  return model;
}

BpeModel BpeModel::from_merges(std::vector<std::string> tokens,
                               const std::vector<std::pair<std::string, std::string>>& merges,
                               bool whole_pieces_first, const std::string& where) {
  BpeModel model;
  model.tokens_ = std::move(tokens);
  model.whole_pieces_first_ = whole_pieces_first;
  model.index_tokens(where);
  model.merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto* left = model.ids_.find(a);
    const auto* right = model.ids_.find(b);
    const auto* merged = model.ids_.find(a + b);
    if (left == nullptr || right == nullptr || merged == nullptr) {
      const std::string& missing = left == nullptr ? a : right == nullptr ? b : a + b;
      throw DataError(str(where, ": merge ", rank, " ('", printable(a), "' + '", printable(b),
                          "') uses the token '", printable(missing),
                          "', which is not in the vocabulary: the merges and the vocabulary do "
                          "not belong together"));
    }
    model.merges_.insert(*left, *right, {static_cast<std::uint32_t>(rank), *merged});
  }
  return model;
}

std::optional<std::int64_t> BpeModel::find(std::string_view bytes) const {
  const auto* id = ids_.find(bytes);
  if (id == nullptr) return std::nullopt;
  return *id;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<std::int64_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (whole_pieces_first_) {
    if (const auto* id = ids_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cached = piece.size() <= kCacheMaxPieceBytes;
  if (cached) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (const auto* at = cache_.find(piece)) {
      const std::uint32_t count = cache_ids_[*at];
      for (std::uint32_t k = 1; k <= count; ++k) out.push_back(cache_ids_[*at + k]);
      return;
    }
  }
  thread_local std::vector<std::uint32_t> ids;
  if (piece.size() <= kShortPiece) {
    merge(piece, ids);
  } else {
    merge_long(piece, ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cached) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_ids_.size() + ids.size() + 1 > kCacheMaxIds) {
      cache_.clear();
      cache_ids_.clear();
    }
    if (cache_.insert(piece, static_cast<std::uint32_t>(cache_ids_.size()))) {
      cache_ids_.push_back(static_cast<std::uint32_t>(ids.size()));
      cache_ids_.insert(cache_ids_.end(), ids.begin(), ids.end());
    }
  }
}

void BpeModel::merge(std::string_view piece, std::vector<std::uint32_t>& ids) const {
  // ids[i] and ranks[i] = the merge of (ids[i], ids[i + 1]); the lowest rank merges first, the
  // leftmost among equals, as tiktoken and Hugging Face both do.
  ids.resize(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  }
  std::array<Merge, kShortPiece> merges;
  std::size_t n = ids.size();
  for (std::size_t i = 0; i + 1 < n; ++i) merges[i] = merges_.find(ids[i], ids[i + 1]);
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i) {
      if (merges[i].rank < merges[best].rank) best = i;
    }
    if (merges[best].rank == UINT32_MAX) break;
    ids[best] = merges[best].id;
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      merges[i] = merges[i + 1];
    }
    --n;
    if (best + 1 < n) merges[best] = merges_.find(ids[best], ids[best + 1]);
    if (best > 0) merges[best - 1] = merges_.find(ids[best - 1], ids[best]);
  }
  ids.resize(n);
}

void BpeModel::merge_long(std::string_view piece, std::vector<std::uint32_t>& ids) const {
  const std::size_t n = piece.size();
  struct Node {
    std::uint32_t id;
    std::int64_t prev, next;  // -1: none
  };
  std::vector<Node> nodes(n);
  for (std::size_t i = 0; i < n; ++i) {
    nodes[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], static_cast<std::int64_t>(i) - 1,
                i + 1 < n ? static_cast<std::int64_t>(i + 1) : -1};
  }
  // Candidates (rank, left node, left id, right id); stale ones are skipped when popped.
  struct Candidate {
    std::uint32_t rank;
    std::int64_t left;
    std::uint32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](std::int64_t left) {
    if (left < 0) return;
    const std::int64_t right = nodes[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const std::uint32_t a = nodes[static_cast<std::size_t>(left)].id;
    const std::uint32_t b = nodes[static_cast<std::size_t>(right)].id;
    const Merge m = merges_.find(a, b);
    if (m.rank != UINT32_MAX) heap.push({m.rank, left, a, b});
  };
  std::vector<bool> alive(n, true);
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int64_t>(i));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    auto& left = nodes[static_cast<std::size_t>(c.left)];
    if (!alive[static_cast<std::size_t>(c.left)] || left.id != c.left_id || left.next < 0) continue;
    auto& right = nodes[static_cast<std::size_t>(left.next)];
    if (right.id != c.right_id) continue;
    left.id = merges_.find(c.left_id, c.right_id).id;
    alive[static_cast<std::size_t>(left.next)] = false;
    left.next = right.next;
    if (left.next >= 0) nodes[static_cast<std::size_t>(left.next)].prev = c.left;
    push(left.prev);
    push(c.left);
  }
  ids.clear();
  for (std::int64_t i = 0; i >= 0; i = nodes[static_cast<std::size_t>(i)].next) {
    ids.push_back(nodes[static_cast<std::size_t>(i)].id);
  }
}

}  // namespace hpctrain::data::detail
