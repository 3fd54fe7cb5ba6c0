"""What a GPU kernel computes, read from its name: the operation, its precision, and whether it runs on Tensor Cores.

Vendors encode the math unit and data types in their kernel names; this module reads those fields instead of
matching an allowlist of substrings. The TensorBoard plugin's old allowlist (``xmma_gemm``, ``hmma``, ``1688``, …)
counts ``sm80_xmma_gemm_f32f32_f32f32_f32_*_ffma_*`` (plain fp32 FMA) as Tensor Core work and misses Hopper's
``nvjet_*``. The name families read here, with real examples (tests/trace/test_kernels.py holds the table, each name
with the trace it came from):

Matmul / convolution (op ``matmul`` / ``conv``):

- cuBLAS legacy ``<arch>_<types><acc><mma shape>gemm_*``: ``volta_sgemm_*`` (SIMT fp32), ``volta_h884gemm_*``,
  ``turing_fp16_s1688gemm_fp16_*``, ``ampere_bf16_s16816gemm_bf16_*`` (Tensor Cores: an MMA shape 884/1688/16816…).
- cuBLAS/cuDNN xmma ``sm<NN>_xmma_<op>_<A><B>_<C><D>_<acc>_…``: the first type is the input type (``tf32``,
  ``f16``, ``bf16``, ``e4m3``…: Tensor Cores; ``f32``: CUDA cores, and the name then says ``ffma``).
- cuBLASLt on Hopper+ ``nvjet_*``: always wgmma/tcgen05 (Tensor Cores); the type letters are not a reliable
  precision (``tst`` is seen on TF32 and bf16 GEMMs), so the precision stays unknown.
- CUTLASS 2 ``cutlass_<arch>_tensorop_*`` / ``wmma`` (Tensor Cores) vs ``cutlass_<arch>_simt_*`` (CUDA cores), and
  mangled CUTLASS templates (``MmaTensorOp``, ``tfloat32_t``, ``ImplicitGemmConvolution``).
- CUTLASS 3 / CuTe ``cutlass::device_kernel<…>``: the kernel is the template argument
  (``cutlass::gemm::kernel::GemmUniversal<…MainloopSm90TmaGmmaWarpSpecialized…cutlass::float_e4m3_t…>``, or a
  user's ``dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel``); gmma/wgmma/tcgen05/umma/``SM90_64x…`` MMA atoms, or
  an fp8/fp4 operand (no CUDA-core fp8 math exists), mean Tensor Cores; ``simt``/``UniversalFMA`` mean CUDA cores.
  Only a CUTLASS *entry point* counts: a ``cutlass::bfloat16_t`` template argument of another library's kernel
  (``moe::dev::finalize::finalizeKernelVecLoad<…cutlass::bfloat16_t…>``) does not make it a GEMM.
- DeepGEMM ``deep_gemm::fp8_gemm_kernel<…>``, ``deep_gemm::sm90_fp8_gemm_1d2d_impl<…>``,
  ``deep_gemm::sm90_bf16_gemm_*``: wgmma/tcgen05 GEMMs (Tensor Cores); the precision is the one the name states.
- TensorRT-LLM "trtllm-gen" Blackwell GEMMs ``bmm_<C>_<A><B>_<acc>_t<tile>…_m<mma shape>…_sm100f``
  (``bmm_MxE4m3_MxE2m1MxE4m3_Fp32_…``): tcgen05 (Tensor Cores); the precision is the narrowest input
  (``E2m1`` = fp4, ``E4m3``/``E5m2`` = fp8, ``Bfloat16``…).
- cuDNN legacy ``<arch>_scudnn_*`` (fp32 SIMT), ``*_h884cudnn_*`` (Tensor Cores), ``implicit_convolve_sgemm``,
  ``wgrad_alg0_engine<float…>``, winograd and FFT stages (fp32 SIMT convolution).
- ROCm Tensile (rocBLAS / hipBLASLt) ``Cijk_<A>_<B>_<type>_…_MT…_MI<m>x<n>x<k>_…``: an ``MI`` field means MFMA (Matrix
  Cores); the type code is ``S``/``D``/``H``/``B``(bf16)/``X``(xf32)/``I8``/``F8``/``B8``(bf8)/``F8B8``…
  (``Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_…`` = bf16 on Matrix Cores). hipBLASLt's ``…_PostGSU…``
  split-K reduction stays other, like cuBLAS's ``splitKreduce_kernel``.
- MIOpen convolutions: ``igemm_{fwd,bwd,wrw}_gtcx*_<layout>_<type>_…`` (``gtcx``/``wmma`` = XDLOPS/WMMA Matrix Cores,
  ``igemm_fwd_gtcx3_nhwc_bf16_…``; plain ``gtc_`` = dot-product ALU, ``igemm_v4r1_dynamic_*``: vector ALU, with no
  fp32 claim since the name does not say fma),
  ``naive_conv_{ab_}{packed,nonpacked}_<dir>_<layout>_<in>_<acc>_<out>`` (no Matrix Cores; ``ushort`` = bf16),
  ``miopenSp3AsmConv_*_fp32_*`` winograd, ``gridwise_convolution_*_xdlops_*``.
- Composable Kernel (CK) ``ck::tensor_operation::device::kernel_gemm_xdl_cshuffle_v3<…>``,
  ``kernel_grouped_conv_fwd_xdl_cshuffle_v3``, ``kernel_batched_gemm_xdlops_bwd_weight`` (usually mangled,
  ``_ZN2ck16tensor_operation6device…``): ``xdl``/``wmma`` = Matrix Cores, ``dl`` = dot-product ALU; the precision is
  read from the mangled data-type arguments (``t`` = ``ushort`` = CK's bf16, ``DF16_`` = fp16, ``f`` = fp32…).
- Triton: ``triton_tem_fused_*mm*`` and user ``*matmul*``/``*_mm_*`` kernels are matmul templates. Their ``tl.dot``
  runs on Tensor Cores for every input type except fp32 with TF32 disabled, which the name cannot tell: we count them
  as Tensor Core work with an unknown precision, so TL401 never fires on a compiled model on a guess.

Attention (op ``attention``; ``KernelClass.attention_impl`` names the implementation, from ``family``):

- FlashAttention (family ``flash-attention``, impl ``"flash"``): FA2 ``flash_fwd_kernel``/``flash_bwd_*`` (also
  PyTorch's ``pytorch_flash::flash_fwd_kernel<…>``), FA3 ``flash::compute_attn_ws<…>``,
  ``cutlass::device_kernel<flash::FlashAttnBwd<…>>``, ``flash::FlashAttnFwdSm90``.
- Memory-efficient attention (family ``mem-efficient-attention``, impl ``"mem_efficient"``): PyTorch's/xformers'
  ``fmha_cutlassF_*``/``fmha_cutlassB_*`` (``PyTorchMemEffAttention::AttentionKernel<…>``).
- cuDNN SDPA (family ``cudnn-sdpa``, impl ``"cudnn"``):
  ``cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_*`` (its ``f16`` means "16-bit": the H200 bf16
  fixture runs it, so the precision stays unknown) and its helpers
  ``cudnn::fusion::compute_dot_do_o_specialized``/``convert_dq_to_16bits``.
- Others (impl None): TensorRT-LLM ``fmhaSm100aKernel_QkvE4m3…`` (``trtllm-fmha``), FlashInfer, CK/aotriton, Triton
  flex-attention templates, DeepGEMM's MQA logits, and any ``*attention*``/``*attn*`` kernel.
- Pre/post-processing kernels of an attention backward (``FlashAttnBwdPreprocess``, ``…PostprocessConvertdQ``,
  ``flash_bwd_dot_do_o_kernel``, cuDNN's ``compute_dot_do_o``) are attention off the Tensor Cores.
- PyTorch's unfused "math" attention is not an attention kernel: its ``bmm`` kernels are matmul and its softmax
  kernels softmax; the trace analysis recognises the pattern.

Memory-bound work (``KernelClass.memory_bound``): ``normalization`` (``vectorized_layer_norm_kernel``,
``GammaBetaBackwardCUDAKernel``, ``cudnn::bn_fw_tr_1C11_kernel_NCHW``, ``MIOpenBatchNormFwdTrainSpatial``, apex
``cuApplyLayerNorm``, vLLM ``rms_norm_kernel``, ``layer_norm::ln_fwd_kernel``, Triton kernels fusing a norm),
``softmax`` (``cunn_SoftMaxForward`` (log-softmax too), ``softmax_warp_forward``, Megatron's masked softmax),
``reduction`` (``at::native::reduce_kernel``, cub reduce/scan, ``triton_red_``/``triton_per_`` fusions, pooling,
nll-loss, embedding-bag backward) and ``elementwise`` (``vectorized_elementwise_kernel``,
``unrolled_elementwise_kernel``, ``elementwise_kernel``, ``multi_tensor_apply_kernel`` (fused optimizers),
``triton_poi_``/``triton_for_`` fusions, activations, rotary, casts and quantization, dropout, fill). **Copies and
index kernels are elementwise** with family ``copy`` (``direct_copy_kernel_cuda``, casts such as
``bfloat16_copy_kernel_cuda``, ``CatArrayBatchedCopy``, transposes and layout changes, gather/scatter/index,
embedding lookups, KV-cache writes): memory-bound, one element in and one out. GEMM plumbing (split-K reductions,
cuBLASLt epilogues, cuDNN offset kernels) and what the name does not tell (sorts, top-k, MoE routing) stay
``elementwise/other``.

Memory layout (``memory_layout``, read apart from the class: TL405). cuDNN's and MIOpen's fp16/bf16 Tensor Core
convolutions work in NHWC (channels last): the xmma names state the layouts of input, filter and output
(``sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_*``), MIOpen's say ``igemm_fwd_gtcx3_nhwc_bf16_*``.
A model in PyTorch's default NCHW format therefore has its activations and gradients converted around each
convolution: cuDNN's ``cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, …>`` and ``nhwcToNchwKernel``
(``nchwToNhwcKernel<float, …>`` in older cuDNN), MIOpen's ``batched_transpose_32x32_half``. Kernels that have a
channels-last twin read as ``nchw`` in their NCHW version: PyTorch's batch norm (``batch_norm_backward_kernel`` vs
``batch_norm_backward_elemt_channels_last_kernel``), pooling (``max_pool_forward_nchw`` vs ``…_nhwc``), cuDNN's
``bn_fw_tr_1C11_kernel_NCHW`` and ``reduce_wgrad_nchw_helper``, an xmma convolution that writes NCHW
(``…_nhwckrsc_nchw_…``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tracelint.trace.model import KERNEL, MEMSET, P2P, copy_direction

MATMUL, CONV, ATTENTION, COMMUNICATION, OTHER = "matmul", "conv", "attention", "communication", "elementwise/other"
# Memory-bound categories (carved out of OTHER): KernelClass.memory_bound is True for these.
ELEMENTWISE, REDUCTION, NORMALIZATION, SOFTMAX = "elementwise", "reduction", "normalization", "softmax"
MEMORY_BOUND_OPS = frozenset((ELEMENTWISE, REDUCTION, NORMALIZATION, SOFTMAX))

# Attention implementations, by family (KernelClass.attention_impl).
FLASH, MEM_EFFICIENT, CUDNN = "flash", "mem_efficient", "cudnn"
_ATTENTION_IMPL = {"flash-attention": FLASH, "mem-efficient-attention": MEM_EFFICIENT, "cudnn-sdpa": CUDNN}
# Families of AMD kernels: the device's computeMajor is a gfx number there, not a CUDA compute capability.
_AMD_FAMILIES = frozenset(("tensile", "miopen", "composable-kernel", "rocblas"))


@dataclass(frozen=True, slots=True)
class KernelClass:
    # matmul | conv | attention | communication | normalization | softmax | reduction | elementwise |
    # elementwise/other (what the name does not tell)
    op: str
    tensor_core: bool  # runs on Tensor Cores (NVIDIA) / Matrix Cores (AMD MFMA/WMMA)
    # input precision: fp64, fp32, tf32, bf16, fp16, fp8, fp4, int8; None when the name hides it (always None for
    # memory-bound kernels: their precision is not what the linter reads)
    precision: str | None
    # which naming scheme/library decided it (for messages and tests). Matmul/conv: "blas", "mma", "xmma", "nvjet",
    # "cutlass", "deep-gemm", "trtllm-gen", "tensile", "miopen", "composable-kernel", "rocblas", "triton-template",
    # "generic". Attention: "flash-attention", "mem-efficient-attention", "cudnn-sdpa" (see attention_impl),
    # "trtllm-fmha", "flashinfer", "deep-gemm", "triton-template", "attention". Memory-bound: "copy" (data movement)
    # or the library ("aten", "triton", "cudnn", "miopen", "apex", "vllm", "cub", …, "generic"). Communication:
    # "nccl", "communication". Elementwise/other: "other", or the GEMM library whose plumbing it is.
    family: str = ""

    @property
    def fp32_off_tensor_cores(self) -> bool:
        """Matmul/conv math that runs in plain fp32 on the CUDA cores: what TF32 or bf16 would move to Tensor Cores."""
        return self.op in (MATMUL, CONV) and not self.tensor_core and self.precision == "fp32"

    @property
    def memory_bound(self) -> bool:
        """Elementwise, reduction, normalization and softmax kernels (incl. Triton's pointwise/reduction fusions)."""
        return self.op in MEMORY_BOUND_OPS

    @property
    def attention_impl(self) -> str | None:
        """For an attention kernel: ``"flash"`` (FlashAttention 2/3), ``"mem_efficient"`` (PyTorch/xformers CUTLASS
        fmha) or ``"cudnn"`` (cuDNN SDPA); None for other attention kernels and for every other op."""
        return _ATTENTION_IMPL.get(self.family) if self.op == ATTENTION else None


_OTHER = KernelClass(OTHER, False, None, "other")

# Explicit type tokens anywhere in a name (cuBLAS prefixes like ``ampere_bf16_``, CUTLASS ``_bf16_``, template
# arguments like ``c10::BFloat16`` or ``cutlass::half_t``, mangled ``tfloat32_t``), narrowest first.
_TYPE_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fp4", re.compile(r"e2m1|nvfp4|mxfp4|(?<![a-z])fp4(?![0-9])", re.I)),
    ("fp8", re.compile(r"e4m3|e5m2|fp8|float8|__nv_fp8", re.I)),
    ("tf32", re.compile(r"tf32|tfloat32", re.I)),
    ("bf16", re.compile(r"bf16|bfloat16", re.I)),
    ("fp16", re.compile(r"fp16|(?<![a-z])f16|half|__half", re.I)),
    ("int8", re.compile(r"(?<![a-z])(?:int8|i8|s8|u8)(?![0-9])", re.I)),
    ("fp64", re.compile(r"(?<![a-z])(?:double|fp64|f64)(?![0-9])", re.I)),
    ("fp32", re.compile(r"(?<![a-z_])float(?![0-9_])|(?<![a-z])(?:fp32|f32)(?![0-9])", re.I)),
)

