"""Issue #37: model FLOPs per step from the ops' shapes, and MFU, against independent counts on the project's GPU
fixtures (fixtures/traces: GPT-2-small-style decoders and a ResNet-50, recorded on an H200; their scripts are in
fixtures/scenarios and the step time measured without the profiler in manifest.json)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tracelint.trace import analyze_trace
from tracelint.trace.flops import PEAKS, ShapedOp, device_peak, op_flops, peak, step_flops
from tracelint.trace.model import Step

ROOT = Path(__file__).resolve().parents[2]


def _metrics(path: Path) -> dict:
    (summary,) = analyze_trace(path).summaries
    return summary.metrics


def _constants(script: Path) -> dict[str, int]:
    """The scenario script's module constants (``BATCH = 12``): the model as its author wrote it."""
    return {k: int(v) for k, v in re.findall(r"^([A-Z]+) = (\d+)", script.read_text(), re.M)}


def _gpt_analytic(c: dict[str, int]) -> tuple[float, float]:
    """(6·N·tokens over the matmul weights, attention with the causal half) per step of the fixtures' decoder: per
    layer qkv (d x 3d), proj (d x d), fc1 (d x 4d), fc2 (4d x d), and the tied LM head (d x V); attention's two
    matmuls 4·B·H·T²·D forward, halved for the causal mask, times 3 for forward and backward."""
    tokens = c["BATCH"] * c["SEQ"]
    d = c["WIDTH"]
    weights = c["DEPTH"] * (3 * d * d + d * d + 4 * d * d + 4 * d * d) + d * c["VOCAB"]
    attention = 3 * c["DEPTH"] * 4 * c["BATCH"] * c["SEQ"] ** 2 * d / 2
    return 6.0 * weights * tokens, attention


@pytest.mark.parametrize("name", ["gpt_eager_bf16", "gpt_eager_bf16_tlprofile", "gpt_compiled",
                                  "gpt_compiled_tlprofile", "gpt_fp32_tlprofile"])
def test_gpt_model_flops_are_the_analytic_count(fixture_traces, name):
    """The trace's model FLOPs per step within 3 % of 6·N per token plus attention (they are equal: the decoder has
    no other matmul), eager, compiled (inductor keeps the GEMMs as aten ops) and fp32 alike."""
    script = ROOT / "fixtures" / "scenarios" / (name.removesuffix("_tlprofile") + ".py")
    dense, attention = _gpt_analytic(_constants(script))
    m = _metrics(fixture_traces / f"{name}.pt.trace.json.gz")
    assert m["model_flop_per_step"] == pytest.approx(dense + attention, rel=0.03)
    assert m["flop_unattributed_pct"] < 5


@pytest.mark.parametrize("name", ["gpt_eager_bf16", "gpt_compiled"])
def test_mfu_is_analytic_flops_over_the_step_measured_without_the_profiler(fixture_traces, name):
    """MFU from the trace recorded through tracelint.profile (its unprofiled step) within ±8 % (relative) of the
    analytic FLOPs over the fixture's ground truth (4 blocks of steps, no profiler, manifest.json), at the H200's
    dense bf16 peak; the plain trace, without that record, divides by the GPU's busy time per profiled step (the
    profiler slows the host, not the kernels), says so, and is within +8 % too (an upper bound: +3.7, +4.6 %)."""
    manifest = json.loads((fixture_traces / "manifest.json").read_text())["traces"]
    truth_ms = manifest[name]["ground_truth"]["median_ms"]
    dense, attention = _gpt_analytic(_constants(ROOT / "fixtures" / "scenarios" / f"{name}.py"))
    analytic = 100.0 * (dense + attention) / (truth_ms / 1000.0) / (989.4e12)
    m = _metrics(fixture_traces / f"{name}_tlprofile.pt.trace.json.gz")
    assert m["mfu_pct"] == pytest.approx(analytic, rel=0.08)
    assert m["mfu_basis"].startswith("unprofiled step") and "bf16 dense peak 989.4" in m["mfu_basis"]
    assert "causal attention counted as half" in m["mfu_basis"]
    plain = _metrics(fixture_traces / f"{name}.pt.trace.json.gz")
    assert plain["mfu_basis"].startswith("GPU busy") and "no unprofiled record" in plain["mfu_basis"]
    assert plain["mfu_step_ms"] == pytest.approx(plain["gpu_busy_us"] / plain["steps"] / 1000.0, abs=0.001)
    assert analytic <= plain["mfu_pct"] <= analytic * 1.08


