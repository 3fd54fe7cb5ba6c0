#!/usr/bin/env bash
# tracelint run's unprofiled steps on a real GPU (issue #34, item 3): a compiled and an eager GPT (fixtures/run/
# gpt_small.py: d 1024, 16 layers, bf16, batch 8 x 1024) under `tracelint run --settings full`, each against an
# external timing of the same model in a fresh process (20 warm-up steps, then the median of 7 blocks of 10 steps,
# one synchronization per block). The issue's H200 reading: compiled, tracelint timed steps 1-4 at 44.9 ms against
# 35.9 ms steady and called the run cpu-bound when not profiled; eager 45.2 against 44.15 ms.
# Usage, from the repository root on a CUDA machine (libcst, orjson, click, tabulate, pyyaml from .whl/ when absent):
#     bash tests/run/gpu_warmup.sh        # writes $OUT/warmup.md (the summary) and the reports beside it
# About 5 minutes on one H100/H200, most of it torch.compile (its cache makes the second compiled process faster).
# GPT_ARGS="--d 64 --layers 2 --heads 4 --seq 32 --vocab 100 --batch 2" runs the same plumbing on a CPU, quickly.
set -uo pipefail
GPT_ARGS="${GPT_ARGS:-}"
OUT="${OUT:-/tmp/tracelint-warmup-out}"
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
TRACES=/tmp/tracelint-warmup-traces  # the traces stay on the machine; the reports come back
rm -rf "$TRACES"
mkdir -p "$TRACES"
LOG="$OUT/warmup.log"
: > "$LOG"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$LOG" || true
python3 -c "import torch; print('torch', torch.__version__, 'GPUs', torch.cuda.device_count())" | tee -a "$LOG"

for model in compiled eager; do
    flag=$([ "$model" = compiled ] && echo --compile || true)
    started=$SECONDS
    timeout 280 python3 fixtures/run/gpt_small.py $flag $GPT_ARGS --time > "$TRACES/$model-time.json" 2>> "$LOG"
    echo "external timing, $model: exit $? in $((SECONDS - started)) s" | tee -a "$LOG"
    started=$SECONDS
    timeout 280 python3 -m tracelint run --settings full --max-steps 80 --out "$TRACES/$model" --format json \
        -o "$OUT/$model.json" fixtures/run/gpt_small.py -- $flag $GPT_ARGS --steps 100000 >> "$LOG" 2>&1
    echo "tracelint run, $model: exit $? in $((SECONDS - started)) s" | tee -a "$LOG"
done
cat "$TRACES"/compiled-time.json "$TRACES"/eager-time.json > "$OUT/timing.jsonl" 2>/dev/null

python3 - "$OUT" "$TRACES" <<'EOF' | tee "$OUT/warmup.md"
import gzip, json, sys
from pathlib import Path

out, traces = Path(sys.argv[1]), Path(sys.argv[2])
print("| model | external steady ms (blocks) | first steps, one sync each (ms) | tracelint: warm-up, timed steps | "
      "unprofiled ms | vs external | profiled ms | inflation | verdict |")
print("|---|---|---|---|---|---|---|---|---|")
checks = []
for model in ("compiled", "eager"):
    try:
        ext = json.loads((traces / f"{model}-time.json").read_text())
        doc = json.loads((out / f"{model}.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"| {model} | FAIL: {type(exc).__name__}: {exc} |")
        checks.append((f"{model}: a report and an external timing", False))
        continue
    run, trace = doc["run"], doc["traces"][0]
    timed = run["unprofiled"] or {}
    warmup = timed.get("warmup") or {}
    with gzip.open(trace["path"], "rt") as handle:
        record = json.load(handle).get("tracelint", {})
    unprofiled = trace["profiler"]["unprofiled_step_ms"]
    m = trace["metrics"]
    profiled = max(v for v in (m.get("step_cpu_us_mean") or 0, m.get("step_gpu_span_us_mean") or 0)) / 1e3
    off = (unprofiled / ext["median_ms"] - 1) * 100 if unprofiled else None
    last = timed.get("first_step", 0) + timed.get("steps", 0) - 1
    print(f"| {model} | {ext['median_ms']:.2f} ({min(ext['blocks_ms']):.2f}-{max(ext['blocks_ms']):.2f}) | "
          f"{', '.join(f'{v:.1f}' for v in ext['first_steps_ms'])} | "
          f"{'settled' if warmup.get('settled') else 'NOT settled'} after "
          f"{len(warmup.get('steps_ms') or [])} steps ({', '.join(f'{v:.1f}' for v in (warmup.get('steps_ms') or [])[:8])}"
          f"{', ...' if len(warmup.get('steps_ms') or []) > 8 else ''}); steps {timed.get('first_step')}-{last} | "
          f"{unprofiled} | {'' if off is None else f'{off:+.1f} %'} | {profiled:.2f} | "
          f"{m.get('profiler_inflation')} | {trace['verdict']}: {trace['evidence']} |")
    checks.append((f"{model}: the timed steps come after the warm-up (steps {timed.get('first_step')}-{last})",
                   bool(timed.get("first_step")) and warmup.get("settled")))
    checks.append((f"{model}: unprofiled {unprofiled} ms within 10 % of the external {ext['median_ms']} ms",
                   off is not None and abs(off) <= 10))
    checks.append((f"{model}: the trace's record says which steps (warmup.profiler_step_0 "
                   f"{record.get('warmup', {}).get('profiler_step_0')})", "warmup" in record))
print()
for name, ok in checks:
    print(f"- {'PASS' if ok else 'FAIL'}: {name}")
for model in ("compiled", "eager"):
    try:
        print(f"\n## {model}: the run's header\n")
        print("\n".join(json.loads((out / f"{model}.json").read_text())["run"]["summary"]))
    except (OSError, ValueError):
        pass
EOF