# An MMA instruction shape after the accumulator letter: Volta 884, Turing 1688/8816, Ampere+ 16816/16832/1688
# (tf32), 16864 (int4). Its presence is what makes a legacy cuBLAS/cuDNN/CUTLASS name a Tensor Core kernel.
_MMA = re.compile(r"(?P<acc>[hsdic])(?P<shape>884|1688|8816|16816|16832|16864|16x8x8|16x8x16)"
                  r"(?P<what>gemm|cudnn|dgrad|wgrad|fprop|conv|bmm)", re.I)
_LEGACY_BLAS = re.compile(r"(?:^|[_:<\s])(?P<prec>[sdhcz]|gc|cg)(?P<what>gemm|gemv|gemmk1|cudnn)(?:[_<(]|$)", re.I)
# The type fields of an xmma name (``f32f32_tf32f32_f32``, ``bf16bf16_bf16f32_f32``): storage, MMA and accumulator
# types. The narrowest type among them is the one the MMA instruction consumes.
_XMMA_TYPES = re.compile(r"_((?:tf32|bf16|f16|f32|f64|e4m3|e5m2|i8|s8|i32)+)(?=_)", re.I)
_XMMA_RANK = (("e4m3", "fp8"), ("e5m2", "fp8"), ("i8", "int8"), ("s8", "int8"), ("bf16", "bf16"), ("tf32", "tf32"),
              ("f16", "fp16"), ("f32", "fp32"), ("f64", "fp64"))