def _resnet50_conv_macs(image: int = 224) -> list[tuple[int, bool]]:
    """(multiply-adds per image, is the stem) of every convolution of torchvision's ResNet-50, from its architecture:
    a 7x7/2 stem to 64 channels, a 3x3/2 max pool, then bottlenecks (1x1, 3x3 with the stage's stride, 1x1 to 4x the
    width; a 1x1 projection on each stage's first block) of widths 64, 128, 256, 512, repeated 3, 4, 6, 3 times."""
    convs = []
    size = image // 2
    convs.append((size * size * 64 * 3 * 7 * 7, True))
    size //= 2
    channels = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            s = stride if block == 0 else 1
            out = size // s
            convs.append((size * size * channels * width, False))             # 1x1 at the input size
            convs.append((out * out * width * width * 9, False))              # 3x3, strided
            convs.append((out * out * width * 4 * width, False))              # 1x1 expand
            if block == 0:
                convs.append((out * out * channels * 4 * width, False))       # projection
            channels, size = 4 * width, out
    return convs


def test_resnet50_convolution_flops_are_the_architectures(fixture_traces):
    """ResNet-50 at batch 128, bf16 (conv_nchw_bf16): the convolution FLOPs per step within 5 % of the count from
    the architecture: 2·MACs forward, and backward twice that but for the stem, whose input (the images) needs no
    gradient; the classifier's GEMMs are the GEMM count (2·128·2048·1000 forward, twice that backward)."""
    batch = _constants(ROOT / "fixtures" / "scenarios" / "conv_nchw_bf16.py")["BATCH"]
    convs = _resnet50_conv_macs()
    forward = 2.0 * batch * sum(macs for macs, _ in convs)
    backward = 2.0 * forward - 2.0 * batch * sum(macs for macs, stem in convs if stem)
    model = analyze_trace(fixture_traces / "conv_nchw_bf16.pt.trace.json.gz").analyses[0].model
    found = step_flops(model.shaped_ops, [(s.start, s.end) for s in model.steps])
    assert found.by_kind["convolution"] == pytest.approx(forward + backward, rel=0.05)
    assert found.by_kind["gemm"] == pytest.approx(3 * 2.0 * batch * 2048 * 1000, rel=0.05)


def test_op_counts_and_their_near_misses():
    """One op each, as the trace writes it: causal attention is half, a transposed convolution and odd shapes give
    no count, a backward convolution counts the gradients its mask asks for."""
    def op(name, dims, types=("c10::BFloat16",) * 3, concrete=()):
        return ShapedOp(name, 1, 0.0, 1.0, tuple(tuple(d) for d in dims), tuple(types), tuple(concrete))

    assert op_flops(op("aten::mm", [[64, 32], [32, 16]])) == ("gemm", 2.0 * 64 * 32 * 16, False)
    assert op_flops(op("aten::addmm", [[16], [64, 32], [32, 16], [], []])) == ("gemm", 2.0 * 64 * 32 * 16, False)
    assert op_flops(op("aten::bmm", [[4, 64, 32], [4, 32, 16]]))[1] == 2.0 * 4 * 64 * 32 * 16
    assert op_flops(op("aten::linear", [[2, 8, 32], [16, 32], [16]]))[1] == 2.0 * 16 * 32 * 16
    assert op_flops(op("aten::mm", [[64, 32]])) is None  # shapes the trace did not write
    qkv = [[2, 4, 128, 64]] * 3
    full = 4.0 * 2 * 4 * 128 * 128 * 64
    flash = "aten::_scaled_dot_product_flash_attention"
    assert op_flops(op(flash, qkv, concrete=["", "", "", "0.", "True", "False", ""])) == ("attention", full / 2, True)
    assert op_flops(op(flash, qkv, concrete=["", "", "", "0.", "False", "False", ""])) == ("attention", full, False)
    backward = op(flash + "_backward", [[2, 4, 128, 64]] * 5, concrete=[""] * 10 + ["0.", "False"])
    assert op_flops(backward) == ("attention", 2 * full, False)
    conv = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    expected = 2.0 * 8 * 16 * 32 * 32 * 3 * 3 * 3
    assert op_flops(op("aten::convolution", [[8, 3, 32, 32], [16, 3, 3, 3]], concrete=conv))[1] == expected
    transposed = conv[:6] + ["True"] + conv[7:]
    assert op_flops(op("aten::convolution", [[8, 3, 32, 32], [16, 3, 3, 3]], concrete=transposed)) is None
    grads = ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", "[False, True, False]"]
    dims = [[8, 16, 32, 32], [8, 3, 32, 32], [16, 3, 3, 3]]
    assert op_flops(op("aten::convolution_backward", dims, concrete=grads))[1] == expected  # the weight's only


