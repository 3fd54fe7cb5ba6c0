"""The kernel-name classifier, on a table of real kernel names per architecture.

Names come from the public trace corpus (file noted), from the H100/H200 fixtures (fixtures/traces), from the
kernel names measured on an H200 (torch 2.11, CUDA 13), and a few from public profiler output for generations the
corpus lacks (noted).
"""
from __future__ import annotations

import gzip
import json

import pytest

from tracelint.trace.kernels import ATTENTION, COMMUNICATION, CONV, MATMUL, OTHER, classify_kernel

MM, CV, AT, CO, OT = MATMUL, CONV, ATTENTION, COMMUNICATION, OTHER

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
        "float)", OT, False, None),
    (7, "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", OT, False, None),
    (7, "void nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>(int, int, int, int, float "
        "const*, float*, float, float)", OT, False, None),
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
        "int, int, unsigned char*, bool)", OT, False, None),
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
        "cudnn::engines_precompiled::nchw2nhwc_params_t<float>, float const*, float*)", OT, False, None),
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
        ">(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", OT, False, None),
]

TRITON = [  # hta-triton_example (A100) and Inductor's naming scheme
    (8, "triton_poi_fused_add_cos_sin_0", OT, False, None),
    (8, "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", OT, False, None),
    (8, "triton_per_fused_native_layer_norm_2", OT, False, None),
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
                assert kc.op == OTHER, name
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