_XMMA_TOKEN = re.compile(r"tf32|bf16|f16|f32|f64|e4m3|e5m2|i8|s8|i32")
_TENSILE = re.compile(r"^Cijk_A\w+?_B\w+?_(?P<type>[A-Z0-9x]+?)_", re.I)
_TENSILE_MFMA = re.compile(r"_MI\d+x\d+x\d+(?:x\d+)?_")
_ARCH_PREFIX = re.compile(r"(?:^|[<_\s])(?:cudnn_(?:infer_|train_)?)?"
                          r"(maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell|sm(\d{2,3}))_", re.I)
_CUTLASS_ARCH = re.compile(r"cutlass(?:3x)?_(?:sm)?(\d{2,3})_", re.I)

_ARCH_NAMES = {"maxwell": 5, "pascal": 6, "volta": 7, "turing": 7, "ampere": 8, "ada": 8, "hopper": 9, "blackwell": 10}

# Communication kernels outside NCCL/RCCL: PyTorch's symmetric-memory collectives (``multimem_all_reduce_kernel``,
# ``one_shot_all_reduce_kernel``), DeepEP's expert-parallel dispatch/combine (``dpsk::ep::internode::combine<...>``,
# ``deep_ep::intranode::dispatch``, and ``internode::cached_notify``, which exchanges the token counts with the other
# ranks before a dispatch; its ``get_dispatch_layout`` is local compute) and custom all-reduce kernels (vLLM's
# ``cross_device_reduce_1stage``).
_COMM_KERNEL = re.compile(
    r"(?:multimem|one_shot|two_shot)_all_(?:reduce|gather)|symmetric_memory|cross_device_reduce"
    r"|(?:deep_ep|::ep)::(?:intranode|internode|internode_ll)::(?:(?:notify_)?(?:dispatch|combine)|cached_notify)")
# The collective an NCCL/RCCL kernel runs, from its name: ncclKernel_AllReduce_RING_LL_Sum_float(...) (NCCL < 2.19),
# ncclDevKernel_AllGather_RING_LL(...) (2.19+); ``Generic`` (RCCL, newer NCCL) names none.
_NCCL_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_COLLECTIVE_WORDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                     "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "send_recv", "alltoall": "all_to_all",
                     "alltoallbase": "all_to_all", "gather": "gather", "scatter": "scatter", "barrier": "barrier"}


