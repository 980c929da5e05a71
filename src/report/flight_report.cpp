#include "hpctrain/report/flight_report.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/hang_attribution.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::report {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct ChannelInfo {
  std::string name;
  std::string group;
  std::vector<int> members;
};

struct FlightFile {
  std::string path;
  int rank = -1;
  std::string host;
  std::string reason;
  double time = 0;
  Json json;
};

FlightFile read_flight_file(const std::string& path) {
  runtime::require_regular_file(path, runtime::FileKind::kData, "flight recorder file",
                                "remove it; the ranks write regular files there");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  FlightFile f;
  f.path = path;
  f.json = Json::parse(text.str(), nullptr, false);
  if (f.json.is_discarded() || !f.json.is_object() ||
      f.json.value("format", "") != "hpctrain-flight-1" || !f.json.contains("rank") ||
      !f.json["rank"].is_number_integer()) {
    throw DataError(str(path,
                        " is not an hpctrain flight recorder file (format hpctrain-flight-1): "
                        "remove it, or point at the run directory whose flight/ the ranks wrote"));
  }
  f.rank = f.json["rank"].get<int>();
  f.host = f.json.value("host", "");
  f.reason = f.json.value("reason", "");
  f.time = f.json.value("time", 0.0);
  return f;
}

runtime::ChannelPosition channel_position(const Json& c) {
  runtime::ChannelPosition p;
  p.id = c.value("id", 0u);
  p.name = c.value("name", "");
  p.entered = c.value("entered", std::uint64_t{0});
  p.entered_op = c.value("entered_op", "");
  p.completed = c.value("completed", std::uint64_t{0});
  p.completed_op = c.value("completed_op", "");
  return p;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// The rank-K.json files of a run's flight/ directory, by rank.
std::vector<FlightFile> read_flight_files(const fs::path& dir) {
  std::vector<FlightFile> files;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("rank-", 0) == 0 && name.size() > 10 &&
          name.compare(name.size() - 5, 5, ".json") == 0) {
        files.push_back(read_flight_file(entry.path().string()));
      }
    }
  }
  if (files.empty()) {
    throw ConfigError(str(dir.string(),
                          " holds no flight recorder file (rank-K.json): the ranks write them on "
                          "a collective timeout, a lost rank, SIGUSR2, or a stop signal with "
                          "logging.flight_dump: true"));
  }
  std::sort(files.begin(), files.end(),
            [](const FlightFile& a, const FlightFile& b) { return a.rank < b.rank; });
  return files;
}

// Every rank's position: its own file's, else the freshest the others heard; `source` says which.
std::vector<runtime::RankPosition> rank_positions(
    const std::vector<FlightFile>& files, int world, double now,
    const std::map<std::uint32_t, ChannelInfo>& channel_info, std::vector<std::string>& source) {
  std::vector<runtime::RankPosition> positions(static_cast<std::size_t>(world));
  source.assign(static_cast<std::size_t>(world), "none");
  std::vector<double> heard(static_cast<std::size_t>(world), -1);
  for (int r = 0; r < world; ++r) positions[static_cast<std::size_t>(r)].world_rank = r;
  for (const FlightFile& f : files) {
    for (const Json& p : f.json.value("peers", Json::array())) {
      const int r = p.value("rank", -1);
      if (r < 0 || r >= world || !p.value("known", false)) continue;
      const double when = p.value("heard", 0.0);
      if (when <= heard[static_cast<std::size_t>(r)]) continue;
      heard[static_cast<std::size_t>(r)] = when;
      runtime::RankPosition& q = positions[static_cast<std::size_t>(r)];
      q.known = true;
      q.host = p.value("host", "");
      q.step = p.value("step", std::int64_t{0});
      q.phase = runtime::phase_from_name(p.value("phase", ""));
      q.in_phase_s = p.value("in_phase_s", 0.0);
      q.heard_ago_s = now - when;
      q.channels.clear();
      for (const Json& c : p.value("channels", Json::array())) {
        q.channels.push_back(channel_position(c));
        auto it = channel_info.find(q.channels.back().id);
        if (q.channels.back().name.empty() && it != channel_info.end()) {
          q.channels.back().name = it->second.name;
        }
      }
      source[static_cast<std::size_t>(r)] = str("heard by rank ", f.rank);
    }
  }
  for (const FlightFile& f : files) {
    runtime::RankPosition& q = positions[static_cast<std::size_t>(f.rank)];
    const Json position = f.json.value("position", Json::object());
    q.known = true;
    q.host = f.host;
    q.step = position.value("step", std::int64_t{0});
    q.phase = runtime::phase_from_name(position.value("phase", ""));
    q.in_phase_s = position.value("in_phase_s", 0.0);
    q.heard_ago_s = now - f.time;
    q.channels.clear();
    for (const Json& c : f.json.value("channels", Json::array())) {
      q.channels.push_back(channel_position(c));
    }
    source[static_cast<std::size_t>(f.rank)] = "own file";
    const Json stall = f.json.value("stall", Json::object());
    const double stalled = stall.value("seconds", 0.0);
    if (stalled > 3 && stall.value("ended_ago_s", 1e9) < 60) {
      // Written after the process was continued (the launcher continues a stopped rank to end
      // it): for the hang it was silent that long.
      q.heard_ago_s += stalled;
      q.in_phase_s = std::max(0.0, q.in_phase_s - stalled);
      source[static_cast<std::size_t>(f.rank)] = str("own file, stopped ", format_seconds(stalled));
    }
  }
  return positions;
}

