#!/usr/bin/env bash
# tracelint verify on a real GPU: the fixture scenarios through the command, then the GPU tests on its reports.
# Usage, from the repository root on the GPU machine (no internet; torch, click, tabulate installed there):
#     bash tests/verify/gpu_run.sh          # writes $OUT/verify.md, $OUT/verify/*.json and *.log
# Budget: about 5-7 minutes on an H200/H100 (each variant alternates with the baseline for at most 15 s).
# Issue #13's checks (DataLoader transforms, losses.append, catalog pairs x3, hand-timed A/B): gpu_issue13.sh.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
set -uo pipefail
OUT="${OUT:-/tmp/tracelint-verify-out}"
mkdir -p "$OUT/verify"
export TRACELINT_VERIFY_RESULTS="$OUT/verify"
export TRACELINT_STEPS=100000  # the scenarios' own step count; the harness stops each run after warm-up + blocks
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv,noheader || true

_verify() {  # verify SCRIPT [options]: one script through the command, JSON report + progress log
    local script=$1; shift
    local name; name=$(basename "$script" .py)
    local started=$SECONDS
    python3 -m tracelint.verify.cli "$script" --timeout 180 --budget 15 --progress "$@" \
        --format json -o "$OUT/verify/$name.json" 2> "$OUT/verify/$name.log"
    echo "$name: exit $? in $((SECONDS - started)) s"; tail -n 3 "$OUT/verify/$name.log"
}
S=fixtures/scenarios
only=" ${ONLY:-} "
verify() { [[ "$only" == "  " || "$only" == *" $(basename "$1" .py) "* ]] && _verify "$@"; return 0; }
verify $S/item_per_step.py --precision none
verify $S/item_no_effect.py --precision none
verify $S/matmul_fp32.py --precision tf32,bf16
verify $S/pageable_copies.py --precision none
verify $S/zero_grad_keep.py --precision none
verify $S/dataloader_main_process.py --precision none --steps 5 --blocks 3
# The catalog pairs (rules whose docs carry a ```python verify pair).
python3 -m tracelint.verify.cli --all-rules --timeout 120 --budget 15 --format json -o "$OUT/verify/catalog.json" \
    2> "$OUT/verify/catalog.log"; echo "catalog: exit $?"; tail -n 3 "$OUT/verify/catalog.log"

python3 tests/verify/gpu_summary.py "$OUT/verify" > "$OUT/verify.md"
{
    echo; echo "## GPU tests (tests/verify/test_gpu.py on the reports above)"; echo; echo '```'
    if python3 -c "import pytest" 2>/dev/null; then
        python3 -m pytest -q -p no:cacheprovider tests/verify/test_gpu.py -m gpu -rA 2>&1 | tail -n 20
    else
        python3 tests/verify/test_gpu.py 2>&1
    fi
    echo '```'
} >> "$OUT/verify.md"
cat "$OUT/verify.md"