def collective_name(text: str) -> str | None:
    """A collective's name in one spelling (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``,
    ``send_recv``, ``all_to_all``…) from an NCCL kernel name or a ``Collective name`` arg (``allreduce``,
    ``_allgather_base``, ``reduce_scatter_tensor_coalesced``); None when it names none (``ncclDevKernel_Generic``)."""
    match = _NCCL_COLLECTIVE.search(text)
    word = match.group(1) if match else text
    key = word.lower().replace("_", "")
    for suffix in ("tensorcoalesced", "coalesced", "base", "tensor"):
        if key.endswith(suffix) and key[: -len(suffix)] in _COLLECTIVE_WORDS:
            key = key[: -len(suffix)]
            break
    if key in _COLLECTIVE_WORDS:
        return _COLLECTIVE_WORDS[key]
    low = text.lower()
    for token, name in (("all_reduce", "all_reduce"), ("all_gather", "all_gather"), ("dispatch", "dispatch"),
                        ("combine", "combine")):
        if token in low:
            return name
    return None


def _explicit_precision(name: str) -> str | None:
    for precision, pattern in _TYPE_TOKENS:
        if pattern.search(name):
            return precision
    return None


def name_arch(name: str) -> int | None:
    """The compute capability major a name states (``ampere_``, ``sm90_``, ``cutlass_80_``), if any."""
    match = _ARCH_PREFIX.search(name)
    if match:
        return int(match.group(2)) // 10 if match.group(2) else _ARCH_NAMES[match.group(1).lower()]
    match = _CUTLASS_ARCH.search(name)
    return int(match.group(1)) // 10 if match else None


def _mma_precision(acc: str, shape: str, arch: int | None) -> str | None:
    """The input precision an MMA-shape name implies when it carries no explicit type token."""
    acc = acc.lower()
    if acc == "i" or shape in ("8816", "16832", "16864"):
        return "int8"
    if acc == "h" or shape == "884":
        return "fp16"  # Volta's 884 MMA takes fp16 inputs only (s884 = fp16 in, fp32 accumulate)
    if shape in ("1688", "16x8x8"):
        # fp16 inputs on Turing; on Ampere+ a s1688 kernel with fp32 operands is TF32.
        return "tf32" if arch is not None and arch >= 8 else "fp16"
    if acc == "d":
        return "fp64"
    return None  # s16816 is fp16 or bf16: only a type token tells


def _op_of(name: str) -> str:
    low = name.lower()
    if any(t in low for t in ("flash", "fmha", "attention", "attn", "sdpa", "mha_")):
        return ATTENTION
    if any(t in low for t in ("conv", "fprop", "dgrad", "wgrad", "cudnn", "winograd", "fft2d", "im2col")):
        return CONV
    return MATMUL


# --- reading a name: the kernel's own (qualified) function name, and a wrapper's kernel argument ---

def _skeleton(text: str) -> str:
    """``text`` without its template arguments and parameter lists (nested). A ``>`` inside parentheses is a
    comparison (``std::enable_if<((8)>(0))…>``), not a closing bracket."""
    out: list[str] = []
    stack: list[str] = []
    for ch in text:
        if ch == "(":
            stack.append("(")
        elif ch == ")":
            while stack and stack.pop() != "(":
                pass
        elif ch == "<":
            stack.append("<")
        elif ch == ">":
            if stack and stack[-1] == "<":
                stack.pop()
        elif not stack:
            out.append(ch)
    return "".join(out)


def _mangled_head(name: str) -> str:
    """The qualified function name of an Itanium-mangled name (``_ZN2ck16tensor_operation6device…I…``)."""
    pos = 3 if name.startswith("_ZN") else 2
    parts = []
    while pos < len(name) and name[pos].isdigit():
        end = pos
        while end < len(name) and name[end].isdigit():
            end += 1
        size = int(name[pos:end])
        parts.append(name[end:end + size])
        pos = end + size
    return "::".join(parts) or name


def _first_template_arg(text: str, start: int) -> str:
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
        elif ch == "," and depth == 1:
            return text[start + 1:i]
    return text[start + 1:]


_WRAPPERS = re.compile(r"(?:^|::)(?:Kernel2?|device_kernel|kentry)$")


def _entry(name: str) -> tuple[str, str]:
    """(head, kernel): the kernel's function name (``at::native::vectorized_elementwise_kernel``,
    ``cutlass::device_kernel``) and, for a wrapper template (``cutlass::Kernel<X>``, ``cutlass::device_kernel<X>``,
    ``ck_tile::kentry<X>``), the function name of the kernel it wraps (else the head again)."""
    if name.startswith("_Z"):
        head = _mangled_head(name)
        return head, head
    words = _skeleton(name).split()
    head = words[-1] if words else name
    kernel = head
    if _WRAPPERS.search(head):
        at = name.find(head + "<")
        if at >= 0:
            arg = _first_template_arg(name, at + len(head)).strip()
            inner_words = _skeleton(arg).split()
            if inner_words and not inner_words[-1].isdigit():
                kernel = inner_words[-1]
    return head, kernel


_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def _tokens(text: str) -> set[str]:
    """Lower-case words of an identifier: ``CatArrayBatchedCopy_contig`` -> {cat, array, batched, copy, contig}."""
    return {w.lower() for part in re.split(r"[^A-Za-z0-9]+", text) for w in _CAMEL.findall(part)}


# --- attention ---

_FLASH = re.compile(r"flash_fwd|flash_bwd|(?:^|[^a-z_])(?:pytorch_)?flash::|flashattn|flash_attn|compute_attn_ws")
_MEM_EFF = re.compile(r"fmha_cutlass|memeffattention|efficient_attention")
_CUDNN_SDPA = re.compile(r"cudnn\w*_sdpa|cudnn::fusion::(?:compute_dot_do_o|convert_dq)")
_ATTN_HELPER = re.compile(r"preprocess|postprocess|convert_?dq|convert_?dkv|dot_do_o|clear_dkv|splitkv_combine"
                          r"|combine_kernel|prepare_varlen")


