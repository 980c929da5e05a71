#include "hpctrain/report/report_page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/task.hpp"

namespace hpctrain::report {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kRunFileFix =
    "a run directory holds regular files only (a FIFO would block the read): remove it";

// Lines of a JSON-lines file that parse as objects; a line being written (a run in progress, a
// killed one) does not parse and is skipped.
std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> out;
  if (!runtime::require_regular_file_if_present(path, runtime::FileKind::kConfig, "run file",
                                                kRunFileFix))
    return out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

std::string read_text(const std::string& path) {
  if (!runtime::require_regular_file_if_present(path, runtime::FileKind::kConfig, "run file",
                                                kRunFileFix))
    return {};
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Numbers as the page shows and stores them: %.9g keeps a float32's and most doubles' digits.
std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
std::string short_num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#17becf", "#bcbd22"};

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value)
  std::string color;
  bool line = true;          // joined, or markers only
  std::string marker = "o";  // "o" circle, "d" diamond
  int highlight = -1;        // index of a point drawn large (the best checkpoint)
};

// A line chart of `series` against the step; each series' values are kept in data-points (the
// tests read them back from the page's DOM).
std::string line_chart(const std::string& id, const std::string& title, const std::string& y_label,
                       const std::vector<Series>& series) {
  constexpr double W = 640, H = 280, L = 64, R = 16, T = 16, B = 40;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  std::string out =
      str("<figure class=\"chart\" id=\"", id, "\"><figcaption>", escape(title), "</figcaption>");
  if (!std::isfinite(x0)) return out + "<p class=\"note\">no data yet</p></figure>\n";
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) {
    y0 -= std::abs(y0) * 0.05 + 1e-12;
    y1 += std::abs(y1) * 0.05 + 1e-12;
  }
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad;
  y1 += pad;
  auto sx = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto sy = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  out += str("<svg viewBox=\"0 0 ", W, " ", H, "\" width=\"", W, "\" height=\"", H,
             "\" role=\"img\">");
  out += str("<rect x=\"", L, "\" y=\"", T, "\" width=\"", W - L - R, "\" height=\"", H - T - B,
             "\" class=\"plot\"/>");
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 + (y1 - y0) * i / 4, x = x0 + (x1 - x0) * i / 4;
    out += str("<line class=\"grid\" x1=\"", L, "\" x2=\"", W - R, "\" y1=\"", sy(y), "\" y2=\"",
               sy(y), "\"/><text class=\"tick\" x=\"", L - 4, "\" y=\"", sy(y) + 4,
               "\" text-anchor=\"end\">", short_num(y), "</text>");
    out += str("<text class=\"tick\" x=\"", sx(x), "\" y=\"", H - B + 14,
               "\" text-anchor=\"middle\">", short_num(std::round(x)), "</text>");
  }
  out += str("<text class=\"axis\" x=\"", (L + W - R) / 2, "\" y=\"", H - 6,
             "\" text-anchor=\"middle\">step</text><text class=\"axis\" x=\"12\" y=\"",
             (T + H - B) / 2, "\" transform=\"rotate(-90 12 ", (T + H - B) / 2,
             ")\" text-anchor=\"middle\">", escape(y_label), "</text>");
  double legend_x = L + 8;
  for (const auto& s : series) {
    Json pts = Json::array();
    std::string poly;
    for (const auto& [x, y] : s.points) {
      pts.push_back({x, y});
      if (std::isfinite(y)) poly += str(sx(x), ",", sy(y), " ");
    }
    out += str("<g class=\"series\" data-name=\"", escape(s.name), "\" data-points=\"",
               escape(pts.dump()), "\">");
    if (s.line && s.points.size() > 1) {
      out += str("<polyline fill=\"none\" stroke=\"", s.color, "\" stroke-width=\"1.5\" points=\"",
                 poly, "\"/>");
    }
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const auto [x, y] = s.points[i];
      if (!std::isfinite(y)) continue;
      const bool big = static_cast<int>(i) == s.highlight;
      const double r = big ? 6 : (s.line ? 2 : 4);
      const std::string tip = str(s.name, " at step ", num(x), ": ", num(y));
      if (s.marker == "d") {
        out += str("<path class=\"point", big ? " best" : "", "\" fill=\"", s.color, "\" d=\"M",
                   sx(x), " ", sy(y) - r, " l", r, " ", r, " l", -r, " ", r, " l", -r, " ", -r,
                   "z\" data-tip=\"", escape(tip), "\"/>");
      } else {
        out +=
            str("<circle class=\"point", big ? " best" : "", "\" cx=\"", sx(x), "\" cy=\"", sy(y),
                "\" r=\"", r, "\" fill=\"", s.color, "\" data-tip=\"", escape(tip), "\"/>");
      }
    }
    out += "</g>";
    out += str("<rect x=\"", legend_x, "\" y=\"", T + 6, "\" width=\"10\" height=\"10\" fill=\"",
               s.color, "\"/><text class=\"legend\" x=\"", legend_x + 14, "\" y=\"", T + 15, "\">",
               escape(s.name), "</text>");
    legend_x += 24 + 7.0 * static_cast<double>(s.name.size());
  }
  return out + "</svg></figure>\n";
}

