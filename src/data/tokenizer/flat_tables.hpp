#pragma once
// Two open-addressing hash tables for the BPE hot path: byte strings to ids (the vocabulary and
// the word cache, keys kept in one arena, looked up by string_view without allocating) and id
// pairs to merges. std::unordered_map would allocate a node per entry and a std::string per
// lookup; these keep each probe to one cache line.

#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data::detail {

/// Byte strings to 32-bit values. Local; not thread-safe for writers.
class StringTable {
 public:
  /// Room for `count` keys without growing. Local.
  void reserve(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }

  /// Adds `key` -> `value`; returns false (and keeps the old value) when `key` is present. Local.
  bool insert(std::string_view key, std::uint32_t value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const std::uint64_t hash = hash_of(key);
    std::size_t i = hash & (slots_.size() - 1);
    while (slots_[i].hash != 0) {
      if (matches(slots_[i], hash, key)) return false;
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = {hash, arena_.size(), static_cast<std::uint32_t>(key.size()), value};
    arena_.append(key.data(), key.size());
    ++size_;
    return true;
  }

  /// The value of `key`, or nullptr. Local.
  const std::uint32_t* find(std::string_view key) const {
    if (size_ == 0) return nullptr;
    const std::uint64_t hash = hash_of(key);
    std::size_t i = hash & (slots_.size() - 1);
    while (slots_[i].hash != 0) {
      if (matches(slots_[i], hash, key)) return &slots_[i].value;
      i = (i + 1) & (slots_.size() - 1);
    }
    return nullptr;
  }

  std::size_t size() const { return size_; }
  std::size_t arena_bytes() const { return arena_.size(); }

  void clear() {
    slots_.assign(slots_.size(), Slot{});
    arena_.clear();
    size_ = 0;
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;  // 0: empty
    std::size_t offset = 0;
    std::uint32_t length = 0;
    std::uint32_t value = 0;
  };

  static std::uint64_t hash_of(std::string_view key) {
    return XXH3_64bits(key.data(), key.size()) | 1;
  }

  bool matches(const Slot& slot, std::uint64_t hash, std::string_view key) const {
    return slot.hash == hash && slot.length == key.size() &&
           std::memcmp(arena_.data() + slot.offset, key.data(), key.size()) == 0;
  }

  void rehash(std::size_t capacity) {
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    for (const Slot& slot : old) {
      if (slot.hash == 0) continue;
      std::size_t i = slot.hash & (capacity - 1);
      while (slots_[i].hash != 0) i = (i + 1) & (capacity - 1);
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  std::size_t size_ = 0;
};

/// One merge: the pair's priority (lower merges first) and the id it merges into.
struct Merge {
  std::uint32_t rank = UINT32_MAX;
  std::uint32_t id = 0;
};

/// (left id, right id) -> Merge. Local; not thread-safe for writers.
class PairTable {
 public:
  void reserve(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    if (capacity > slots_.size()) rehash(capacity);
  }

  /// Adds the pair unless present; returns false when it was (the first merge listed wins).
  bool insert(std::uint32_t left, std::uint32_t right, Merge merge) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    const std::uint64_t key = key_of(left, right);
    std::size_t i = index(key);
    while (slots_[i].key != kEmpty) {
      if (slots_[i].key == key) return false;
      i = (i + 1) & (slots_.size() - 1);
    }
    slots_[i] = {key, merge};
    ++size_;
    return true;
  }

  /// The merge of (left, right); rank UINT32_MAX when the pair does not merge. Local.
  Merge find(std::uint32_t left, std::uint32_t right) const {
    if (size_ == 0) return {};
    const std::uint64_t key = key_of(left, right);
    std::size_t i = index(key);
    while (slots_[i].key != kEmpty) {
      if (slots_[i].key == key) return slots_[i].merge;
      i = (i + 1) & (slots_.size() - 1);
    }
    return {};
  }

  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  struct Slot {
    std::uint64_t key = kEmpty;
    Merge merge;
  };

  static std::uint64_t key_of(std::uint32_t left, std::uint32_t right) {
    return (std::uint64_t{left} << 32) | right;
  }
  std::size_t index(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void rehash(std::size_t capacity) {
    shift_ = 64;
    for (std::size_t c = capacity; c > 1; c >>= 1) --shift_;
    std::vector<Slot> old(capacity);
    old.swap(slots_);
    for (const Slot& slot : old) {
      if (slot.key == kEmpty) continue;
      std::size_t i = index(slot.key);
      while (slots_[i].key != kEmpty) i = (i + 1) & (capacity - 1);
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;
  std::size_t size_ = 0;
  int shift_ = 64;
};

}  // namespace hpctrain::data::detail