def _attention(name: str, low: str, head: str, kernel: str, explicit: str | None,
               arch: int | None) -> KernelClass | None:
    fn = (head + " " + kernel).lower()
    if _CUDNN_SDPA.search(low):
        family = "cudnn-sdpa"
    elif _FLASH.search(low):
        family = "flash-attention"
    elif _MEM_EFF.search(low):
        family = "mem-efficient-attention"
    elif low.startswith("fmhasm") or "fmha_v2" in low or "tensorrt_llm" in fn and "fmha" in fn:
        family = "trtllm-fmha"
    elif fn.startswith("flashinfer::") and re.search(r"prefill|decode|attention|mla", fn):
        family = "flashinfer"
    elif "deep_gemm::" in fn and "mqa_logits" in fn:
        family = "deep-gemm"
    elif "fmha" in low or "sdpa" in fn or re.search(r"attention|(?:^|[^a-z])_?attn|mha_(?:fwd|bwd)", fn):
        family = "attention"
    else:
        return None
    precision = explicit
    if family == "cudnn-sdpa" and precision == "fp16" and "half" not in low:
        precision = None  # cuDNN's "f16" names a 16-bit type: its bf16 SDPA kernels say f16 too
    if _ATTN_HELPER.search(fn) or (family == "cudnn-sdpa" and "cudnn::fusion::" in low):
        # pre/post-processing of a backward pass: elementwise/reduction work, no MMA
        return KernelClass(ATTENTION, False, precision if precision != "fp32" else None, family)
    # fp16/bf16 attention kernels are MMA kernels; fp32 mem-efficient attention uses TF32-emulating MMA on sm80+
    # and SIMT before.
    tensor = precision in ("fp16", "bf16", "fp8", "fp4") or (arch is not None and arch >= 8) or precision is None
    return KernelClass(ATTENTION, tensor, precision, family)


# --- AMD: MIOpen, Composable Kernel, rocBLAS ---

_NAIVE_CONV = re.compile(r"naive_conv_(?:ab_)?(?:nonpacked_|packed_)?(?:fwd|bwd|wrw)_[a-z]+_(?P<in>[a-z0-9]+?)(?:_t)?_",
                         re.I)
_NAIVE_TYPES = {"float": "fp32", "half": "fp16", "ushort": "bf16", "bfloat16": "bf16", "int8": "int8",
                "double": "fp64"}
# CK's mangled data-type template arguments: t = ushort (ck::bhalf_t), DF16_ = _Float16 (ck::half_t), f = float,
# d = double, a = signed char (int8), DB8_/DU8_ = _BitInt(8) (f8/bf8).
_CK_TYPES = re.compile(r"(?<=[EI_])((?:DF16_|DB8_|DU8_|[tfdai]){3,})(?=[NLSEI])")
_CK_CODE = {"t": "bf16", "D": "fp16", "f": "fp32", "d": "fp64", "a": "int8"}


def _ck_precision(name: str) -> str | None:
    low = name.lower()
    if re.search(r"f8_|bf8|f8e|db8_|du8_", low):
        return "fp8"
    if "f4_t" in low:
        return "fp4"
    if not name.startswith("_Z"):
        return _explicit_precision(name)
    match = _CK_TYPES.search(name)
    if not match:
        return None
    code = match.group(1)
    return _CK_CODE.get(code[0]) if code[0] != "D" else ("fp16" if code.startswith("DF16_") else "fp8")


def _amd(name: str, low: str, head: str, explicit: str | None) -> KernelClass | None:
    fn = head.lower()
    # MIOpen assembly implicit-GEMM convolutions
    if re.match(r"igemm_(?:fwd|bwd|wrw)|igemm_v\d", low):
        tensor = bool(re.search(r"_gtcx|_gtc_?(?:wmma|xdlops)|xdlops|_wmma", low))
        # a plain "gtc" kernel is a dot-product (dlops) one, but its name says no "fma": no fp32 claim on it
        return KernelClass(CONV, tensor, None if not tensor and explicit == "fp32" else explicit, "miopen")
    match = _NAIVE_CONV.match(low)
    if match:
        return KernelClass(CONV, False, _NAIVE_TYPES.get(match.group("in")), "miopen")
    if re.match(r"(?:miopen|gcn)\w*?conv|miopencv|conv(?:_hip|hip|1x1u|_ocl)|gridwise_convolution", low):
        tensor = "xdlops" in low or "wmma" in low
        return KernelClass(CONV, tensor, explicit, "miopen")
    # Composable Kernel (ck::tensor_operation::device::kernel_*, ck_tile::kentry<…>)
    if fn.startswith(("ck::", "ck_tile::")) or low.startswith("_zn2ck") or low.startswith("_zn7ck_tile"):
        what = fn if fn.startswith("ck::") else low
        if "fmha" in what:
            return None  # attention
        if "conv" in what or "gemm" in what:
            op = CONV if "conv" in what else MATMUL
            tensor = bool(re.search(r"xdl|wmma|mfma", what))
            precision = _ck_precision(name)
            if not tensor and precision == "fp32" and not re.search(r"_dl(?:_|v|ops|$)", what):
                precision = None  # neither xdl/wmma nor dl in the name: do not claim fp32 off the Matrix Cores
            return KernelClass(op, tensor, precision, "composable-kernel")
    # rocBLAS/hipBLAS source kernels (GEMMs go through Tensile): gemv and friends run on the vector ALUs
    if "rocblas" in fn and re.search(r"gemm|gemv|ger|trsm|trmm|symm|hemm|syrk|herk", fn):
        return KernelClass(MATMUL, False, explicit if not name.startswith("_Z") else None, "rocblas")
    return None


# --- memory-bound kernels, from the kernel's own function name ---

_GEMM_HELPER = re.compile(r"splitkreduce|reducesplitk|splitk_reduce|epilogue::|compute\w*offsets|init_device_workspace"
                          r"|_postgsu|gsu_?reduce|reduce_wgrad")
_UNTOLD = {"topk", "sort", "radix", "unique", "histogram", "nonzero", "argsort", "multinomial", "routing",
           "bucketize", "searchsorted"}
_NORM_WORDS = re.compile(r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|gammabeta|normalization"
                         r"|(?:^|[_:])(?:ln|bn)_(?:fw|bw|fwd|bwd)|(?:^|[_:])norm_(?:fwd|bwd|forward|backward)|lrn"
                         r"|applylayernorm|applyrmsnorm|cucomputegradinput|rowwisemoments|computefusedparams", re.I)