// A collective some rank was waiting in when it wrote its file.
struct Waiting {
  std::string op;
  std::vector<int> ranks;
  double waited_s = 0;
};
// Keyed by channel, number and operation: in a desynchronised program ranks wait in different
// collectives under one number, and each side's view is reported.
using WaitingMap = std::map<std::tuple<std::uint32_t, std::uint64_t, std::string>, Waiting>;
using WaitedByRank = std::map<int, std::map<std::uint32_t, double>>;  // rank -> channel -> s

void find_waiting(const std::vector<FlightFile>& files, WaitingMap& waiting,
                  WaitedByRank& waited_by_rank) {
  for (const FlightFile& f : files) {
    for (const Json& c : f.json.value("channels", Json::array())) {
      const auto p = channel_position(c);
      if (p.entered <= p.completed) continue;
      double waited = 0;
      for (const Json& r : f.json.value("records", Json::array())) {
        if (r.value("channel_id", 0u) == p.id && r.value("seq", std::uint64_t{0}) == p.entered &&
            r.contains("started") && r["started"].is_number()) {
          waited = f.time - r["started"].get<double>();
        }
      }
      Waiting& w = waiting[{p.id, p.entered, p.entered_op}];
      w.op = p.entered_op;
      w.ranks.push_back(f.rank);
      w.waited_s = std::max(w.waited_s, waited);
      waited_by_rank[f.rank][p.id] = waited;
    }
  }
}

// Each waited-in collective with the hang attribution of the ranks' positions.
nlohmann::ordered_json hangs_json(WaitingMap& waiting,
                                  std::map<std::uint32_t, ChannelInfo>& channel_info,
                                  const std::vector<runtime::RankPosition>& positions) {
  nlohmann::ordered_json hangs = nlohmann::ordered_json::array();
  for (auto& [key, w] : waiting) {
    std::sort(w.ranks.begin(), w.ranks.end());
    const auto& [id, seq, op] = key;
    const ChannelInfo& info = channel_info[id];
    runtime::WaitingCollective wc;
    wc.world_rank = w.ranks.front();
    wc.host = positions[static_cast<std::size_t>(wc.world_rank)].host;
    wc.group = info.group;
    wc.channel = info.name;
    wc.channel_id = id;
    wc.members = info.members;
    wc.seq = seq;
    wc.op = w.op;
    wc.waited_s = w.waited_s;
    wc.step = positions[static_cast<std::size_t>(wc.world_rank)].step;
    const runtime::HangAttribution a = runtime::attribute_hang(wc, positions);
    hangs.push_back({{"channel", info.name},
                     {"seq", seq},
                     {"op", w.op},
                     {"waiting_ranks", w.ranks},
                     {"text", a.text},
                     {"not_entered", a.not_entered},
                     {"desynchronised", a.desynchronised}});
  }
  return hangs;
}

// Each used channel of two or more ranks, a row per member with its position on the channel.
nlohmann::ordered_json channels_json(const std::map<std::uint32_t, ChannelInfo>& channel_info,
                                     const std::vector<runtime::RankPosition>& positions,
                                     const std::vector<std::string>& source, int world,
                                     WaitedByRank& waited_by_rank) {
  nlohmann::ordered_json channels = nlohmann::ordered_json::array();
  for (const auto& [id, info] : channel_info) {
    // Groups of one rank and channels no rank used say nothing about a hang.
    bool used = false;
    for (const runtime::RankPosition& p : positions) {
      const runtime::ChannelPosition* c = p.find(id);
      used = used || (c != nullptr && c->entered > 0);
    }
    if (info.members.size() < 2 || !used) continue;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (int member : info.members) {
      if (member < 0 || member >= world) continue;
      const runtime::RankPosition& p = positions[static_cast<std::size_t>(member)];
      nlohmann::ordered_json row{
          {"rank", member}, {"host", p.host}, {"source", source[static_cast<std::size_t>(member)]}};
      if (p.known) {
        row["step"] = p.step;
        row["phase"] = runtime::phase_name(p.phase);
        const runtime::ChannelPosition* c = p.find(id);
        row["entered"] = c ? c->entered : 0;
        row["entered_op"] = c ? c->entered_op : "";
        row["completed"] = c ? c->completed : 0;
        row["completed_op"] = c ? c->completed_op : "";
        auto wr = waited_by_rank.find(member);
        if (wr != waited_by_rank.end() && wr->second.count(id)) row["waiting_s"] = wr->second[id];
      }
      rows.push_back(row);
    }
    channels.push_back({{"name", info.name}, {"members", info.members}, {"rows", rows}});
  }
  return channels;
}

}  // namespace

