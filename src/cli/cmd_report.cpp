// hpctrain report RUN_DIR [-o FILE]: the run's report page, one self-contained HTML file (see
// include/hpctrain/report/report_page.hpp). Works on a run still in progress.

#include <fstream>
#include <iostream>

#include "command.hpp"
#include "hpctrain/report/report_page.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

struct ReportArgs {
  std::string run_dir;
  std::string out;
};

int run_report(CommandContext& ctx, const ReportArgs& opt) {
  if (ctx.runtime.world_rank() != 0) return 0;  // local work; other ranks have nothing to do
  const std::string html = report::render_report_page(opt.run_dir);
  const std::string out = opt.out.empty() ? opt.run_dir + "/report.html" : opt.out;
  const std::string temp = out + ".tmp";
  {
    std::ofstream file(temp, std::ios::trunc);
    file << html;
    file.flush();
    if (!file) {
      throw ConfigError(str("cannot write ", out, ": choose a writable path with -o FILE"));
    }
  }
  if (std::rename(temp.c_str(), out.c_str()) != 0) {
    throw ConfigError(str("cannot write ", out, ": choose a writable path with -o FILE"));
  }
  std::cout << "report: " << out << "\n";
  return 0;
}

const CommandRegistration report_command = command<ReportArgs>(
    "report", "Write a run's report page: one self-contained HTML file",
    [](CLI::App& app, ReportArgs& opt) {
      app.add_option("run_dir", opt.run_dir, "Run directory (run.dir of a training run)")
          ->required();
      app.add_option("-o,--out", opt.out, "Output file (default RUN_DIR/report.html)");
    },
    run_report, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