_SOFTMAX_WORDS = re.compile(r"soft_?max", re.I)
_REDUCE_WORDS = re.compile(r"reduce|reduction|(?:^|[_:])scan|devicescan|logsumexp|cross_?entropy|nll_?loss", re.I)
_REDUCE_TOKENS = {"sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "pool", "pooling", "pool2d", "pool3d",
                  "norm", "l2norm", "asum", "nrm2", "dot", "var", "std", "nll"}
_COPY_TOKENS = {"copy", "cat", "concat", "transpose", "permute", "gather", "scatter", "index", "indices", "indexing",
                "embedding", "embeddings", "embs", "nchw", "nhwc", "cnhw", "ncdhw", "ndhwc", "expand", "repeat", "pad",
                "flip", "roll", "upsample", "subsample", "cache", "tril", "triu", "contiguous", "unfold", "split",
                "chunk", "stack", "slice", "narrow", "col2im", "im2col"}
_ELEMENTWISE_WORDS = re.compile(r"elementwise|element_wise|multi_tensor_apply|foreach|direct_copy|copy_kernel"
                                r"|reshape_and_cache|concat_and_cache|act_and_mul|(?:^|[_:])op\d?d?tensor"
                                r"|subtensorop|miopenneuron|nchw_?to_?nhwc|nhwc_?to_?nchw"
                                r"|(?:^|_)(?:to|from)_(?:float|half|bf16|bfloat16|fp8|fp16|hfp8)", re.I)
_ELEMENTWISE_TOKENS = {"fill", "zero", "zeros", "cast", "quant", "quantize", "dequant", "dequantize", "dropout",
                       "activation", "act", "silu", "gelu", "relu", "swiglu", "geglu", "sigmoid", "tanh", "rotary",
                       "rope", "masked", "where", "clamp", "add", "mul", "bias", "axpy", "scal", "arange", "random",
                       "uniform", "bernoulli", "distribution", "exp", "sqrt", "rsqrt", "adam", "sgd", "lamb",
                       "optimizer", "scale"} | _COPY_TOKENS


def _library(fn: str) -> str:
    if fn.startswith("at::") or fn.startswith("at_cuda_detail::"):
        return "aten"
    for prefix, family in (("cudnn", "cudnn"), ("miopen", "miopen"), ("ck::", "composable-kernel"), ("cub::", "cub"),
                           ("vllm::", "vllm"), ("flashinfer::", "flashinfer"), ("transformer_engine", "te"),
                           ("layer_norm::", "apex"), ("fbgemm", "fbgemm"), ("rocblas", "rocblas")):
        if fn.startswith(prefix):
            return family
    if fn.startswith("cu") and ("layernorm" in fn or "rmsnorm" in fn or "gamma" in fn):
        return "apex"
    return "generic"


def _memory_bound(name: str, low: str, head: str) -> KernelClass | None:
    """Normalization, softmax, reduction and elementwise kernels, read from the kernel's own name (not from its
    template arguments: ``reduce_kernel<…, sum_functor<…>>`` is a reduction, ``vectorized_elementwise_kernel<4,
    GeluCUDAKernelImpl…>`` elementwise)."""
    fn = head.lower()
    if _GEMM_HELPER.search(fn):
        return None
    words = _tokens(head)
    if words & _UNTOLD or "topk" in fn:
        return None
    family = _library(fn)
    if _NORM_WORDS.search(head) or fn.startswith("miopenbatchnorm"):
        return KernelClass(NORMALIZATION, False, None, family)
    if _SOFTMAX_WORDS.search(head):
        return KernelClass(SOFTMAX, False, None, family)
    if _ELEMENTWISE_WORDS.search(head) or "batched_transpose" in fn:
        copy = (words & _COPY_TOKENS or re.search(r"copy_kernel|direct_copy|nchw_?to|nhwc_?to|cache|transpose", low)) \
            and not words & {"rotary", "rope"}
        return KernelClass(ELEMENTWISE, False, None, "copy" if copy else family)
    if _REDUCE_WORDS.search(head) or words & _REDUCE_TOKENS or {"embedding", "backward"} <= words:
        return KernelClass(REDUCTION, False, None, family)
    if words & _ELEMENTWISE_TOKENS:
        copy = words & _COPY_TOKENS and not words & {"rotary", "rope"}
        return KernelClass(ELEMENTWISE, False, None, "copy" if copy else family)
    return None


def _triton(low: str) -> KernelClass:
    """Inductor's kernels: ``triton_poi_`` (pointwise), ``triton_red_``/``triton_per_`` (reductions), ``triton_for_``
    (foreach), ``triton_tem_`` (templates: mm, conv, flex attention)."""
    kind = low.split("_")[1] if low.count("_") else ""
    if kind in ("poi", "red", "per", "for", ""):
        if re.search(r"layer_norm|rms_norm|batch_norm|group_norm|(?:rsqrt.*(?:mean|var))|(?:(?:mean|var).*rsqrt)", low):
            return KernelClass(NORMALIZATION, False, None, "triton")
        if "softmax" in low:
            return KernelClass(SOFTMAX, False, None, "triton")
        if kind in ("red", "per"):
            return KernelClass(REDUCTION, False, None, "triton")
        if kind in ("poi", "for"):
            return KernelClass(ELEMENTWISE, False, None, "triton")
        return KernelClass(OTHER, False, None, "triton")
    if "tem" not in kind and not re.search(r"mm|matmul|conv|attention", low):
        return KernelClass(OTHER, False, None, "triton")
    op = ATTENTION if "attention" in low or "flex" in low else CONV if "conv" in low else MATMUL
    return KernelClass(op, True, None, "triton-template")


# TensorRT-LLM "trtllm-gen" GEMMs: bmm_<C>_<A><B>_<acc>_t<tile>…_m<mma>…_sm100f / gemm_…
_TRTLLM_GEN = re.compile(r"^(?:bmm|gemm)_(?P<c>[A-Za-z0-9]+)_(?P<ab>[A-Za-z0-9]+)_(?:Fp32|Fp16)_t\d+x\d+x\d+"
                         r"\w*_sm1\d\d")
_TRTLLM_TYPES = (("e2m1", "fp4"), ("e4m3", "fp8"), ("e5m2", "fp8"), ("int8", "int8"), ("bfloat16", "bf16"),
                 ("fp16", "fp16"), ("tf32", "tf32"), ("fp32", "fp32"))

