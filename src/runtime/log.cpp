#include "hpctrain/runtime/log.hpp"

#include <cstdio>
#include <mutex>

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::log {
namespace {

struct State {
  int world_rank = 0;
  std::string host = "localhost";
  Level level = Level::kInfo;
  bool all_ranks = false;
  std::mutex mutex;  // lines from the prefetch or comm threads must not interleave
};

State& state() {
  static State s;
  return s;
}

void emit(std::FILE* stream, const std::string& prefix, const std::string& message) {
  std::lock_guard<std::mutex> lock(state().mutex);
  std::fprintf(stream, "%s%s\n", prefix.c_str(), message.c_str());
  std::fflush(stream);
}

std::string rank_prefix() {
  return str("[hpctrain r", state().world_rank, "/", state().host, "] ");
}

std::string shared_prefix() {
  return state().all_ranks ? rank_prefix() : std::string("[hpctrain] ");
}

}  // namespace

void configure(int world_rank, const std::string& host, Level level, bool all_ranks) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.world_rank = world_rank;
  s.host = host;
  s.level = level;
  s.all_ranks = all_ranks;
}

Level level() {
  return state().level;
}

bool this_rank_speaks() {
  return state().all_ranks || state().world_rank == 0;
}

void info(const std::string& message) {
  if (state().level >= Level::kInfo && this_rank_speaks()) emit(stdout, shared_prefix(), message);
}

void debug(const std::string& message) {
  if (state().level >= Level::kDebug && this_rank_speaks()) emit(stdout, shared_prefix(), message);
}

void warn(const std::string& message) {
  if (state().level >= Level::kWarn && this_rank_speaks())
    emit(stderr, shared_prefix(), "warning: " + message);
}

void rank_warn(const std::string& message) {
  if (state().level >= Level::kWarn) emit(stderr, rank_prefix(), "warning: " + message);
}

void error(const std::string& message) {
  emit(stderr, rank_prefix(), "error: " + message);
}

std::string where() {
  return str("rank ", state().world_rank, " (", state().host, ")");
}

}  // namespace hpctrain::log
