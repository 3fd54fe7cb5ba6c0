"""The kernel-name classifier, on a table of real kernel names per architecture.

Names come from the public trace corpus (file noted), from the H100/H200 fixtures (fixtures/traces), from the
kernel names measured on an H200 (torch 2.11, CUDA 13), and a few from public profiler output for generations the
corpus lacks (noted).
"""
from __future__ import annotations

import gzip
import json

import pytest

from tracelint.trace.kernels import (
    ATTENTION,
    CHANNELS_FIRST,
    CHANNELS_LAST,
    COMMUNICATION,
    CONV,
    ELEMENTWISE,
    LAYOUT_CONVERSION,
    MATMUL,
    NORMALIZATION,
    OTHER,
    REDUCTION,
    SOFTMAX,
    classify_kernel,
    memory_layout,
)

MM, CV, AT, CO, OT = MATMUL, CONV, ATTENTION, COMMUNICATION, OTHER
EW, RD, NM, SM = ELEMENTWISE, REDUCTION, NORMALIZATION, SOFTMAX

# (arch, name, op, tensor_core, precision)
VOLTA = [  # tbplugin-resnet50_*, hta-df_index_resolver, hta-ns_resolution_trace (Tesla V100)
    (7, "volta_sgemm_128x64_nn", MM, False, "fp32"),
    (7, "volta_sgemm_32x32_sliced1x4_nt", MM, False, "fp32"),
    (7, "volta_scudnn_128x64_relu_interior_nn_v1", CV, False, "fp32"),
    (7, "volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", CV, False, "fp32"),
    (7, "cudnn_infer_volta_scudnn_128x128_relu_medium_nn_v1", CV, False, "fp32"),
    (7, "cudnn_train_volta_scudnn_128x128_stridedB_splitK_interior_nn_v1", CV, False, "fp32"),
    (7, "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int, "
        "float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, "
        "float const*, float const*, bool, int, int)", CV, False, "fp32"),
    (7, "void explicit_convolve_sgemm<float, int, 1024, 5, 5, 3, 3, 3, 0, false>(int, int, int, float const*, int, "
        "float const*, int, float*, kernel_conv_params, unsigned long long, int, unsigned long long, int, float, "
        "float, int, float const*, float const*)", CV, False, "fp32"),
    (7, "void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, "
        "float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
     CV, False, "fp32"),
    (7, "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, float "
        "const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int, "
        "int)", CV, False, "fp32"),
    (7, "void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::"
        "WinogradDataParams<float, float>)", CV, False, "fp32"),
    (7, "void magma_sgemmEx_kernel<float, float, float, true, false, 6, 4, 6, 3, 4>(int, int, int, Tensor, int, "
        "Tensor, int, Tensor, int, Tensor, int, int, int, float const*, float const*, float, float, int, "
        "cublasLtEpilogue_t, int, void const*, long)", MM, False, "fp32"),
    (7, "void splitKreduce_kernel<float, float, float, float>(cublasSplitKParams<float>, float const*, float const*, "
        "float*, float const*, float const*, float const*)", OT, False, None),
    (7, "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*, "
        "cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, "
        "float)", NM, False, None),  # batch norm: was elementwise/other before the split
    (7, "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", OT, False, None),
    (7, "void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, float "
        "const*, float*, float, float)", EW, False, None),  # layout copy
    (7, "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", CO, False, None),
    # Volta Tensor Core names (public cuda-memcheck / profiler output; the corpus' V100 runs are all fp32)
    (7, "volta_h884gemm_64x64_ldg8_nn", MM, True, "fp16"),
    (7, "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", MM, True, "fp16"),
    (7, "void cutlass::Kernel2<cutlass_70_tensorop_h884gemm_128x128_tn_align8>(cutlass_70_tensorop_h884gemm_128x128_"
        "tn_align8::Params)", MM, True, "fp16"),
]

TURING = [  # public profiler output (no Turing trace in the corpus)
    (7, "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", MM, True, "fp16"),
    (7, "turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", CV, True, "fp16"),
]