_CUTLASS_TC = re.compile(r"tensorop|wmma|gmma|mmatensorop|tcgen05|umma|tmawarpspecialized|mainloopsm(?:90|1\d\d)"
                         r"|sm(?:80|90|100|120)_\d+x\d+x\d+_|opclasstensorop|mma_sm\d+", re.I)
_CUTLASS_SIMT = re.compile(r"simt|universalfma|opclasssimt|ffma|(?<![a-z])fma(?![a-z])|sm70_?twostage", re.I)


def _classify(name: str, arch: int | None) -> KernelClass:
    low = name.lower()
    arch = name_arch(name) or arch
    explicit = _explicit_precision(name)

    if "nccl" in low or "rccl" in low:
        return KernelClass(COMMUNICATION, False, None, "nccl")
    if _COMM_KERNEL.search(low):
        return KernelClass(COMMUNICATION, False, None, "communication")

    # --- Triton (torch.compile / user kernels) ---
    if low.startswith("triton_") or low.startswith("triton__"):
        return _triton(low)

    # --- ROCm Tensile (rocBLAS / hipBLASLt) ---
    match = _TENSILE.match(name)
    if match:
        if "_postgsu" in low:
            return KernelClass(OTHER, False, None, "tensile")  # hipBLASLt's split-K reduction
        code = match.group("type").upper()
        precision = {"S": "fp32", "D": "fp64", "H": "fp16", "B": "bf16", "X": "tf32", "I": "int8",
                     "F": "fp8"}.get(code[0])
        if code.startswith(("I8", "4XI8")):
            precision = "int8"
        if code.startswith(("F8", "B8")):
            precision = "fp8"  # F8 = fp8 (e4m3), B8 = bf8 (e5m2), F8B8/B8F8 mixed
        return KernelClass(MATMUL, bool(_TENSILE_MFMA.search(name)), precision, "tensile")

    head, kernel = _entry(name)
    fn = (head + " " + kernel).lower()

    # --- AMD: MIOpen, Composable Kernel, rocBLAS ---
    amd = _amd(name, low, head, explicit)
    if amd is not None:
        return amd

    # --- Hopper/Blackwell cuBLASLt ---
    if low.startswith("nvjet_"):
        return KernelClass(MATMUL, True, explicit if explicit not in (None, "fp32") else None, "nvjet")

    # --- cuBLAS / cuDNN xmma (sm70+) ---
    if "_xmma_" in low:
        op = (_op_of(name.replace("implicit_gemm", ""))
              if any(t in low for t in ("fprop", "dgrad", "wgrad", "conv")) else MATMUL)
        tokens = {t for field in _XMMA_TYPES.findall(low) for t in _XMMA_TOKEN.findall(field)}
        precision = next((p for token, p in _XMMA_RANK if token in tokens), explicit)
        fma = "ffma" in low or "simt" in low or "dfma" in low
        tensor = not fma and (precision in ("tf32", "fp16", "bf16", "fp8", "int8") or "_tensor" in low or "hmma" in low)
        if tensor and precision == "fp32":
            precision = "tf32"
        return KernelClass(op, tensor, precision, "xmma")

    # --- attention kernels (FlashAttention, mem-efficient, cuDNN SDPA, TensorRT-LLM, FlashInfer…) ---
    attention = _attention(name, low, head, kernel, explicit, arch)
    if attention is not None:
        return attention

    # --- DeepGEMM: wgmma/tcgen05 GEMMs ---
    if fn.startswith("deep_gemm::") and "gemm" in fn.split("::", 1)[1]:
        return KernelClass(MATMUL, True, _explicit_precision(head) or explicit, "deep-gemm")

    # --- TensorRT-LLM trtllm-gen GEMMs (Blackwell) ---
    match = _TRTLLM_GEN.match(name)
    if match:
        ab = match.group("ab").lower()
        precision = next((p for token, p in _TRTLLM_TYPES if token in ab), None)
        return KernelClass(MATMUL, True, precision, "trtllm-gen")

    # --- CUTLASS entry points (named or mangled templates), not CUTLASS types in another kernel's arguments ---
    if "cutlass" in head.lower() or low.startswith("cutlass") or low.startswith("_zn") and "cutlass" in low[:40]:
        if "reduction" in low or "reducesplitk" in low or "epilogue" in low and "gemm" not in low:
            return KernelClass(OTHER, False, None, "cutlass")
        mma = _MMA.search(name)
        precision = explicit or (_mma_precision(mma.group("acc"), mma.group("shape"), arch) if mma else None)
        simt = bool(_CUTLASS_SIMT.search(kernel) or re.search(r"_simt_|universalfma|opclasssimt", low))
        tensor = not simt and (bool(_CUTLASS_TC.search(name)) or precision in ("fp8", "fp4"))
        op = ATTENTION if any(t in low for t in ("fmha", "attention", "flash")) else CONV if any(
            t in low for t in ("conv", "fprop", "dgrad", "wgrad")) else MATMUL
        if not tensor and precision is None and re.search(r"_s(gemm|conv)|sgemm", low):
            precision = "fp32"
        if tensor and precision == "fp32":
            precision = "tf32"  # CUTLASS TensorOp kernels over float operands run in TF32 (or 3xTF32)
        if not tensor and not simt and precision == "fp32":
            precision = None  # no MMA marker but no SIMT marker either: do not claim fp32 off the Tensor Cores
        return KernelClass(op, tensor, precision, "cutlass")

    # --- legacy cuBLAS / cuDNN names with an MMA shape ---
    mma = _MMA.search(name)
    if mma:
        precision = (explicit if explicit not in (None, "fp32")
                     else _mma_precision(mma.group("acc"), mma.group("shape"), arch))
        return KernelClass(_op_of(name), True, precision, "mma")

    # --- the rest of cuBLAS / cuDNN / MAGMA: SIMT math ---
    blas = _LEGACY_BLAS.search(name)
    if blas or any(t in low for t in ("gemv", "gemmk1", "sgemm", "dgemm", "hgemm", "convolve_", "wgrad_alg",
                                      "dgrad_engine", "dgrad2d", "winograd", "fft2d_", "im2col", "conv_depthwise",
                                      "depthwise_conv")):
        prefix = blas.group("prec").lower() if blas else ""
        precision = explicit or {"s": "fp32", "d": "fp64", "h": "fp16", "c": "fp32", "gc": "fp32", "cg": "fp32",
                                 "z": "fp64"}.get(prefix)
        if precision is None and re.search(r"(?:^|[_\s])s(?:gemm|gemv)", low):
            precision = "fp32"
        op = CONV if blas and blas.group("what").lower() == "cudnn" else _op_of(name) if any(
            t in low for t in ("conv", "winograd", "fft2d", "im2col", "wgrad", "dgrad")) else MATMUL
        return KernelClass(op, False, precision, "blas")

    # --- memory-bound kernels: normalization, softmax, reduction, elementwise (incl. copies) ---
    memory = _memory_bound(name, low, head)
    if memory is not None:
        return memory

    # --- generic fallbacks ---
    if re.search(r"(?:^|[_\s:])(?:gemm|matmul|bmm)(?:[_<(\s]|$)", low) and "splitk" not in low:
        return KernelClass(MATMUL, False, explicit, "generic")
    return _OTHER


