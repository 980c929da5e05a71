#!/usr/bin/env bash
# Generation throughput (docs/BENCHMARKS.md, "Generation"): `hpctrain generate` with its KV cache
# against the PyTorch reference with a KV cache (scripts/gpt_generate_reference.py --bench), the
# same gpt (configs/gpt-small-tp2.yaml's sizes at tp = 1: width 384, 6 layers, context 256,
# byte-level; trained one step for a checkpoint), the same work (prompts of 16 tokens, NEW greedy
# tokens each, no stop), one process with one thread each, batch 1 and 8, alternating REPEAT
# times in the same run. tokens/s = new tokens / the whole call (prefill included); both also
# report the time to first token. Prints medians and the ratio.
#   scripts/bench_generate.sh [REPEAT] [NEW]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
repeat=${1:-3}
new=${2:-128}
build_if_missing
one_thread_per_rank
text=${TEXT_DIR:-data/text}
fortunes_text "$text"
out=${BENCH_OUT:-/tmp/hpctrain-bench-generate}
rm -rf "$out" && mkdir -p "$out"
"$bin" --threads 1 train -c configs/gpt-small-tp2.yaml --set parallel.tp=1 \
  --set "data.train=$text/train.h5" --set "data.val=$text/val.h5" --set run.max_steps=1 \
  --set data.batch_size=2 --set eval.every_steps=0 --set eval.at_end=false \
  --set checkpoint.at_end=true --set "run.dir=$out/run" --set logging.progress=plain \
  --resume none >"$out/train.log" 2>&1
# Eight prompts of 16 bytes (ASCII lines of the fortunes).
/usr/bin/python3 - "$out/prompts.txt" <<'PY'
import glob, sys
lines = []
for f in sorted(glob.glob("/usr/share/games/fortunes/*.u8")):
    for l in open(f, encoding="utf-8", errors="ignore"):
        l = l.strip()
        if len(l) >= 16 and l.isascii():
            lines.append(l[:16])
open(sys.argv[1], "w").write("\n".join(lines[:8]) + "\n")
PY
for batch in 1 8; do
  head -n "$batch" "$out/prompts.txt" >"$out/prompts$batch.txt"
  for ((i = 1; i <= repeat; i++)); do
    "$bin" -q --threads 1 generate --checkpoint "$out/run" --prompts "$out/prompts$batch.txt" \
      --max-new-tokens "$new" --batch-size "$batch" --ignore-eot --json \
      | tail -n 1 >"$out/hpctrain-b$batch-$i.json"
    /usr/bin/python3 scripts/gpt_generate_reference.py --checkpoint "$out/run" --bench \
      --batch "$batch" --prompt-len 16 --max-new-tokens "$new" --repeat 1 --threads 1 \
      >"$out/torch-b$batch-$i.json"
  done
done
/usr/bin/python3 - "$out" "$repeat" "$new" <<'PY'
import json, statistics, sys
out, repeat, new = sys.argv[1], int(sys.argv[2]), sys.argv[3]
for batch in (1, 8):
    ours = [json.load(open(f"{out}/hpctrain-b{batch}-{i}.json")) for i in range(1, repeat + 1)]
    theirs = [json.load(open(f"{out}/torch-b{batch}-{i}.json")) for i in range(1, repeat + 1)]
    assert all(o["new_tokens"] == t["new_tokens"] == batch * int(new) for o, t in zip(ours, theirs))
    o = statistics.median(r["tokens_per_s"] for r in ours)
    t = statistics.median(r["tokens_per_s"] for r in theirs)
    of = statistics.median(r["first_token_seconds"] for r in ours) * 1000
    tf = statistics.median(r["first_token_seconds"] for r in theirs) * 1000
    runs = lambda rs: ", ".join(f"{r['tokens_per_s']:,.0f}" for r in rs)
    print(f"batch {batch}: hpctrain generate {o:,.0f} tokens/s (runs: {runs(ours)}; first token "
          f"{of:.1f} ms), PyTorch with a KV cache {t:,.0f} tokens/s (runs: {runs(theirs)}; first "
          f"token {tf:.1f} ms): hpctrain / PyTorch = {o / t:.2f}x")
PY