AMPERE = [  # hta-critical_path, hta-nccl_parser_config, hta-trace_diff (A100), hta-timeline_analysis (A100-class)
    (8, "ampere_sgemm_32x32_sliced1x4_tn", MM, False, "fp32"),
    (8, "ampere_sgemm_128x64_nn", MM, False, "fp32"),
    (8, "ampere_gcgemm_64x64_nt", MM, False, "fp32"),
    (8, "cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1", CV, False, "fp32"),
    (8, "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", CV, False, "fp32"),
    (8, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_"
        "256x64_16x4_nn_align4::Params)", MM, True, "tf32"),
    (8, "void cutlass::Kernel<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::"
        "Params)", MM, False, "fp32"),
    (8, "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x"
        "2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn", CV, True, "tf32"),
    (8, "sm80_xmma_dgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
        "tensor16x8x8_execute_kernel_cudnn_infer", CV, True, "tf32"),
    (8, "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2"
        "x1_g1_tensor16x8x8_execute_kernel_cudnn_train", CV, True, "tf32"),
    (8, "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc_unity_stride_"
        "align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_128x128_16x4_nhwc_unity_stride_align4::Params)",
     CV, True, "tf32"),
    (8, "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemm"
        "MultistageINS_4gemm9GemmShapeILi128ELi128ELi32EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimized"
        "INS_11MatrixShapeILi128ELi32EEENS_10tfloat32_tENS_9transform29PitchLinearWarpRakedThreadMapINS_16PitchLinear"
        "ShapeILi128ELi32EEELi128ENSF_ILi8ELi4EEELi4EEENS6_11threadblock9MmaPolicyINS6_4warp11MmaTensorOpINS7_ILi64E"
        "Li64ELi32EEE", CV, True, "tf32"),
    (8, "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<cutlass_cudnn_train::"
        "MatrixShape<4, 128>, cutlass_cudnn_train::epilogue::thread::LinearCombination<float, 4, float, float>>>",
     OT, False, None),
    (8, "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasLt::"
        "cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, "
        "float const*, float*, void*, long, float*, int*)", OT, False, None),
    (8, "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParams<"
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensor"
        "StridedBatched<float>, float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemv"
        "TensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
     MM, False, "fp32"),
    (8, "void sgemm_largek_lds64<true, true, 6, 3, 4, 5, 2, 66>(float*, float const*, float const*, int, int, int, "
        "int, int, int, float const*, float const*, float, float, int, int, int*, int*)", MM, False, "fp32"),
    (8, "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int, int, int, int, int, int, int, "
        "int, cudnn::reduced_divisor, bool, int2, int, int)", CV, False, "fp32"),
    (8, "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, "
        "cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, int*)", OT, False, None),
    (8, "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, "
        "int, int, unsigned char*, bool)", EW, False, None),  # a cast
    (8, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", CO, False, None),
    # bf16/fp16 and attention names on A100 from public profiler output
    (8, "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_tn", MM, True, "bf16"),
    (8, "ampere_fp16_s16816gemm_fp16_128x64_ldg8_f2f_stages_64x4_tn", MM, True, "fp16"),
    (8, "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>("
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8::Params)", MM, True, "bf16"),
    (8, "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
        "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)", AT, True, "bf16"),
    (8, "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
        "true, 64, 64, 64, true, true>::Params)", AT, True, "fp32"),
    (8, "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::"
        "bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, "
        "true, false, false>(Flash_fwd_params)", AT, True, "bf16"),
]

HOPPER = [  # measured on an H200 (torch 2.11, CUDA 13); fixtures add their names below
    (9, "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN", MM, True, None),
    (9, "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas", MM, True, "tf32"),
    (9, "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
        "execute_segment_k_off_kernel__5x_cudnn", CV, True, "fp16"),
    (9, "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
        "kernel__5x_cublas", MM, False, "fp32"),
    (9, "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(cutlass_80_simt_sgemm_128x64_8x5_nn_align1"
        "::Params)", MM, False, "fp32"),
    (10, "nvjet_sm100_tst_64x32_64x16_2x1_2cta_h_bz_TNT", MM, True, None),
    # fixtures/traces (H200, torch 2.11, CUDA 13): bf16 autocast GEMMs are nvjet "tst" too (matmul_bf16)
    (9, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NTT", MM, True, None),
    (9, "nvjet_sm90_tst_8x64_64x16_2x1_v_bz_bias_TNN", MM, True, None),
    (9, "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x2x1_tensor16x8x8_aligna4_alignc4_"
        "execute_kernel__5x_cublas", MM, True, "tf32"),  # launch_bound (set_float32_matmul_precision("high"))
    (9, "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_"
        "g1_execute_split_k_kernel__5x_cudnn", CV, True, "tf32"),  # cuDNN's default allow_tf32
    (9, "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x32x16_stage1_"
        "warpsize4x1x1_g1_tensor16x8x8_aligna4_alignc8", CV, True, "tf32"),
    (9, "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemm"
        "MultistageINS_4gemm9GemmShapeILi64ELi128ELi16EEENS4_52Conv2dWgradOutputGradientTileAccessIteratorOptimized"
        "INS_11MatrixShapeILi64ELi16EEENS_10tfloat32_tENS_9transform29PitchLinearWarpRakedThreadMapINS_16PitchLinear"
        "ShapeILi64ELi16EEELi128ENSF_ILi8ELi4EEELi4EEENS_12AlignedArrayISC_Li4ELi16EEEEENSD_11threadblock25Regular"
        "TileAccessIteratorISB_SC_NS_6layout40ColumnMajorTensorOpMultiplicandCongruousILi32ELi32EEE", CV, True, "tf32"),
    (9, "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1"
        "::Params)", MM, False, "fp32"),  # matmul_fp32
    (9, "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tensorop_s1688gemm_64x64_"
        "16x6_nn_align4::Params)", MM, True, "tf32"),
    (9, "void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(float*, float const*, float const*, int, int, int, "
        "int, int, int, float const*, float const*, float, float, int, int, int*, int*)", MM, False, "fp32"),
    (9, "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>("
        "cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)", EW, False, None),
    (9, "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, "
        "__nv_bfloat16, __nv_bfloat16, true, false, false, false>(cublasLt::cublasSplitKParams<float>)",
     OT, False, None),
    (9, "void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::implicit_gemm::"
        "fprop::Warp_specialized_params_non_template<float> >(float)", OT, False, None),
]

ROCM = [  # hta-amd_trace-mi250 (computeMajor 9 is gfx90a there, not Hopper)
    (9, "Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_"
        "GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1", MM, True, "fp32"),
    (9, "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_EPS0_"
        "GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1", MM, True, "fp32"),
    (9, "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB1_APM1_ABV0_ACED0_AF0EM1_AF1EM1", MM, True, "fp16"),
    (9, "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_1LDSB0_APM1_AF0EM1_AF1EM1_AMAS3_ASAE01_ASCE01", MM, False, "fp32"),
    (9, "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> "
        ">(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", EW, False, None),
]

TRITON = [  # hta-triton_example (A100) and Inductor's naming scheme
    (8, "triton_poi_fused_add_cos_sin_0", EW, False, None),
    (8, "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", NM, False, None),  # x*rsqrt(mean(x**2)+eps): RMSNorm
    (8, "triton_per_fused_native_layer_norm_2", NM, False, None),
    (9, "triton_tem_fused_mm_0", MM, True, None),
    (9, "triton_tem_fused_addmm_relu_3", MM, True, None),
    (9, "triton_tem_fused_convolution_1", CV, True, None),
]

TABLE = VOLTA + TURING + AMPERE + HOPPER + ROCM + TRITON


@pytest.mark.parametrize(("arch", "name", "op", "tensor_core", "precision"), TABLE, ids=[n[1][:60] for n in TABLE])
def test_kernel_table(arch, name, op, tensor_core, precision):
    kc = classify_kernel(name, arch)
    assert (kc.op, kc.tensor_core, kc.precision) == (op, tensor_core, precision)


def test_ffma_kernel_is_not_tensor_core_though_old_allowlist_says_so():
    # the TensorBoard plugin's allowlist matched "xmma_gemm"; the name's "ffma" field says CUDA-core FMA
    kc = classify_kernel("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_"
                         "alignc4_execute_kernel__5x_cublas", 9)
    assert kc.fp32_off_tensor_cores
    assert not classify_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", 9).fp32_off_tensor_cores


def test_pre_volta_device_has_no_tensor_cores():
    assert not classify_kernel("volta_h884gemm_64x64_ldg8_nn", 6).tensor_core
    assert classify_kernel("volta_h884gemm_64x64_ldg8_nn", None).tensor_core


def _kernel_names(path) -> tuple[int | None, set[str]]:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        data = json.load(fh)
    events = data if isinstance(data, list) else data.get("traceEvents", [])
    props = [] if isinstance(data, list) else data.get("deviceProperties") or []
    arch = props[0].get("computeMajor") if props else None
    return arch, {e["name"] for e in events if str(e.get("cat", "")).lower() == "kernel" and "name" in e}


def test_every_public_kernel_name_classifies(public_traces):
    """Every kernel of the corpus gets a class; PyTorch's own elementwise/reduction kernels are never matmul/conv."""
    seen = 0
    for path in sorted(public_traces.glob("*.json.gz")):
        arch, names = _kernel_names(path)
        for name in names:
            kc = classify_kernel(name, arch)
            seen += 1
            if name.startswith("void at::native::") and "conv" not in name and "im2col" not in name:
                assert kc.op not in (MATMUL, CONV, ATTENTION, COMMUNICATION), name
            if kc.memory_bound:
                assert not kc.tensor_core and kc.precision is None, name
            if kc.op in (MATMUL, CONV) and not kc.tensor_core and not name.startswith(("Cijk_", "triton")):
                assert kc.precision is not None, name  # a CUDA-core matmul we cannot date is a classifier gap
    assert seen > 300


FIXTURE_EXPECTED = {  # scenario -> what its matmul kernels must be (fixtures/traces/manifest.json)
    "matmul_fp32": (False, "fp32"),
    "matmul_tf32": (True, None),
    "matmul_bf16": (True, None),
}


@pytest.mark.parametrize("scenario", sorted(FIXTURE_EXPECTED))
def test_fixture_matmul_kernels(fixture_traces, scenario):
    """The H100/H200 fixtures: the fp32 run's GEMMs are off the Tensor Cores, the TF32/bf16 runs' GEMMs are on."""
    paths = sorted(fixture_traces.glob(f"{scenario}.*json.gz")) or sorted(fixture_traces.glob(f"{scenario}*.json.gz"))
    paths = [p for p in paths if p.name.split(".")[0] == scenario]
    if not paths:
        pytest.skip(f"no fixture trace for {scenario}")
    arch, names = _kernel_names(paths[0])
    classes = [classify_kernel(n, arch) for n in names]
    matmuls = [c for c in classes if c.op == MATMUL]
    assert matmuls, names
    tensor_core, precision = FIXTURE_EXPECTED[scenario]
    assert all(c.tensor_core == tensor_core for c in matmuls), [(n, classify_kernel(n, arch)) for n in names]
    if precision:
        assert all(c.precision == precision for c in matmuls)


# --- library families beyond cuBLAS/cuDNN and beyond NVIDIA (issue #10, item 5) ---------------------------------
# family -> [(arch, name, op, tensor_core, precision)]; names from the traces noted (public corpus = shared/traces/
# public, fixtures = fixtures/traces); "…" marks a name cut short here (the tests below classify the full names too).
FAMILIES = {
    "cutlass": [
        # deepseek-profile_data-train (H800): DeepSeek's FP8 grouped GEMMs, CUTLASS 3 entry point, no MMA marker in
        # the name; fp8 math exists only on Tensor Cores
        (9, "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::cud"
            "a::fp8_ptp128c::GemmKernel::Params)", MM, True, "fp8"),
        (9, "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(dpsk::grouped_"
            "gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel::Params)", MM, True, "fp8"),
        # hta-trace_diff-control (A100): a cuBLAS-dispatched CUTLASS 2 kernel (unchanged)
        (8, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>(cutlass_80_tensorop_s1688gemm_"
            "64x64_32x4_nn_align1::Params)", MM, True, "tf32"),
    ],
    "deep-gemm": [
        # public vLLM/SGLang profiler output quoted on GitHub (DeepSeek-V3 serving on H200; not in the corpus)
        (9, "void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 160u, 128u, 0u, 64u, 9u, 4u, 128u, 128u, 1u, true, "
            "(deep_gemm::GemmType)1>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap_st, CUtensorMap_st, "
            "CUtensorMap_st, CUtensorMap_st)", MM, True, "fp8"),
        (9, "void deep_gemm::sm90_fp8_gemm_1d2d_impl<(cute::UMMA::Major)0, 0u, 5120u, 17408u, 1u>", MM, True, "fp8"),
    ],
    "trtllm-gen": [
        # tracelens-b200-eager_trace (B200, vLLM + TensorRT-LLM MoE): MXFP4 weights x MXFP8 activations on tcgen05
        (10, "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_sch"
             "edP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f", MM, True, "fp4"),
        (10, "bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_s"
             "chedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f", MM, True, "fp4"),
    ],
    "miopen": [
        # tracelens-mi300-resnet_act_checkpoint (MI300X, bf16): XDLOPS implicit-GEMM convolutions (gtcx3 = gfx942)
        (9, "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x1_1x4x"
            "1x64_gkgs", CV, True, "bf16"),
        (9, "igemm_bwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x1x2_1x4x"
            "1x64_mh_gkgs", CV, True, "bf16"),
        (9, "igemm_wrw_gtcx3_nhwc_bf16_bx0_ex1_bt64x64x64_wt32x32x8_ws1x1_wr1x1_ta1x4x1x4_1x16x1x16_tb1x4x1x4_1x16x"
            "1x16_gkgs", CV, True, "bf16"),
        # MIOpen logs quoted on GitHub (gfx900/gfx1151; not in the corpus): the naive fallback (ushort = bf16)
        # and the fp32 winograd assembly kernel, both off the Matrix Cores
        (11, "naive_conv_ab_nonpacked_fwd_ncdhw_ushort_double_ushort", CV, False, "bf16"),
        (9, "naive_conv_ab_nonpacked_fwd_nchw_int8_t_int32_t_int8_t", CV, False, "int8"),
        (9, "miopenSp3AsmConv_v21_1_3_gfx9_fp32_f2x3_stride1", CV, False, "fp32"),
    ],
    "composable-kernel": [
        # tracelens-mi300-resnet_act_checkpoint: mangled CK kernels, "tt f t" = bhalf_t (ushort) in, float acc…
        (9, "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm_bk0mk1_bk0nk1"
            "_mn_xdlops_bwd_weightILi64EttftLNS_25InMemoryDataOperationEnumE1ENS_16TensorDescriptorINS_5TupleIJNS_5"
            "EmbedINS6_IJiiEEENS6_IJiNS_17integral_constantIiLi1EEEEEELb0EEENS_8RightPadIiiLb0EEE", MM, True, "bf16"),
        (9, "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_28GridwiseGe"
            "mm_xdl_cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorES7_ttfttNS0_12element_wise11Pass"
            "ThroughESA_SA_LNS1_18GemmSpecializationE7ELi256ELi64ELi64ELi64ELi8ELi8ELi32ELi32ELi1ELi1E", CV, True,
         "bf16"),
        (9, "_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple_abd_xdl_cshuffleINS_34"
            "GridwiseGemmMultipleD_xdl_cshuffleItttftNS_5TupleIJEEEtNS0_12element_wise11PassThroughES8_S8_LNS_25InM"
            "emoryDataOperationEnumE0ELi1ELi256ELi128ELi64ELi32ELi8ELi8ELi32ELi32ELi2ELi1E", CV, True, "bf16"),
    ],
    "tensile": [
        # tracelens-mi300-resnet_act_checkpoint: hipBLASLt/Tensile bf16 GEMMs on the Matrix Cores (BBS = bf16 in,
        # fp32 compute)
        (9, "Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_A"
            "SLT_ASM_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_CLR0_DTLA0_DTLB0_DTVA0_DTVB0_DVO0_ETSP_EPS1_ELFLR4_EMLL0",
         MM, True, "bf16"),
        (9, "Cijk_Ailk_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT16x16x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
            "CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1", MM, True, "bf16"),
    ],
    "xmma": [
        # deepseek-profile_data-train: cuBLAS's own bf16 GEMMs next to the FP8 grouped GEMMs (unchanged)
        (9, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_k"
            "ernel__5x_cublas", MM, True, "bf16"),
    ],
}
FAMILY_ROWS = [(family, *row) for family, rows in FAMILIES.items() for row in rows]


@pytest.mark.parametrize(("family", "arch", "name", "op", "tensor_core", "precision"), FAMILY_ROWS,
                         ids=[f"{r[0]}:{r[2][:50]}" for r in FAMILY_ROWS])
def test_library_families(family, arch, name, op, tensor_core, precision):
    kc = classify_kernel(name, arch)
    assert (kc.op, kc.tensor_core, kc.precision, kc.family) == (op, tensor_core, precision, family)
    assert not kc.fp32_off_tensor_cores or "fp32" in name  # TL401 only where the name says fp32


def test_cutlass_types_in_another_librarys_kernel_do_not_make_a_gemm():
    # tracelens-b200-eager_trace: a TensorRT-LLM MoE finalize (weighted scatter-add) templated on cutlass::bfloat16_t
    kc = classify_kernel("void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::"
                         "bfloat16_t, cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::"
                         "bfloat16_t, cutlass::bfloat16_t, 4, true>)", 10)
    assert kc.op not in (MATMUL, CONV, ATTENTION)
    # deepseek-profile_data-train: a transpose in DeepSeek's grouped-GEMM namespace is a copy
    kc = classify_kernel("void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*, "
                         "unsigned char*, int, int, int, int)", 9)
    assert (kc.op, kc.family) == (ELEMENTWISE, "copy")


# --- attention kernels and their implementation (issue #10, item 6) ----------------------------------------------
# (arch, name, tensor_core, precision, family, attention_impl)
ATTENTION_KERNELS = [
    # fixtures/traces/gpt_eager_bf16 (H200, torch 2.11, bf16 autocast): SDPA ran cuDNN's fused flash attention; its
    # "f16" means 16-bit (the run is bf16), so the precision stays unknown
    (9, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     True, None, "cudnn-sdpa", "cudnn"),
    (9, "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
     True, None, "cudnn-sdpa", "cudnn"),
    (9, "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, unsigned "
        "int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int…",
     False, None, "cudnn-sdpa", "cudnn"),  # backward pre-processing: rowsum(dO * O), no MMA
    (9, "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, unsigned int, "
        "unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, float "
        "const*, float const*, float const*, float*, void const*, void*, void*, bool, bool)",
     False, None, "cudnn-sdpa", "cudnn"),
    # fixtures/traces/gpt_fp32 (H200, fp32): SDPA ran the memory-efficient (CUTLASS fmha) kernels
    (9, "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, "
        "true, 64, 64, 64, true, true>::Params)", True, "fp32", "mem-efficient-attention", "mem_efficient"),
    (9, "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::"
        "Sm80, float, true, false, false, 64, 64, 64, false>::Params)", True, "fp32", "mem-efficient-attention",
     "mem_efficient"),
    # deepseek-profile_data-train (H800): FlashAttention 3 (beta) forward and backward
    (9, "void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, "
        "128>, true, flash::SingleTileScheduler, flash::SeqLenTraits<true> >(flash::CollectiveMainloopFwd<Flash_fwd_"
        "kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, 128>, true, flash::SeqLenTraits<true> "
        ">::Params, fl…", True, "bf16", "flash-attention", "flash"),
    (9, "void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2, cute::tuple<cute::C<1>, "
        "cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<192> >, cute::tuple<cute::C<64>, "
        "cute::C<128>, cute::C<128> >, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, true, false…",
     True, "bf16", "flash-attention", "flash"),
    (9, "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64>, cute::C<192> >, cute::"
        "tuple<cute::C<64>, cute::C<128> >, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, true> >(flash::"
        "FlashAttnBwdPreprocess<…", False, "bf16", "flash-attention", "flash"),
    # FlashAttention 3 release names, from public SGLang/vLLM profiler output quoted on GitHub (not in the corpus)
    (9, "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFw"
        "dSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<176>, cute::C"
        "<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, false…", True, "bf16", "flash-attention",
     "flash"),
    (9, "flash::prepare_varlen_num_blocks_kernel(int, int, int, const int *, const int *, const int *, const int *, "
        "const int *, const int *, int, int, int, int, int, cutlass::FastDivmod, cutlass::FastDivmod, int *, int *, "
        "bool)", False, None, "flash-attention", "flash"),
    # FlashAttention 2 inside PyTorch (public profiler output; the A100 table above has the forward kernel too)
    (8, "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::"
        "bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, "
        "true, false, false>(Flash_fwd_params)", True, "bf16", "flash-attention", "flash"),
    # tracelens-b200-eager_trace (B200): TensorRT-LLM's FP8 paged-KV attention (used by vLLM)
    (10, "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
     True, "fp8", "trtllm-fmha", None),
]


@pytest.mark.parametrize(("arch", "name", "tensor_core", "precision", "family", "impl"), ATTENTION_KERNELS,
                         ids=[r[1][:60] for r in ATTENTION_KERNELS])
def test_attention_kernels(arch, name, tensor_core, precision, family, impl):
    kc = classify_kernel(name, arch)
    assert (kc.op, kc.tensor_core, kc.precision, kc.family) == (ATTENTION, tensor_core, precision, family)
    assert kc.attention_impl == impl
    assert not kc.memory_bound


def test_flash_in_a_kv_cache_write_is_not_attention():
    # tracelens-b200-eager_trace: vLLM's KV-cache write for the flash backend is a copy
    kc = classify_kernel("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCache"
                         "DataType)1>(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, "
                         "long const*, long, long, long, long, long, int, int, int, float const*, float const*)", 10)
    assert (kc.op, kc.family, kc.attention_impl) == (ELEMENTWISE, "copy", None)


# --- memory-bound kernels (issue #10, item 6) -----------------------------------------------------------------
# (arch, name, op, family)
MEMORY_BOUND = [
    # fixtures/traces/gpt_eager_bf16 (H200): the eager GPT-2 step's non-GEMM kernels
    (9, "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float, "
        "float const*, float const*, float const*, float*, float*, float*)", NM, "aten"),
    (9, "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float, 32u, 32u, 256u, "
        "false, true, false>(long, long, float const*, float const*, float const*, float const*, float*, float*)",
     NM, "aten"),
    (9, "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, at::"
        "native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
     SM, "aten"),  # the loss's log-softmax: softmax too (telling it from attention's is the trace analysis' job)
    (9, "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::"
        "BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::"
        "{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 8> >(…", RD, "aten"),
    (9, "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
        "float*, float const*, long const*, float const*, bool, long, long, long, long)", RD, "aten"),
    (9, "void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
        "BFloat16)#1}, std::array<char*, 2ul> >(…", EW, "aten"),
    (9, "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::Fused"
        "OptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::"
        "native::ADAM_MODE)1, false>, float const*, double, double, double, double, double, bool, float const*, "
        "float const*>(at::…", EW, "aten"),
    # copies, casts and index kernels: elementwise, family "copy"
    (9, "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIterator"
        "Base&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::Tensor"
        "IteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul>)", EW, "copy"),
    (9, "void at::native::(anonymous namespace)::CatArrayBatchedCopy_vectorized<at::native::(anonymous namespace)::"
        "OpaqueType<2u>, unsigned int, 3, 128, 1, 16, 8>(char*, at::native::(anonymous namespace)::CatArrInput…",
     EW, "copy"),
    (9, "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
     EW, "copy"),
    # fixtures/traces/gpt_compiled (H200, torch.compile): Inductor's fusions
    (9, "triton_per_fused__to_copy_add_native_layer_norm_backward_view_8", NM, "triton"),
    (9, "triton_poi_fused_gelu_gelu_backward_view_6", EW, "triton"),
    (9, "triton_red_fused_sum_3", RD, "triton"),
    # deepseek-profile_data-train (H800): apex-style layer norm, DeepSeek's fp8 casts and reductions
    (9, "void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_"
        "bfloat16, float, unsigned int, 7168u, 1u, 1u, 4u, 16u, layer_norm::Kernel_traits_base<7168u, …",
     NM, "apex"),
    (9, "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*, "
        "int, unsigned char*, float*, int, int, int, int, bool, float, __nv_fp8_interpretation_t)", EW, "generic"),
    (9, "void cuda::reduce_fused_impl<__nv_bfloat16, false, false>(int4 const*, float const*, int const*, int4*, int, "
        "int, int, __nv_fp8_interpretation_t, float const*, float const*)", RD, "generic"),
    (9, "_copy_tensor_kernel", EW, "copy"),
    # tracelens-b200-eager_trace (B200, vLLM)
    (10, "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::fused_add_rms_"
         "norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, float, int, int)",
     NM, "vllm"),
    (10, "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::"
         "BFloat16 const*, int, long, long, long, int, int, int)", EW, "vllm"),
    # tracelens-mi300-resnet_act_checkpoint (MI300X): batch norm, MIOpen's layout transposes and tensor ops
    (9, "void at::native::batch_norm_backward_kernel<c10::BFloat16, c10::BFloat16, float, int>(at::GenericPacked"
        "TensorAccessor<c10::BFloat16 const, 3ul, at::DefaultPtrTraits, int>, …", NM, "aten"),
    (9, "batched_transpose_32x32_half", EW, "copy"),
    (9, "transpose_NCHW2CNHW_V2_2D_WG_off64", EW, "copy"),
    (9, "SubTensorOpWithScalar1d", EW, "generic"),
    (9, "void at::native::(anonymous namespace)::max_pool_backward_nchw<c10::BFloat16, float>(c10::BFloat16 const*, "
        "long const*, int, long, long, long, int, int, int, int, int, int, int, int, int, int, c10::BFloat16*)",
     RD, "aten"),
    # tbplugin-resnet50_num_workers_0 (V100): cuDNN batch norm and PyTorch's warp softmax
    (7, "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float, cudnn"
        "TensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, "
        "float*, float*, float const*, float const*, float)", NM, "cudnn"),
    (7, "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, int, "
        "int, int)", SM, "generic"),
    # hta-trace_diff-control (A100): cub's reduce-by-key and PyTorch's index kernels
    (8, "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*, cub::ConstantInputIterator<int, "
        "int>, int*, int*, cub::Equality, cub::Sum, int>::PtxReduceByKeyPolicy, …", RD, "cub"),
    (8, "void at::native::index_elementwise_kernel<128, 4, at::native::index_copy_kernel_impl<at::native::Opaque"
        "Type<4> >(at::TensorIterator&, long, long, long)::{lambda(int)#1}>(int, at::native::index_copy_kernel_impl<"
        "at::native::OpaqueType<4> >(at::TensorIterator&, long, long, long)::{lambda(int)#1})", EW, "copy"),
]

NOT_MEMORY_BOUND = [  # what the name does not tell, and GEMM plumbing, stay elementwise/other
    # deepseek-profile_data-train: top-k selection (a MoE router's: kernel_group's moe-routing family)
    (9, "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, "
        "unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<"
        "float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, float*)"),
    # hta-trace_diff-control: radix sort; tbplugin-resnet50: cuDNN's split-K offset setup
    (8, "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, "
        "int, int, int>(int*, int*, int*, int const*, long*, long const*, int*, int const*, int, int, int)"),
    (7, "cask_cudnn::computeWgradSplitKOffsetsKernel(cask_cudnn::ComputeSplitKOffsetsParams)"),
    # fixtures/traces/gpt_eager_bf16: cuBLASLt's split-K reduction is part of the GEMM, not a model reduction
    (9, "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, "
        "__nv_bfloat16, __nv_bfloat16, true, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*…"),
]


@pytest.mark.parametrize(("arch", "name", "op", "family"), MEMORY_BOUND, ids=[r[1][:60] for r in MEMORY_BOUND])
def test_memory_bound_kernels(arch, name, op, family):
    kc = classify_kernel(name, arch)
    assert (kc.op, kc.family) == (op, family)
    assert kc.memory_bound and not kc.tensor_core and kc.precision is None and kc.attention_impl is None


@pytest.mark.parametrize(("arch", "name"), NOT_MEMORY_BOUND, ids=[r[1][:60] for r in NOT_MEMORY_BOUND])
def test_untold_kernels_stay_other(arch, name):
    kc = classify_kernel(name, arch)
    assert kc.op == OTHER and not kc.memory_bound


def test_math_attention_pieces_are_matmul_and_softmax():
    """The unfused "math" SDPA path runs a bmm, a softmax and a bmm: classified matmul and softmax here (the trace
    analysis recognises the pattern)."""
    assert classify_kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_nn", 8).op == MATMUL
    assert classify_kernel("void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, "
                           "10, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, "
                           "int, bool)", 8).op == SOFTMAX


# --- whole traces: the full names as recorded --------------------------------------------------------------------

def _kernel_times(path) -> tuple[int | None, dict[str, float]]:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        data = json.load(fh)
    events = data if isinstance(data, list) else data.get("traceEvents", [])
    props = [] if isinstance(data, list) else data.get("deviceProperties") or []
    times: dict[str, float] = {}
    for e in events:
        if str(e.get("cat", "")).lower() == "kernel" and "name" in e:
            times[e["name"]] = times.get(e["name"], 0.0) + float(e.get("dur") or 0)
    return (props[0].get("computeMajor") if props else None), times


def test_gpt_fixture_attention_and_memory_bound_kernels(fixture_traces):
    """The H200 GPT-2 fixtures: eager bf16 SDPA runs cuDNN's flash kernels, fp32 SDPA the memory-efficient ones, and
    the compiled model's Triton fusions are memory-bound; no attention kernel is read as a matmul."""
    expected = {"gpt_eager_bf16": "cudnn", "gpt_fp32": "mem_efficient", "gpt_compiled": "cudnn"}
    for scenario, impl in expected.items():
        path = fixture_traces / f"{scenario}.pt.trace.json.gz"
        if not path.exists():
            pytest.skip(f"no fixture trace {path.name}")
        arch, times = _kernel_times(path)
        classes = {name: classify_kernel(name, arch) for name in times}
        attention = {n: c for n, c in classes.items() if c.op == ATTENTION}
        assert attention and {c.attention_impl for c in attention.values()} == {impl}, attention
        assert any(c.tensor_core for c in attention.values())
        assert not any(c.op == MATMUL and ("sdpa" in n or "fmha" in n) for n, c in classes.items())
        softmax = [n for n, c in classes.items() if c.op == SOFTMAX]
        assert softmax and all("SoftMax" in n for n in softmax)  # the loss's log-softmax, not attention's
        memory = sum(t for n, t in times.items() if classes[n].memory_bound)
        assert memory > 0.05 * sum(times.values())  # 7 % in fp32 (GEMM-bound), 50 % in bf16
        if scenario == "gpt_compiled":
            triton = [c for n, c in classes.items() if n.startswith(("triton_poi_", "triton_red_", "triton_per_"))]
            assert triton and all(c.memory_bound for c in triton)


def test_deepseek_fp8_and_mi300_conv_time(public_traces):
    """DeepSeek's H800 training step: its FP8 CUTLASS grouped GEMMs are Tensor Core work (was 0.72 % of matmul time);
    the MI300X ResNet: MIOpen igemm and CK kernels are convolutions on the Matrix Cores (was 1.8 % of kernel time)."""
    from tracelint.trace import analyze_trace

    deepseek = public_traces / "deepseek-profile_data-train.json.gz"
    mi300 = public_traces / "tracelens-mi300-resnet_act_checkpoint.json.gz"
    if not deepseek.exists() or not mi300.exists():
        pytest.skip("deepseek/MI300 traces not in the corpus")

    m = analyze_trace(deepseek).metrics
    assert m["matmul_tensor_core_pct"] > 90
    assert m["matmul_time_us"] > 0.25 * m["kernel_time_us"]

    m = analyze_trace(mi300).metrics
    assert m["matmul_tensor_core_pct"] > 90
    assert m["matmul_time_us"] > 0.05 * m["kernel_time_us"]  # NCCL takes ~70 % of this trace's kernel time
    # the same, summed plainly over the trace: matmul/conv against the non-communication kernel time
    arch, times = _kernel_times(mi300)
    classes = {name: classify_kernel(name, arch) for name in times}
    compute = sum(t for n, t in times.items() if classes[n].op != COMMUNICATION)
    mm = sum(t for n, t in times.items() if classes[n].op in (MATMUL, CONV))
    assert 0.10 < mm / compute < 0.6
    assert sum(t for n, t in times.items() if classes[n].op == CONV and classes[n].tensor_core) > 0.5 * mm


# --- memory layout (TL405): (name, layout) from the traces noted ------------------------------------------------
LAYOUTS = [
    # conv_nchw_bf16 (H200, torch 2.11, cuDNN 9.19, bf16 autocast, NCHW model): cuDNN's transposes around each conv
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, (cudnnKernel"
     "DataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)",
     LAYOUT_CONVERSION),
    ("void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, __nv_bfloat16, float, true, false, (cudnnKernel"
     "DataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, __nv_bfloat16 const*, __nv_bfloat16*)",
     LAYOUT_CONVERSION),
    # tbplugin-resnet50_num_workers_0 (V100, fp32): older cuDNN's spelling
    ("void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, float "
     "const*, float*, float, float)", LAYOUT_CONVERSION),
    # tracelens-mi300-resnet_act_checkpoint (MI300X, bf16 NCHW): MIOpen's transposes for its NHWC convolutions; its
    # NCHW <-> CNHW transposes say nothing of NHWC
    ("batched_transpose_32x32_half", LAYOUT_CONVERSION),
    ("transpose_NCHW2CNHW_V2_2D_WG_off64", None),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x1_1x4x1x64_gkgs",
     CHANNELS_LAST),
    # the convolutions run NHWC in both memory formats (conv_nchw_bf16 and its channels_last twin); an xmma kernel
    # that writes NCHW (pageable_copies_fixed, fp32) reads as NCHW
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute"
     "_segment_k_off_kernel__5x_cudnn", CHANNELS_LAST),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_"
     "g1_tensor16x8x8_execute_kernel__5x_cudnn", CHANNELS_FIRST),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8>(cutla"
     "ss_tensorop_bf16_s16816fprop_optimized_bf16_256x64_32x4_nhwc_align8::Params)", CHANNELS_LAST),
    # PyTorch's batch norm and pooling: NCHW kernels in conv_nchw_bf16, channels-last ones in its twin
    ("void at::native::batch_norm_backward_kernel<c10::BFloat16, float, float, int>(torch::headeronly::detail::Generic"
     "PackedTensorAccessor<…>)", CHANNELS_FIRST),
    ("void at::native::batch_norm_collect_statistics_kernel<at::native::Var, c10::BFloat16, c10::BFloat16, float, int>"
     "(…)", CHANNELS_FIRST),
    ("void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, c10::BFloat16, float, 4>(c10"
     "::BFloat16 const*, float*, float*, float volatile*, int*, int, int, float)", CHANNELS_LAST),
    ("void at::native::(anonymous namespace)::max_pool_backward_nchw<c10::BFloat16, float, int>(c10::BFloat16 const*, "
     "long const*, int, int, int, int, int, int, int, int, int, int, int, int, int, int, c10::BFloat16*)",
     CHANNELS_FIRST),
    ("void at::native::(anonymous namespace)::max_pool_forward_nhwc<c10::BFloat16, int>(c10::BFloat16 const*, int)",
     CHANNELS_LAST),
    # cuDNN's own NCHW kernels (pageable_copies_fixed, fp32; conv_nchw_bf16)
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*)",
     CHANNELS_FIRST),
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, __nv_bfloat16>(void*, void const*, float, int, int)",
     CHANNELS_FIRST),
    # what says no layout
    ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, "
     "3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)", None),
    ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float)", None),
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT", None),
]


