#!/usr/bin/env bash
# Issue #13 on a GPU in one command (about 7-8 minutes on an H100/H200; it keeps to --deadline, 510 s by default):
#   pip install --target /tmp/site .whl/*.whl; export PYTHONPATH=$PWD:/tmp/site   # if not done yet, done here
#   bash tests/verify/gpu_issue13.sh                # writes $OUT/issue13/{summary.md,summary.json,*.json,*.log}
#   bash tests/verify/gpu_issue13.sh --cpu          # the same plumbing on a CPU (shrunk fixtures, no claims)
#   bash tests/verify/gpu_issue13.sh --dry-run      # checks files, imports and the commands' options; runs nothing
# Other options go to tests/verify/gpu_issue13.py (--only a,b,c,d, --deadline SECONDS, --summary DIR).
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT="${OUT:-/tmp/tracelint-verify-out}"
mkdir -p "$OUT/issue13"
PY="${PYTHON:-python3}"

if ! "$PY" -c "import libcst, click, tabulate, orjson" 2>/dev/null; then
    if compgen -G ".whl/*.whl" > /dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
        export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
missing=$("$PY" - <<'PYEOF'
import importlib.util
print(" ".join(m for m in ("libcst", "click", "tabulate", "orjson", "torch") if importlib.util.find_spec(m) is None))
PYEOF
)
if [[ -n "$missing" ]]; then
    echo "gpu_issue13: missing Python packages: $missing (carry their wheels in .whl/)" >&2
    exit 2
fi

if [[ "${1:-}" == "--dry-run" ]]; then
    set -e
    for f in fixtures/verify/{loader_torchvision,losses_append,pinned,pinned_fixed,matmul,matmul_tf32,matmul_bf16,ab_time}.py \
             fixtures/verify/pairs/TL101_{bad,good}.py tests/verify/gpu_issue13.py; do
        "$PY" -m py_compile "$f"
    done
    "$PY" -m tracelint verify --help | grep -q -- "--budget"
    "$PY" fixtures/verify/ab_time.py --help > /dev/null
    "$PY" tests/verify/gpu_issue13.py --help > /dev/null
    "$PY" -c "import torchvision" 2>/dev/null || echo "gpu_issue13: note: no torchvision here ((a) needs it on the GPU)"
    echo "gpu_issue13: dry run ok"
    exit 0
fi

nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.used,memory.total,utilization.gpu --format=csv,noheader \
    > "$OUT/issue13/nvidia-smi.txt" 2>&1 || true
"$PY" tests/verify/gpu_issue13.py --out "$OUT" "$@"