def test_peaks_are_dense_and_unknown_devices_have_none():
    assert peak("NVIDIA H200", "bf16") == (989.4, peak("NVIDIA H200", "bf16")[1])
    assert peak("NVIDIA H100 PCIe", "bf16")[0] == 756.0  # not the SXM part's figure
    assert peak("NVIDIA A100-SXM4-80GB", "tf32")[0] == 156.0
    assert peak("NVIDIA A10G", "bf16")[0] == 70.0  # AWS's part, not the A10's 125
    assert peak("NVIDIA T4", "bf16") is None and peak(None, "bf16") is None
    assert peak("NVIDIA A100-SXM4-80GB", "fp8") is None  # no FP8 on Ampere


def test_bandwidth_by_the_part_the_name_says():
    """The memory bandwidth column: the A100's depends on its memory, which the name tells or not (then none)."""
    assert device_peak("NVIDIA H200").bandwidth_gbs == 4800.0
    assert device_peak("NVIDIA H100 PCIe").bandwidth_gbs == 2000.0
    assert device_peak("NVIDIA H100 80GB HBM3").bandwidth_gbs == 3350.0
    assert device_peak("NVIDIA A100-SXM4-80GB").bandwidth_gbs == 2039.0
    assert device_peak("NVIDIA A100-SXM4-40GB").bandwidth_gbs == 1555.0
    assert device_peak("NVIDIA A100-PCIE-40GB").bandwidth_gbs == 1555.0
    assert device_peak("NVIDIA A100 80GB PCIe").bandwidth_gbs is None  # not the SXM part's 2,039
    assert device_peak("AMD Instinct MI300X").bandwidth_gbs == 5300.0
    assert device_peak("NVIDIA L4").bandwidth_gbs == 300.0 and device_peak("NVIDIA B200").bandwidth_gbs == 8000.0
    assert all(row.source for row in PEAKS)


def test_a_step_window_counts_only_its_ops():
    ops = [ShapedOp("aten::mm", 1, t, t + 1.0, ((4, 4), (4, 4)), ("float", "float")) for t in (0.0, 10.0, 20.0)]
    steps = [Step(1, 1, 5.0, 15.0)]
    found = step_flops(ops, [(s.start, s.end) for s in steps])
    assert found.per_step == 2.0 * 4 * 4 * 4 and found.ops == 1
    assert step_flops(ops, []).per_step == 3 * 2.0 * 4 * 4 * 4  # no steps: the whole trace is one


def _tl505(path: Path) -> list:
    return [f for f in analyze_trace(path).findings if f.code == "TL505"]


def test_tl505_fires_on_the_eager_step_and_not_on_its_compiled_twin(fixture_traces):
    """The GPT-2-small pair (fixtures/scenarios/gpt_eager_bf16.py vs gpt_compiled.py, measured 34.08 -> 29.48 ms per
    step): compile is advised on the eager step with an estimate near what compiling bought, never on the compiled
    one; nor on the eager trace without the unprofiled record, whose profiled host reads cpu-bound."""
    (found,) = _tl505(fixture_traces / "gpt_eager_bf16_tlprofile.pt.trace.json.gz")
    details = dict(found.details)
    manifest = json.loads((fixture_traces / "manifest.json").read_text())["traces"]
    gained = 1000.0 * (manifest["gpt_eager_bf16"]["ground_truth"]["median_ms"] -
                       manifest["gpt_compiled"]["ground_truth"]["median_ms"])
    assert details["estimated_saving_us_per_step"] == pytest.approx(gained, rel=0.1)
    assert "torch.compile" in found.message
    assert _tl505(fixture_traces / "gpt_compiled_tlprofile.pt.trace.json.gz") == []
    assert _tl505(fixture_traces / "gpt_eager_bf16.pt.trace.json.gz") == []


