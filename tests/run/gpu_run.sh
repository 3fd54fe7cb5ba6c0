#!/usr/bin/env bash
# tracelint run on a real GPU (issue #27, "Done means"): a loader-based script with a per-step loss.item() and a
# pageable DataLoader (fixtures/run/loader_item.py) must give, first, the merged TL101 and TL202 findings with their
# source line, their measured cost and (--verify) their measured speedup; with 2 GPUs, a torchrun DDP job report;
# the real Lightning and Hugging Face Trainer count the optimizer steps they report.
# Usage, from the repository root on a CUDA machine (torch and torchvision installed; libcst and orjson from .whl/
# when they are not):
#     bash tests/run/gpu_run.sh        # writes $OUT/run.md (the summary) and the reports and logs beside it
# About 6-8 minutes on one H100/H200 (each verified fix alternates with the baseline for at most 20 s).
set -uo pipefail
OUT="${OUT:-/tmp/tracelint-run-out}"
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1
TRACES=/tmp/tracelint-run-traces  # the traces stay on the machine; the reports come back
rm -rf "$TRACES"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'GPUs', torch.cuda.device_count())"

started=$SECONDS
# 1. The merged report with --verify, as JSON (the checks below read it); the script's output and progress to a log.
python3 -m tracelint run --max-steps 40 --verify --verify-budget 20 --out "$TRACES/verify" --format json \
    -o "$OUT/loader.json" fixtures/run/loader_item.py -- --steps 100000 > "$OUT/loader-verify.log" 2>&1
echo "tracelint run --verify: exit $? in $((SECONDS - started)) s"
# 2. The same run as the text report people read (no --verify: a minute).
started=$SECONDS
python3 -m tracelint run --max-steps 40 --out "$TRACES/text" fixtures/run/loader_item.py -- --steps 100000 \
    > "$OUT/loader.txt" 2> "$OUT/loader-text.log"
echo "tracelint run (text): exit $? in $((SECONDS - started)) s"
# 3. The hook's cost per step on this machine's CPU.
python3 bench/bench_run_hook.py > "$OUT/hook.txt" 2>&1
# 4. torchrun over NCCL when there are two GPUs: a job report.
if [ "$(python3 -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
    started=$SECONDS
    python3 -m tracelint run --max-steps 30 --out "$TRACES/ddp" torchrun --nproc_per_node 2 \
        fixtures/run/ddp_train.py --backend nccl --steps 1000 > "$OUT/ddp.txt" 2> "$OUT/ddp.log"
    echo "tracelint run torchrun: exit $? in $((SECONDS - started)) s"
fi
# 5. The real Lightning and Hugging Face Trainer (installed there) step through the same hook (60 steps: room for the
#    warm-up detection, up to 30 steps, before the schedule).
for framework in real_lightning real_hf_trainer; do
    started=$SECONDS
    python3 -m tracelint run --wait 3 --warmup 1 --active 3 --out "$TRACES/$framework" --format json \
        -o "$TRACES/$framework.json" "fixtures/run/$framework.py" -- --max-steps 60 > "$TRACES/$framework.log" 2>&1
    echo "tracelint run $framework: exit $? in $((SECONDS - started)) s"
done

python3 - "$OUT" "$TRACES" <<'EOF' | tee "$OUT/run.md"
import json, sys
from pathlib import Path

out, traces = Path(sys.argv[1]), Path(sys.argv[2])


def tail(path: Path, n: int = 12) -> str:
    try:
        return "\n".join("    " + line for line in path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "    (no log)"


def loader_checks() -> None:
    try:
        doc = json.loads((out / "loader.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"- FAIL: no report from tracelint run --verify ({exc}); its log ends:\n{tail(out / 'loader-verify.log')}")
        return
    devices = sorted({str(t["metrics"].get("device_name")) for t in doc["traces"]})
    print("## tracelint run --verify on", ", ".join(devices))
    print()
    print("\n".join(doc["run"]["summary"]))
    print()
    print("| # | rule | line | severity | cost (% of step) | paired | verify | speedup (95% CI) | ms/step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, f in enumerate(doc["findings"], 1):
        ev = f["evidence"] or {}
        v = f["details"].get("verification") or {}
        ci = v.get("ci95")
        line = f["line"] if f["line"] else (f["source"] or {}).get("line")
        ms = f"{v['baseline_ms']:.2f} → {v['fixed_ms']:.2f}" if v.get("fixed_ms") else ""
        paired = ev.get("match") or ("not seen" if ev.get("source") else "trace only")
        print(f"| {i} | {f['code']} | {f['path']}:{line} | {f['severity']} | {ev.get('cost_pct_of_step')} | {paired} "
              f"| {v.get('status', '')} | {v.get('speedup', '')}{f' ({ci[0]}–{ci[1]})' if ci else ''} | {ms} |")
    first = doc["findings"][:2]
    checks = {
        "the first two findings are TL101 and TL202": sorted(f["code"] for f in first) == ["TL101", "TL202"],
        "both merged (a lint and a trace evidence)": all(f["evidence"] and f["evidence"]["source"]
                                                         and f["evidence"]["trace"] for f in first),
        "both with a source line": len(first) == 2 and all(f["line"] for f in first),
        "both with a measured cost": len(first) == 2 and all(f["evidence"] and f["evidence"]["cost_pct_of_step"]
                                                             is not None for f in first),
        "both with a measured speedup (--verify)": len(first) == 2 and all(
            (f["details"].get("verification") or {}).get("speedup") for f in first),
    }
    print()
    for name, ok in checks.items():
        print(f"- {'PASS' if ok else 'FAIL'}: {name}")
    print()
    print("verify:", json.dumps(doc["run"]["verify"]))


def framework_check(framework: str) -> None:
    log = traces / f"{framework}.log"
    try:
        printed = [line for line in log.read_text().splitlines() if line.startswith("global_step=")]
        run = json.loads((traces / f"{framework}.json").read_text())["run"]
    except (OSError, ValueError) as exc:
        print(f"- FAIL: {framework}: {type(exc).__name__}: {exc}; its log ends:\n{tail(log)}")
        return
    counted = list(run["steps"].values())
    ok = bool(printed) and counted == [int(printed[-1].split("=")[1])] and len(run["traces"]) == 1
    print(f"- {'PASS' if ok else 'FAIL'}: {framework}: the script says {printed[-1:]}, tracelint counted {counted} "
          f"optimizer steps and wrote {len(run['traces'])} trace")
    if not ok:
        print(tail(log))


loader_checks()
print()
for framework in ("real_lightning", "real_hf_trainer"):
    framework_check(framework)
EOF
echo; echo "## the text report"; sed -n '/^tracelint run:/,$p' "$OUT/loader.txt"
echo; echo "## the hook's cost"; cat "$OUT/hook.txt" | grep -v "UserWarning\|schedule("
if [ -f "$OUT/ddp.txt" ]; then echo; echo "## torchrun, 2 GPUs"; sed -n '/^tracelint run:/,$p' "$OUT/ddp.txt"; fi