@lru_cache(maxsize=16384)
def classify_kernel(name: str, arch: int | None = None) -> KernelClass:
    """Classify one kernel name; ``arch`` is the device's compute capability major (deviceProperties computeMajor).

    A device older than Volta (arch < 7) has no Tensor Cores, whatever the name says.
    """
    result = _classify(name, arch)
    if result.tensor_core and arch is not None and arch < 7 and result.family not in _AMD_FAMILIES:
        return KernelClass(result.op, False, result.precision, result.family)
    return result


# --- the kernel families a report sums GPU time under (tracelint diff, the HTML report, kernel_family_pct) --------
KERNEL_GROUPS = {
    "gemm-cuda-core": "GEMM kernels off Tensor Cores", "gemm-tensor-core": "GEMM kernels on Tensor Cores",
    "convolution": "convolution kernels", "attention": "attention kernels", "optimizer": "optimizer kernels",
    "compiled": "compiled (Triton) kernels", "communication": "communication kernels", "copy": "copies",
    "memset": "memsets", "elementwise": "elementwise kernels", "reduction": "reduction kernels",
    "normalization": "normalization kernels", "softmax": "softmax kernels",
    "moe-routing": "MoE routing kernels", "other": "other kernels",
}
# A mixture of experts' routing (top-k of the router's scores, the tokens' histogram and offsets per expert, the
# dispatch layout, the weighted sum back: TensorRT-LLM's ``moe::dev::routing``/``finalize``, DeepEP's and SGLang's
# ``get_dispatch_layout``/``get_fused_mapping``/``clean_and_count_expert``, PyTorch's top-k kernels).
_MOE_ROUTING = re.compile(r"moe::dev::(?:routing|finalize)|get_dispatch_layout|get_fused_mapping|count_expert"
                          r"|topk_sum_and_topk_idx|sbtopk::|mbtopk::|moe_align_block_size", re.I)
# Optimizer kernels by name: PyTorch's foreach and fused optimizers (multi_tensor_apply, fused Adam/AdamW/SGD), apex's.
_OPTIMIZER = re.compile(r"multi_tensor_apply|fused_adam|fusedadam|adam_kernel|adamw|fused_sgd|_fused_\w*sgd|lamb_|"
                        r"multi_tensor_(?:adam|sgd|lamb|l2norm|scale)", re.I)


def kernel_group(kind: str, name: str, analysis) -> str:
    """The family of KERNEL_GROUPS a GPU event's time is summed under: matmul kernels on or off Tensor Cores,
    convolutions, attention, the optimizer's kernels (by name: foreach and fused optimizers), compiled (Triton) kernels
    other than those, communication (NCCL and peer-to-peer copies), copies (memcpy, copy kernels), memsets, the
    memory-bound ops, a mixture of experts' routing (by name), other."""
    if kind != KERNEL:
        if kind == MEMSET:
            return "memset"
        return "communication" if copy_direction(name) == P2P else "copy"
    kc = analysis.kernel_class(name)
    if kc.op == CONV:
        return "convolution"
    if kc.op == MATMUL:
        return "gemm-tensor-core" if kc.tensor_core else "gemm-cuda-core"
    if kc.op in (ATTENTION, COMMUNICATION):
        return kc.op
    if _OPTIMIZER.search(name):
        return "optimizer"
    if kc.family.startswith("triton"):
        return "compiled"
    if kc.family == "copy":
        return "copy"
    if kc.op in MEMORY_BOUND_OPS:
        return kc.op
    return "moe-routing" if _MOE_ROUTING.search(name) else "other"


# --- memory layout (TL405): what a kernel's name says of the memory format of the tensors it works on ---------
LAYOUT_CONVERSION, CHANNELS_FIRST, CHANNELS_LAST = "conversion", "nchw", "nhwc"
_CONVERSION = re.compile(r"nchw_?to_?nhwc|nhwc_?to_?nchw|nchw_?2_?nhwc|nhwc_?2_?nchw|^batched_transpose_\d+x\d+_", re.I)
_XMMA_OUTPUT = re.compile(r"_(?:nhwc|nchw)krsc_(nhwc|nchw)_", re.I)  # input, filter (krsc) and output layouts
_NATIVE_BATCH_NORM = re.compile(r"(?:^|::)batch_norm_\w+_kernel$")


@lru_cache(maxsize=16384)
def memory_layout(name: str) -> str | None:
    """``LAYOUT_CONVERSION`` for a transpose between NCHW and NHWC, ``CHANNELS_FIRST`` for a kernel working on NCHW
    data that has a channels-last version, ``CHANNELS_LAST`` for one working on NHWC data; None when the name says
    no layout. PyTorch's plain batch-norm kernels also serve 2-D inputs (BatchNorm1d): read them in a conv net."""
    if _CONVERSION.search(name):
        return LAYOUT_CONVERSION
    xmma = _XMMA_OUTPUT.search(name)
    if xmma:
        return xmma.group(1).lower()
    head, kernel = _entry(name)
    if _NATIVE_BATCH_NORM.search(head):
        return CHANNELS_LAST if "channels_last" in head else CHANNELS_FIRST
    fn = f"{head} {kernel}"
    words = _tokens(fn) | {w.lower() for w in re.split(r"[^A-Za-z0-9]+", fn)}
    if "cnhw" in words:
        return None  # MIOpen's NCHW <-> CNHW transposes: whether NHWC data would need them, the name does not tell
    if "channels_last" in fn.lower() or "nhwc" in words:
        return CHANNELS_LAST
    return CHANNELS_FIRST if "nchw" in words else None
