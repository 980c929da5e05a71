"""What the checks of trace_test.sh share: a trace.json of hpctrain read into lanes and slices.

    import trace_util
    lanes, slices, summary = trace_util.load(TRACE_JSON, SUMMARY_JSON)
lanes maps (pid, tid) to the lane's name; slices maps (lane name, pid) to that lane's complete
events as (start_us, end_us, name, args), every one on a named lane."""
import json
from collections import defaultdict


def load(trace_path, summary_path):
    events = json.load(open(trace_path))["traceEvents"]
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    slices = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert (e["pid"], e["tid"]) in lanes, ("slice on an unnamed lane", e)
            slices[lanes[(e["pid"], e["tid"])], e["pid"]].append(
                (e["ts"], e["ts"] + e["dur"], e["name"], e.get("args", {})))
    return lanes, slices, json.load(open(summary_path))


def inside(s, outer):
    """Slice s lies within slice outer (to the trace's microsecond rounding)."""
    return outer[0] - 1e-3 <= s[0] and s[1] <= outer[1] + 1e-3


def assert_nested(slices):
    """Strict nesting per lane: a slice starting inside another ends inside it."""
    for key, ss in slices.items():
        ss.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s in ss:
            while stack and stack[-1][1] <= s[0] + 1e-3:
                stack.pop()
            assert not stack or s[1] <= stack[-1][1] + 1e-3, ("not nested", key, stack[-1], s)
            stack.append(s)
