"""Run by bench_trace.py inside bench/.cache/venv-hta: HTA load + temporal breakdown + idle time breakdown.

usage: python hta_driver.py TRACE_DIR
Prints one JSON line with the phase timings and a summary of the results.
"""

import json
import logging
import sys
import time
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis  # noqa: E402

t1 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
temporal = analyzer.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
ranks = sorted(analyzer.t.get_ranks())
idle, _ = analyzer.get_idle_time_breakdown(ranks=ranks, visualize=False)
t4 = time.perf_counter()

print(json.dumps({
    "import_s": round(t1 - t0, 3),
    "load_s": round(t2 - t1, 3),
    "temporal_s": round(t3 - t2, 3),
    "idle_s": round(t4 - t3, 3),
    "ranks": ranks,
    "events": int(sum(len(df) for df in analyzer.t.get_all_traces().values())),
    "temporal": json.loads(temporal.to_json(orient="records")),
    "idle_rows": len(idle),
}))
