#!/usr/bin/env bash
# hpctrain report: the page loads in headless Chromium with no console message (the page's own
# script marks the body when it ran) and gives a screenshot; its plotted series hold the values
# of metrics.jsonl and eval/results.jsonl, the best offline evaluation is highlighted; a run
# without evaluations, and a run in progress (half-written metrics.jsonl, no ledger yet), still
# give a page; a directory that is not a run is refused with exit 2.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # its commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5")
if ! command -v chromium >/dev/null; then
  echo "chromium is missing: run scripts/setup.sh" >&2
  exit 1
fi

# browse PAGE NAME: dumps the DOM after the page's scripts ran, takes a screenshot, and fails on
# any console message (an uncaught error in the page's script shows there).
browse() {
  local page=$1 name=$2
  timeout 90 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/chromium-$name" \
    --enable-logging=stderr --v=0 --dump-dom "file://$page" >"$TMP/$name.dom" 2>"$TMP/$name.err" ||
    fail "chromium could not load $page"
  if grep -q ':CONSOLE' "$TMP/$name.err"; then
    fail "console messages on $page:"
    grep ':CONSOLE' "$TMP/$name.err" >&2
  fi
  grep -q 'data-ready="[1-9]' "$TMP/$name.dom" || fail "the page's script did not run on $page"
  timeout 90 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$TMP/chromium-$name" \
    --window-size=1400,2600 --screenshot="$TMP/$name.png" "file://$page" >/dev/null 2>&1
  [[ -s $TMP/$name.png ]] || fail "no screenshot of $page"
}

expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/run" --set data.batch_size=16 --set checkpoint.every_steps=20 \
  --set checkpoint.keep=3
expect_exit 0 "$TMP/eval.txt" "$HPCTRAIN_BIN" eval --checkpoints "$TMP/run"
expect_exit 0 "$TMP/report.txt" "$HPCTRAIN_BIN" report "$TMP/run"
browse "$TMP/run/report.html" full

cat >"$TMP/series.py" <<'PY'
import html.parser, json, math, sys
class P(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.series, self.bars, self.best, self.figure = {}, {}, 0, ""
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self.figure = a.get("id", "")
        if tag == "g" and "data-points" in a:
            self.series[a["data-name"]] = [tuple(p) for p in json.loads(a["data-points"])]
        if tag == "g" and "data-parts" in a:  # bars by chart: {"phases": {"rank 0": [...]}}
            self.bars.setdefault(self.figure, {})[a["data-name"]] = json.loads(a["data-parts"])
        if "best" in a.get("class", "").split():
            self.best += 1
def parse(path):
    p = P()
    p.feed(open(path).read())
    return p
def same(got, want):
    assert len(got) == len(want), (got, want)
    for (s1, v1), (s2, v2) in zip(got, want):
        assert s1 == s2 and math.isclose(v1, v2, rel_tol=1e-8), ((s1, v1), (s2, v2))
PY

$PY - "$TMP" "$TMP/run" <<'PY' || fail "plotted series of the full run"
import json, sys
sys.path.insert(0, sys.argv[1])
from series import parse, same
run = sys.argv[2]
p = parse(f"{sys.argv[1]}/full.dom")
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
train = [r for r in rows if r["type"] == "train"]
evals = [r for r in rows if r["type"] == "eval"]
same(p.series["train loss"], [(r["step"], r["loss"]) for r in train])
same(p.series["eval loss"], [(r["step"], r["loss"]) for r in evals])
same(p.series["eval accuracy"], [(r["step"], r["accuracy"]) for r in evals])
same(p.series["samples/s"], [(r["step"], r["samples_per_s"]) for r in train])
same(p.series["max over ranks"],
     [(r["step"], r["resources"]["rss_bytes"]["max"] / 1048576) for r in train])
offline = sorted((r["step"], r["accuracy"]) for r in map(json.loads, open(f"{run}/eval/results.jsonl")))
assert [s for s, _ in offline] == [20, 40, 60], offline
same(p.series["offline eval accuracy"], offline)
assert p.best == 1, p.best
led = json.load(open(f"{run}/ledger.json"))
per = led["rank_seconds_per_rank"]
assert sorted(p.bars) == ["cost", "flops", "memory_peaks", "phases"], p.bars
for i in range(2):
    assert p.bars["phases"][f"rank {i}"] == [per[k][i] for k in
        ("forward", "backward", "optimizer", "comm_wait", "data_wait", "eval", "checkpoint")], p.bars
    assert p.bars["memory_peaks"][f"rank {i}"] == [led["peak_rss_bytes_per_rank"][i] / 1048576], p.bars
assert p.bars["cost"]["rank-seconds"] == [led["rank_seconds"]["train_loop"], led["rank_seconds"]["eval"]]
assert abs(sum(per["forward"]) - led["rank_seconds"]["forward"]) < 1e-9, per
PY
grep -q "offline eval accuracy" "$TMP/run/report.html" || fail "offline evaluations missing"

# No evaluations at all, -o elsewhere.
expect_exit 0 "$TMP/train-noeval.txt" "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/noeval" --set eval.every_steps=0 --set eval.at_end=false \
  --set run.max_steps=20
expect_exit 0 "$TMP/report-noeval.txt" "$HPCTRAIN_BIN" report "$TMP/noeval" -o "$TMP/noeval.html"
browse "$TMP/noeval.html" noeval
$PY - "$TMP" "$TMP/noeval" <<'PY' || fail "page of the run without evaluations"
import json, sys
sys.path.insert(0, sys.argv[1])
from series import parse, same
p = parse(f"{sys.argv[1]}/noeval.dom")
train = [r for r in map(json.loads, open(f"{sys.argv[2]}/metrics.jsonl")) if r["type"] == "train"]
same(p.series["train loss"], [(r["step"], r["loss"]) for r in train])
assert not p.series.get("eval accuracy") and not p.series.get("offline eval accuracy"), p.series
assert "no data yet" in open(f"{sys.argv[1]}/noeval.dom").read()
PY

# A run in progress: no ledger yet, the last line of metrics.jsonl half-written.
mkdir -p "$TMP/partial"
cp "$TMP/run/config.yaml" "$TMP/partial/"
head -c -40 "$TMP/run/metrics.jsonl" >"$TMP/partial/metrics.jsonl"
expect_exit 0 "$TMP/report-partial.txt" "$HPCTRAIN_BIN" report "$TMP/partial"
browse "$TMP/partial/report.html" partial
expect_grep "in progress" "$TMP/partial/report.html"
$PY - "$TMP" "$TMP/partial" <<'PY' || fail "page of the run in progress"
import json, sys
sys.path.insert(0, sys.argv[1])
from series import parse, same
p = parse(f"{sys.argv[1]}/partial.dom")
rows = []
for line in open(f"{sys.argv[2]}/metrics.jsonl"):
    try:
        rows.append(json.loads(line))
    except ValueError:
        pass  # the cut line
train = [r for r in rows if r["type"] == "train"]
assert len(train) >= 5, train
same(p.series["train loss"], [(r["step"], r["loss"]) for r in train])
PY

# Not a run directory: exit 2 naming it.
mkdir -p "$TMP/empty"
expect_exit 2 "$TMP/report-empty.txt" "$HPCTRAIN_BIN" report "$TMP/empty"
expect_grep "is not a run directory" "$TMP/report-empty.txt"
finish
