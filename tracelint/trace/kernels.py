"""What a GPU kernel computes, read from its name: the operation, its precision, and whether it runs on Tensor Cores.

Vendors encode the math unit and data types in their kernel names; this module reads those fields instead of
matching an allowlist of substrings. The TensorBoard plugin's old allowlist (``xmma_gemm``, ``hmma``, ``1688``, …)
counts ``sm80_xmma_gemm_f32f32_f32f32_f32_*_ffma_*`` (plain fp32 FMA) as Tensor Core work and misses Hopper's
``nvjet_*``. The name families read here, with real examples (tests/trace/test_kernels.py holds the table):

- cuBLAS legacy ``<arch>_<types><acc><mma shape>gemm_*``: ``volta_sgemm_*`` (SIMT fp32), ``volta_h884gemm_*``,
  ``turing_fp16_s1688gemm_fp16_*``, ``ampere_bf16_s16816gemm_bf16_*`` (Tensor Cores: an MMA shape 884/1688/16816…).
- cuBLAS/cuDNN xmma ``sm<NN>_xmma_<op>_<A><B>_<C><D>_<acc>_…``: the first type is the input type (``tf32``,
  ``f16``, ``bf16``, ``e4m3``…: Tensor Cores; ``f32``: CUDA cores, and the name then says ``ffma``).
- cuBLASLt on Hopper+ ``nvjet_*``: always wgmma/tcgen05 (Tensor Cores); the type letters are not a reliable
  precision (``tst`` is seen on TF32 and bf16 GEMMs), so the precision stays unknown.
- CUTLASS ``cutlass_<arch>_tensorop_*`` / ``wmma`` (Tensor Cores) vs ``cutlass_<arch>_simt_*`` (CUDA cores), and
  mangled CUTLASS templates (``MmaTensorOp``, ``tfloat32_t``, ``ImplicitGemmConvolution``).
- cuDNN legacy ``<arch>_scudnn_*`` (fp32 SIMT), ``*_h884cudnn_*`` (Tensor Cores), ``implicit_convolve_sgemm``,
  ``wgrad_alg0_engine<float…>``, winograd and FFT stages (fp32 SIMT convolution).
- ROCm Tensile ``Cijk_<A>_<B>_<type>_…_MT…_MI<m>x<n>x<k>_…``: an ``MI`` field means MFMA (Matrix Cores).
- Triton: ``triton_poi_/red_/per_`` are pointwise/reduction kernels; ``triton_tem_fused_*mm*`` and user
  ``*matmul*``/``*_mm_*`` kernels are matmul templates. Their ``tl.dot`` runs on Tensor Cores for every input type
  except fp32 with TF32 disabled, which the name cannot tell: we count them as Tensor Core work with an unknown
  precision, so TL401 never fires on a compiled model on a guess.
- Attention: FlashAttention, memory-efficient (``fmha_cutlass*``), cuDNN SDPA kernels (Tensor Cores on sm80+).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

MATMUL, CONV, ATTENTION, COMMUNICATION, OTHER = "matmul", "conv", "attention", "communication", "elementwise/other"


@dataclass(frozen=True, slots=True)
class KernelClass:
    op: str  # matmul | conv | attention | communication | elementwise/other
    tensor_core: bool  # runs on Tensor Cores (NVIDIA) / Matrix Cores (AMD MFMA)
    precision: str | None  # input precision: fp64, fp32, tf32, bf16, fp16, fp8, int8; None when the name hides it
    family: str = ""  # which naming scheme decided it (for messages and tests)

    @property
    def fp32_off_tensor_cores(self) -> bool:
        """Matmul/conv math that runs in plain fp32 on the CUDA cores: what TF32 or bf16 would move to Tensor Cores."""
        return self.op in (MATMUL, CONV) and not self.tensor_core and self.precision == "fp32"


_OTHER = KernelClass(OTHER, False, None, "other")

# Explicit type tokens anywhere in a name (cuBLAS prefixes like ``ampere_bf16_``, CUTLASS ``_bf16_``, template
# arguments like ``c10::BFloat16`` or ``cutlass::half_t``, mangled ``tfloat32_t``).
_TYPE_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
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
# ``deep_ep::intranode::dispatch``; its ``get_dispatch_layout`` is local compute) and custom all-reduce kernels
# (vLLM's ``cross_device_reduce_1stage``).
_COMM_KERNEL = re.compile(
    r"(?:multimem|one_shot|two_shot)_all_(?:reduce|gather)|symmetric_memory|cross_device_reduce"
    r"|(?:deep_ep|::ep)::(?:intranode|internode|internode_ll)::(?:notify_)?(?:dispatch|combine)")
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
        kind = low.split("_")[1] if low.count("_") else ""
        if kind in ("poi", "red", "per", "") or "tem" not in kind and not re.search(r"mm|matmul|conv|attention", low):
            return KernelClass(OTHER, False, None, "triton")
        op = ATTENTION if "attention" in low or "flex" in low else CONV if "conv" in low else MATMUL
        return KernelClass(op, True, None, "triton-template")

    # --- ROCm Tensile / hipBLASLt ---
    match = _TENSILE.match(name)
    if match:
        code = match.group("type").upper()
        precision = {"S": "fp32", "D": "fp64", "H": "fp16", "B": "bf16", "X": "tf32", "I": "int8",
                     "F": "fp8"}.get(code[0])
        if code.startswith(("I8", "4XI8")):
            precision = "int8"
        return KernelClass(MATMUL, bool(_TENSILE_MFMA.search(name)), precision, "tensile")

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

    # --- attention kernels (FlashAttention, xformers/PyTorch mem-efficient, cuDNN SDPA) ---
    if any(t in low for t in ("flash_fwd", "flash_bwd", "flash::", "fmha", "attention_kernel", "sdpa", "flash_attn")):
        # fp16/bf16 attention kernels are MMA kernels; fp32 mem-efficient attention uses TF32-emulating MMA on
        # sm80+ and SIMT before.
        tensor = explicit in ("fp16", "bf16", "fp8") or (arch is not None and arch >= 8) or explicit is None
        return KernelClass(ATTENTION, tensor, explicit, "attention")

    # --- CUTLASS (named or mangled templates) ---
    if "cutlass" in low:
        if "reduction" in low or "reducesplitk" in low or "epilogue" in low and "gemm" not in low:
            return KernelClass(OTHER, False, None, "cutlass")
        tensor = (any(t in low for t in ("tensorop", "wmma", "gmma", "mmatensorop", "tcgen05", "umma"))
                  and "simt" not in low)
        op = ATTENTION if any(t in low for t in ("fmha", "attention", "flash")) else CONV if any(
            t in low for t in ("conv", "fprop", "dgrad", "wgrad")) else MATMUL
        mma = _MMA.search(name)
        precision = explicit or (_mma_precision(mma.group("acc"), mma.group("shape"), arch) if mma else None)
        if not tensor and precision is None and re.search(r"_s(gemm|conv)|sgemm", low):
            precision = "fp32"
        if tensor and precision == "fp32":
            precision = "tf32"  # CUTLASS TensorOp kernels over float operands run in TF32 (or 3xTF32)
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
    if result.tensor_core and arch is not None and arch < 7 and not name.startswith("Cijk_"):
        return KernelClass(result.op, False, result.precision, result.family)
    return result