def test_tl505_calibration_is_the_fixture_pairs(fixture_traces):
    """FUSION_SAVING is the share of the fusable kernel time the compiled GPT trace no longer spends; the conv-net
    share is the measured ResNet-50 fp32 gain (bench/fusion_ab.py) over the fusable time of the fixture with that
    model and batch."""
    from tracelint.trace.rules.launch import CONV_FUSION_SAVING, FUSION_SAVING, _fusable

    def fusable_per_step(name: str) -> float:
        analysis = analyze_trace(fixture_traces / f"{name}.pt.trace.json.gz").analyses[0]
        by_name, _ = _fusable(analysis)
        return sum(g.end - g.start for items in by_name.values() for g in items) / len(analysis.model.steps)

    eager, compiled = fusable_per_step("gpt_eager_bf16_tlprofile"), fusable_per_step("gpt_compiled_tlprofile")
    assert FUSION_SAVING == pytest.approx(1 - compiled / eager, abs=0.01)
    assert CONV_FUSION_SAVING == pytest.approx((116.513 - 66.994) * 1000 / fusable_per_step("pageable_copies_fixed"),
                                               abs=0.01)


def test_tl505_threshold_is_the_doc_s(fixture_traces):
    """At the doc's 30 % it fires on the eager step (47 % fusable); asked for 50 %, it does not."""
    from tracelint.engine import Config

    path = fixture_traces / "gpt_eager_bf16_tlprofile.pt.trace.json.gz"
    strict = Config(trace_thresholds=(("fusion-min-memory-bound-pct", 50.0),))
    assert _tl505(path) and not [f for f in analyze_trace(path, config=strict).findings if f.code == "TL505"]


# Where the named families took the public traces' largest "other" kernels: DeepSeek's expert-parallel notify kernel
# (DeepEP over NVSHMEM: communication) and TensorRT-LLM's MoE routing (its own family).
_NAMED_AT_LAST = {"deepseek-profile_data-train.json.gz": ("communication", "dpsk::ep::internode::cached_notify"),
                  "tracelens-b200-eager_trace.json.gz": ("moe-routing", "moe::dev::routing")}


def test_every_kernel_of_the_public_traces_has_a_family(public_traces):
    """Issue #37 item 1: the kernel families (tracelint.trace.kernels.kernel_group) cover every GPU event of the public
    traces, and "other" holds less than 5 % of the GPU time of each (it held 10.5 % of DeepSeek's and 6.0 % of the
    B200 MoE trace's before DeepEP's notify kernel and MoE routing were named)."""
    from tracelint.trace.kernels import KERNEL_GROUPS, kernel_group

    for path in sorted(public_traces.glob("*.json.gz")):
        for analysis in analyze_trace(path).analyses:
            time: dict[str, float] = {}
            other: dict[str, float] = {}
            for g in analysis.gpu_events:
                family = kernel_group(g.kind, g.name, analysis)
                assert family in KERNEL_GROUPS, (path.name, g.name, family)
                time[family] = time.get(family, 0.0) + (g.end - g.start)
                if family == "other":
                    other[g.name] = other.get(g.name, 0.0) + (g.end - g.start)
                named = _NAMED_AT_LAST.get(path.name)
                if named is not None and named[1] in g.name:
                    assert family == named[0], (path.name, g.name, family)
            total = sum(time.values())
            if not total:
                continue
            share = 100.0 * time.get("other", 0.0) / total
            assert share < 5, (path.name, share, sorted(other, key=other.__getitem__)[-3:])


def test_kernel_families_by_name():
    """The families the older groups lacked: convolutions apart from GEMMs, the optimizer's kernels, compiled
    (Triton) kernels, memsets apart from copies."""
    from tracelint.trace.kernels import classify_kernel, kernel_group
    from tracelint.trace.model import KERNEL, MEMCPY, MEMSET

    class _Analysis:
        @staticmethod
        def kernel_class(name):
            return classify_kernel(name, 9)

    def family(name, kind=KERNEL):
        return kernel_group(kind, name, _Analysis)

    assert family("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64") == \
        "convolution"
    assert family("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute") == \
        "gemm-tensor-core"
    assert family("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
                  "namespace)::TensorListMetadata<4>, FusedAdamMathFunctor<float, 4>>") == "optimizer"
    assert family("triton_poi_fused_add_gelu_0") == "compiled"
    assert family("Memset (Device)", MEMSET) == "memset" and family("Memcpy HtoD (Pinned -> Device)", MEMCPY) == "copy"
    assert family("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>") == \
        "elementwise"