nlohmann::ordered_json summarize_flight(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "flight";
  const std::vector<FlightFile> files = read_flight_files(dir);
  double now = 0;
  int world = 0;
  std::map<std::uint32_t, ChannelInfo> channel_info;
  for (const FlightFile& f : files) {
    now = std::max(now, f.time);
    world = std::max(world, f.rank + 1);
    for (const Json& p : f.json.value("peers", Json::array()))
      world = std::max(world, p.value("rank", -1) + 1);
    for (const Json& c : f.json.value("channels", Json::array())) {
      ChannelInfo& info = channel_info[c.value("id", 0u)];
      info.name = c.value("name", "");
      info.group = c.value("group", info.name);
      info.members = c.value("members", std::vector<int>{});
    }
  }
  std::vector<std::string> source;
  const std::vector<runtime::RankPosition> positions =
      rank_positions(files, world, now, channel_info, source);

  nlohmann::ordered_json out;
  out["directory"] = dir.string();
  out["files"] = nlohmann::ordered_json::array();
  std::set<int> have;
  for (const FlightFile& f : files) {
    have.insert(f.rank);
    out["files"].push_back(
        {{"rank", f.rank}, {"host", f.host}, {"reason", f.reason}, {"time", f.time}});
  }
  out["missing"] = nlohmann::ordered_json::array();
  for (int r = 0; r < world; ++r) {
    if (!have.count(r)) out["missing"].push_back(r);
  }
  WaitingMap waiting;
  WaitedByRank waited_by_rank;
  find_waiting(files, waiting, waited_by_rank);
  out["hangs"] = hangs_json(waiting, channel_info, positions);
  out["channels"] = channels_json(channel_info, positions, source, world, waited_by_rank);
  return out;
}

std::string flight_summary_text(const nlohmann::ordered_json& summary) {
  std::string text;
  std::vector<int> ranks;
  std::set<std::string> reasons;
  for (const auto& f : summary["files"]) {
    ranks.push_back(f["rank"].get<int>());
    reasons.insert(f["reason"].get<std::string>());
  }
  std::string why;
  for (const auto& r : reasons) why += (why.empty() ? "" : ", ") + r;
  text += str("flight records in ", summary["directory"].get<std::string>(), ": rank",
              ranks.size() > 1 ? "s " : " ", rank_list(ranks), " (", why, ")");
  const auto missing = summary["missing"].get<std::vector<int>>();
  if (!missing.empty()) {
    text += str("; no file from rank", missing.size() > 1 ? "s " : " ", rank_list(missing),
                " (described by the positions the other ranks last heard)");
  }
  text += "\n\n";
  if (summary["hangs"].empty()) {
    text += "no rank was waiting in a collective when it wrote its file\n\n";
  }
  for (const auto& h : summary["hangs"]) {
    const auto waiting = h["waiting_ranks"].get<std::vector<int>>();
    text += str("hang: ", h["text"].get<std::string>(), "\n");
    if (waiting.size() > 1) {
      text += str("  waiting in it: ranks ", rank_list(waiting), "\n");
    }
    text += "\n";
  }
  for (const auto& c : summary["channels"]) {
    text += str("channel ", c["name"].get<std::string>(), " (world ranks ",
                rank_list(c["members"].get<std::vector<int>>()), ")\n");
    text += str("  ", pad("rank", 6), pad("host", 14), pad("source", 26), pad("step", 8),
                pad("phase", 17), pad("last entered", 28), pad("last completed", 28), "waiting\n");
    for (const auto& row : c["rows"]) {
      std::string line =
          str("  ", pad(std::to_string(row["rank"].get<int>()), 6),
              pad(row["host"].get<std::string>(), 14), pad(row["source"].get<std::string>(), 26));
      if (row.contains("step")) {
        auto op = [](const nlohmann::ordered_json& r, const char* seq, const char* name) {
          const auto n = r[seq].get<std::uint64_t>();
          return n == 0 ? std::string("-") : str(r[name].get<std::string>(), " #", n);
        };
        line += pad(std::to_string(row["step"].get<std::int64_t>()), 8) +
                pad(row["phase"].get<std::string>(), 17) +
                pad(op(row, "entered", "entered_op"), 28) +
                pad(op(row, "completed", "completed_op"), 28);
        if (row.contains("waiting_s")) line += format_seconds(row["waiting_s"].get<double>());
      } else {
        line += "position unknown";
      }
      text += line + "\n";
    }
    text += "\n";
  }
  return text;
}

}  // namespace hpctrain::report