struct Bar {
  std::string label;
  std::vector<double> parts;  // stacked, in the order of the chart's part names
};

// Horizontal stacked bars (one per rank, or per kind of work).
std::string bar_chart(const std::string& id, const std::string& title, const std::string& unit,
                      const std::vector<std::string>& part_names, const std::vector<Bar>& bars) {
  std::string out =
      str("<figure class=\"chart\" id=\"", id, "\"><figcaption>", escape(title), "</figcaption>");
  double most = 0;
  for (const auto& b : bars) {
    double total = 0;
    for (double v : b.parts) total += std::max(0.0, v);
    most = std::max(most, total);
  }
  if (bars.empty() || most <= 0) return out + "<p class=\"note\">no data yet</p></figure>\n";
  constexpr double W = 640, L = 110, R = 90, row = 26;
  const double H = 40 + row * static_cast<double>(bars.size());
  out += str("<svg viewBox=\"0 0 ", W, " ", H, "\" width=\"", W, "\" height=\"", H,
             "\" role=\"img\">");
  double legend_x = L;
  for (std::size_t k = 0; k < part_names.size(); ++k) {
    out += str("<rect x=\"", legend_x, "\" y=\"4\" width=\"10\" height=\"10\" fill=\"",
               kColors[k % 10], "\"/><text class=\"legend\" x=\"", legend_x + 14, "\" y=\"13\">",
               escape(part_names[k]), "</text>");
    legend_x += 24 + 7.0 * static_cast<double>(part_names[k].size());
  }
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const auto& b = bars[i];
    const double y = 28 + row * static_cast<double>(i);
    Json parts = b.parts;
    out += str("<g class=\"bar\" data-name=\"", escape(b.label), "\" data-parts=\"",
               escape(parts.dump()), "\"><text class=\"tick\" x=\"", L - 6, "\" y=\"", y + 14,
               "\" text-anchor=\"end\">", escape(b.label), "</text>");
    double x = L, total = 0;
    for (std::size_t k = 0; k < b.parts.size(); ++k) {
      const double w = std::max(0.0, b.parts[k]) / most * (W - L - R);
      const std::string tip = str(b.label, " ", k < part_names.size() ? part_names[k] : "", ": ",
                                  short_num(b.parts[k]), " ", unit);
      out +=
          str("<rect class=\"point\" x=\"", x, "\" y=\"", y, "\" width=\"", w,
              "\" height=\"18\" fill=\"", kColors[k % 10], "\" data-tip=\"", escape(tip), "\"/>");
      x += w;
      total += std::max(0.0, b.parts[k]);
    }
    out += str("<text class=\"tick\" x=\"", x + 4, "\" y=\"", y + 14, "\">", short_num(total), " ",
               escape(unit), "</text></g>");
  }
  return out + "</svg></figure>\n";
}

std::vector<std::pair<double, double>> field_series(const std::vector<Json>& rows,
                                                    const std::string& type,
                                                    const std::vector<std::string>& path) {
  std::vector<std::pair<double, double>> out;
  for (const auto& r : rows) {
    if (r.value("type", "") != type || !r.contains("step") || !r["step"].is_number()) continue;
    const Json* v = &r;
    for (const auto& key : path) {
      if (!v->is_object() || !v->contains(key)) {
        v = nullptr;
        break;
      }
      v = &(*v)[key];
    }
    if (v != nullptr && v->is_number()) out.emplace_back(r["step"].get<double>(), v->get<double>());
  }
  return out;
}

bool higher_is_better(const std::string& metric) {
  return metric == "accuracy";
}