@pytest.mark.parametrize(("name", "layout"), LAYOUTS, ids=[n[:60] for n, _ in LAYOUTS])
def test_memory_layout(name, layout):
    assert memory_layout(name) == layout


def test_conv_fixtures_layouts(fixture_traces):
    """The bf16 ResNet-50 pair: layout conversions and NCHW batch-norm kernels in the NCHW run only; its convolutions
    are NHWC in both runs."""
    def layouts(scenario):
        path = fixture_traces / f"{scenario}.pt.trace.json.gz"
        if not path.exists():
            pytest.skip(f"{scenario} not recorded")
        arch, names = _kernel_names(path)
        found: dict = {}
        for name in names:
            key = "conv" if classify_kernel(name, arch).op == CONV else "other"
            found.setdefault((key, memory_layout(name)), set()).add(name)
        return found

    nchw, channels_last = layouts("conv_nchw_bf16"), layouts("conv_nchw_bf16_fixed")
    assert ("other", LAYOUT_CONVERSION) in nchw and ("other", LAYOUT_CONVERSION) not in channels_last
    assert any("batch_norm" in n for n in nchw[("other", CHANNELS_FIRST)])
    assert not any("batch_norm" in n for n in channels_last.get(("other", CHANNELS_FIRST), ()))
    for found in (nchw, channels_last):
        assert ("conv", CHANNELS_FIRST) not in found and ("conv", CHANNELS_LAST) in found
