#pragma once
// `hpctrain report RUN_DIR`: one self-contained HTML page of a run (inline SVG charts and a few
// lines of inline script, no network access, works from a file:// URL), built from the run
// directory's files: metrics.jsonl (training and periodic evaluation), eval/results.jsonl
// (offline evaluations of checkpoints), ledger.json (phases per rank, cost, memory peaks) and
// config.yaml. Works on a run in progress: a half-written last line of metrics.jsonl is skipped,
// and missing files leave their charts out with a note.

#include <string>

namespace hpctrain::report {

/// The report page of `run_dir` as HTML text. Throws ConfigError when `run_dir` is not a run
/// directory (no metrics.jsonl and no config.yaml). Local.
std::string render_report_page(const std::string& run_dir);

}  // namespace hpctrain::report