const char* kStyle = R"(body{font-family:sans-serif;margin:24px;color:#222;max-width:1340px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}.charts{display:flex;flex-wrap:wrap;gap:16px}
figure.chart{margin:0;border:1px solid #ddd;padding:8px;background:#fff}
figcaption{font-weight:bold;font-size:13px;margin-bottom:4px}.plot{fill:#fafafa;stroke:#ccc}
.grid{stroke:#e4e4e4}.tick,.legend{font-size:11px;fill:#444}.axis{font-size:12px;fill:#222}
.best{stroke:#000;stroke-width:2}.note{color:#777;font-size:13px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
pre{background:#f6f6f6;padding:12px;font-size:12px;overflow:auto}
#tip{position:fixed;display:none;background:#333;color:#fff;padding:3px 6px;font-size:12px;border-radius:3px;pointer-events:none})";

// Hover tips; marks the page as ready when it ran (the tests check that no script failed).
const char* kScript = R"(<script>
(function () {
  var tip = document.getElementById('tip');
  document.querySelectorAll('[data-tip]').forEach(function (el) {
    el.addEventListener('mousemove', function (ev) {
      tip.textContent = el.getAttribute('data-tip');
      tip.style.left = (ev.clientX + 12) + 'px';
      tip.style.top = (ev.clientY + 12) + 'px';
      tip.style.display = 'block';
    });
    el.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  });
  var n = document.querySelectorAll('g.series').length;
  document.body.setAttribute('data-ready', String(n));
})();
</script>)";

// The header paragraph: model, grid, and where the run stopped (or that it is in progress).
std::string run_summary_html(const std::string& run_dir, const std::vector<Json>& rows,
                             const Json& ledger) {
  std::int64_t last_step = 0;
  std::string end_reason;
  for (const auto& r : rows) {
    if (r.contains("step") && r["step"].is_number_integer()) {
      last_step = std::max(last_step, r["step"].get<std::int64_t>());
    }
    if (r.value("type", "") == "end") end_reason = r.value("reason", "");
  }
  std::string html = str("<h1>hpctrain run ", escape(run_dir), "</h1>\n<p>");
  if (ledger.contains("model")) {
    html += str("model ", escape(ledger["model"].value("name", "?")), " (",
                ledger["model"].value("parameters", 0), " parameters), ");
  }
  if (ledger.contains("grid")) {
    html += str("dp=", ledger["grid"].value("dp", 0), " x tp=", ledger["grid"].value("tp", 0),
                " on ", escape(ledger["grid"].value("device", "")), ", ");
  }
  html += end_reason.empty() ? str("<b>in progress</b> (last record at step ", last_step, ")")
                             : str("stopped after step ", last_step, ": ", escape(end_reason));
  html += "</p>\n";
  return html;
}

// The evaluation metric the page charts: the offline evaluations' when they name one, else the
// one the run's task reports.
std::string run_metric(const std::vector<Json>& rows, const std::vector<Json>& offline,
                       const Json& ledger) {
  std::string task;
  for (const auto& r : rows) {
    if (r.value("type", "") == "eval" && r.contains("task")) task = r.value("task", "");
  }
  if (task.empty() && ledger.contains("model")) task = ledger["model"].value("task", "");
  // A run's records name its task; one that names none reads as a classifier.
  const std::optional<Task> kind = task_from_name(task);
  std::string metric = task.empty() || kind == Task::kClassification ? "accuracy" : "loss";
  if (kind == Task::kLanguageModel) metric = "perplexity";
  if (!offline.empty() && offline.back().contains("metric") &&
      offline.back()["metric"].is_string()) {
    metric = offline.back()["metric"].get<std::string>();
  }
  return metric;
}

// Loss and the evaluation metric.
std::string training_section(const std::vector<Json>& rows, const std::vector<Json>& offline,
                             const std::string& metric) {
  std::string html = "<h2>Training and evaluation</h2><div class=\"charts\">\n";
  std::vector<Series> loss{{"train loss", field_series(rows, "train", {"loss"}), kColors[0]},
                           {"eval loss", field_series(rows, "eval", {"loss"}), kColors[1]}};
  html += line_chart("loss", "Loss", "loss", loss);
  std::vector<Series> evals{
      {str("eval ", metric), field_series(rows, "eval", {metric}), kColors[1]}};
  Series off{str("offline eval ", metric), {}, kColors[2], false, "d"};
  for (const auto& r : offline) {
    if (r.contains("step") && r.contains(metric) && r[metric].is_number()) {
      off.points.emplace_back(r["step"].get<double>(), r[metric].get<double>());
    }
  }
  std::sort(off.points.begin(), off.points.end());
  for (std::size_t i = 0; i < off.points.size(); ++i) {
    const bool better =
        off.highlight < 0 ||
        (higher_is_better(metric) ? off.points[i].second > off.points[off.highlight].second
                                  : off.points[i].second < off.points[off.highlight].second);
    if (better) off.highlight = static_cast<int>(i);
  }
  evals.push_back(off);
  html += line_chart("metric",
                     str("Evaluation ", metric,
                         " (offline evaluations of checkpoints: "
                         "diamonds, the best one large)"),
                     metric, evals);
  html += "</div>\n";
  return html;
}

std::string throughput_section(const std::vector<Json>& rows) {
  std::string html = "<h2>Throughput</h2><div class=\"charts\">\n";
  std::vector<Series> speed{
      {"samples/s", field_series(rows, "train", {"samples_per_s"}), kColors[0]}};
  auto tokens = field_series(rows, "train", {"tokens_per_s"});
  if (!tokens.empty()) speed.push_back({"tokens/s", tokens, kColors[3]});
  html += line_chart("throughput", "Training throughput", "per second", speed);
  auto mfu = field_series(rows, "train", {"mfu"});
  if (!mfu.empty())
    html += line_chart("mfu", "Model FLOPs utilisation", "MFU", {{"MFU", mfu, kColors[4]}});
  std::vector<Series> times{{"step time", field_series(rows, "train", {"step_time"}), kColors[0]},
                            {"data wait", field_series(rows, "train", {"data_wait"}), kColors[3]},
                            {"comm time", field_series(rows, "train", {"comm_time"}), kColors[1]}};
  html += line_chart("step_time", "Seconds per step", "seconds", times);
  html += "</div>\n";
  return html;
}

// Stragglers: each rank's compute time per step, interval by interval (train records'
// rank_compute_s), the ranks the detector named drawn as markers on their line. Empty when no
// record carries per-rank times.
std::string stragglers_section(const std::vector<Json>& rows) {
  std::vector<Series> per_rank;
  for (const auto& r : rows) {
    if (r.value("type", "") != "train" || !r.contains("rank_compute_s") || !r.contains("step") ||
        !r["rank_compute_s"].is_array() || !r["step"].is_number()) {
      continue;
    }
    const auto& compute = r["rank_compute_s"];
    for (std::size_t k = 0; k < compute.size() && k < 16; ++k) {
      if (per_rank.size() <= k) {
        per_rank.push_back({str("rank ", k), {}, kColors[k % (sizeof kColors / sizeof *kColors)]});
      }
      if (compute[k].is_number()) {
        per_rank[k].points.emplace_back(r["step"].get<double>(), compute[k].get<double>());
      }
    }
  }
  if (per_rank.empty()) return {};
  Series named{"named straggler", {}, "#000000", false, "d"};
  for (const auto& r : rows) {
    if (r.value("type", "") == "straggler" && r.value("which", "") == "compute" &&
        r.contains("step") && r["step"].is_number()) {
      named.points.emplace_back(r["step"].get<double>(), r.value("seconds_per_step", 0.0));
    }
  }
  if (!named.points.empty()) per_rank.push_back(named);
  std::string html = "<h2>Stragglers</h2><div class=\"charts\">\n";
  html += line_chart("rank_compute",
                     "Compute seconds per step, per rank (the first 16 ranks; named "
                     "stragglers: diamonds)",
                     "seconds", per_rank);
  html += "</div>\n";
  return html;
}

// Where the time went, per rank, and what training cost against evaluation.
std::string ledger_section(const Json& ledger) {
  std::string html = "<h2>Compute ledger</h2><div class=\"charts\">\n";
  const std::vector<std::string> phases{"forward",   "backward", "optimizer", "comm_wait",
                                        "data_wait", "eval",     "checkpoint"};
  std::vector<Bar> ranks;
  if (ledger.contains("rank_seconds_per_rank") && ledger["rank_seconds_per_rank"].is_object()) {
    const auto& per = ledger["rank_seconds_per_rank"];
    const std::size_t n = per.value("forward", Json::array()).size();
    for (std::size_t i = 0; i < n; ++i) {
      Bar b{str("rank ", i), {}};
      for (const auto& p : phases) {
        b.parts.push_back(per.contains(p) && per[p].size() > i ? per[p][i].get<double>() : 0.0);
      }
      ranks.push_back(b);
    }
  } else if (ledger.contains("rank_seconds")) {
    Bar b{"all ranks", {}};
    for (const auto& p : phases) b.parts.push_back(ledger["rank_seconds"].value(p, 0.0));
    ranks.push_back(b);
  }
  html += bar_chart("phases", "Phase breakdown per rank (ledger.json)", "s", phases, ranks);
  std::vector<Bar> cost;
  if (ledger.contains("rank_seconds")) {
    const auto& rs = ledger["rank_seconds"];
    cost.push_back({"rank-seconds", {rs.value("train_loop", 0.0), rs.value("eval", 0.0)}});
  }
  html += bar_chart("cost", "Training against evaluation cost (rank-seconds)", "s",
                    {"training", "evaluation"}, cost);
  if (ledger.contains("flops")) {
    const auto& f = ledger["flops"];
    html +=
        bar_chart("flops", "Training against evaluation FLOPs", "FLOP", {"training", "evaluation"},
                  {{"FLOPs", {f.value("train_total", 0.0), f.value("eval_total", 0.0)}}});
  }
  html += "</div>\n";
  return html;
}

std::string memory_section(const std::vector<Json>& rows, const Json& ledger) {
  std::string html = "<h2>Memory</h2><div class=\"charts\">\n";
  auto mib = [](std::vector<std::pair<double, double>> points) {
    for (auto& p : points) p.second /= 1048576.0;
    return points;
  };
  std::vector<Series> memory{
      {"max over ranks", mib(field_series(rows, "train", {"resources", "rss_bytes", "max"})),
       kColors[1]},
      {"mean", mib(field_series(rows, "train", {"resources", "rss_bytes", "mean"})), kColors[0]},
      {"min", mib(field_series(rows, "train", {"resources", "rss_bytes", "min"})), kColors[2]}};
  html += line_chart("memory", "Resident memory (MiB)", "MiB", memory);
  auto device = field_series(rows, "train", {"resources", "device_memory_bytes", "max"});
  if (!device.empty()) {
    html += line_chart("device_memory", "Device memory (MiB, max over ranks)", "MiB",
                       {{"device memory", mib(device), kColors[4]}});
  }
  std::vector<Bar> peaks;
  if (ledger.contains("peak_rss_bytes_per_rank")) {
    const auto& p = ledger["peak_rss_bytes_per_rank"];
    for (std::size_t i = 0; i < p.size(); ++i) {
      peaks.push_back({str("rank ", i), {p[i].get<double>() / 1048576.0}});
    }
  }
  html += bar_chart("memory_peaks", "Peak resident memory per rank (ledger.json)", "MiB",
                    {"peak resident memory"}, peaks);
  html += "</div>\n";
  return html;
}

// The table of offline evaluations; empty when there are none.
std::string offline_table(const std::vector<Json>& offline, const std::string& metric) {
  if (offline.empty()) return {};
  std::string html = "<h2>Offline evaluations</h2><table><tr><th>step</th><th>" + escape(metric) +
                     "</th><th>samples</th><th>checkpoint</th></tr>\n";
  for (const auto& r : offline) {
    html += str("<tr><td>", r.value("step", 0), "</td><td>",
                r.contains(metric) && r[metric].is_number() ? num(r[metric].get<double>()) : "",
                "</td><td>", r.value("samples", 0), "</td><td>", escape(r.value("checkpoint", "")),
                "</td></tr>\n");
  }
  html += "</table>\n";
  return html;
}

}  // namespace

std::string render_report_page(const std::string& run_dir) {
  const std::string metrics_path = run_dir + "/metrics.jsonl";
  std::error_code ec;
  if (!fs::exists(metrics_path, ec) && !fs::exists(run_dir + "/config.yaml", ec)) {
    throw ConfigError(str(run_dir,
                          " is not a run directory (neither metrics.jsonl nor config.yaml): pass "
                          "the run.dir of a training run"));
  }
  const std::vector<Json> rows = read_jsonl(metrics_path);
  const std::vector<Json> offline = read_jsonl(run_dir + "/eval/results.jsonl");
  Json ledger = Json::parse(read_text(run_dir + "/ledger.json"), nullptr, false);
  if (ledger.is_discarded() || !ledger.is_object()) ledger = Json::object();
  const std::string config = read_text(run_dir + "/config.yaml");
  const std::string metric = run_metric(rows, offline, ledger);

  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  html += str("<title>hpctrain report: ", escape(run_dir), "</title><style>", kStyle,
              "</style></head>\n<body><div id=\"tip\"></div>\n");
  html += run_summary_html(run_dir, rows, ledger);
  html += training_section(rows, offline, metric);
  html += throughput_section(rows);
  html += stragglers_section(rows);
  html += ledger_section(ledger);
  html += memory_section(rows, ledger);
  html += offline_table(offline, metric);
  html += "<h2>Configuration (config.yaml)</h2><pre>" +
          (config.empty() ? std::string("(no config.yaml)") : escape(config)) + "</pre>\n";
  html += kScript;
  html += "\n</body></html>\n";
  return html;
}

}  // namespace hpctrain::report
