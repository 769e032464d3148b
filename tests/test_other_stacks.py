"""Kernel names from public traces of stacks we do not run (Blackwell + TensorRT-LLM kernels,
SGLang and vLLM on ROCm, DeepSeek's EP training framework), each with where it came from and the
category it must get; and the analyser's guards for such traces: an uncovered kernel family is
named (and fails --strict), steps marked on the CPU only are attributed by launch, a training
trace says so, traces that are not one run's ranks are flagged. The traces behind the names:
TraceLens (github.com/AMD-AGI/TraceLens, tests/traces/...) and github.com/deepseek-ai/profile-data;
benchmarks/public_traces_direct_count.py counts them directly."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import run_cli

from tasks.analysis.breakdown import Classifier, analyze_ranks, analyze_trace
from tasks.analysis.step_markers import step_marker

PUBLIC_NAMES = {
    # Triton FlashAttention (PyTorch SDPA on ROCm, vLLM's ROCm Triton attention, compiled attention):
    # 13-29% of device time on public MI300X traces, landing in `other` before (issue 32).
    "attn_fwd": "attention",
    "_attn_fwd_inner": "attention",
    "kernel_unified_attention_2d": "attention",
    # named in the issue that measured these stacks (FlashInfer CuTe-DSL, cuDNN SDPA, DeepEP intranode)
    "kernel_cutlass_kernel_flashinfernormnorm_fused_add_rmsnorm_kernel_0": "norm_elementwise",
    "cudnn::fusion::lean_reduction_kernel": "attention",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)": "communication",
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*)": "communication",
    # TraceLens tests/traces/b200/eager_trace.json.gz (vLLM gpt-oss, B200, prefill)
    "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f": "moe",
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)": "communication",
    "Memcpy DtoD (Device -> Device)": "memcpy",
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, float, int, int)": "norm_elementwise",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at": "norm_elementwise",
    "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT": "gemm",
    "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext": "attention",
    "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true> >(moe::dev::finalize::KernelParams<cutlass::bfloat16_t, cutlass::bfloat16_t, 4, true>)": "moe",
    "void moe::dev::routing::routingIndicesHistogramKernel<moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true> >(moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true>)": "moe_routing",
    "void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType)2, __nv_bfloat16, 32, true>(int, int, int, int, __nv_bfloat16 const*, float const*, unsigned int*, unsigned int*, flashinfer::QuantizationSFLayout)": "quantization",
    "void moe::dev::routing::routingIndicesOffsetsKernel<moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true> >(moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true>)": "moe_routing",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>(__nv_bfloat16 const*, __nv_bfloat16 const*, unsigned char*, unsigned char*, long const*, long, long, long, long, long, int, int, int, float const*, float const*)": "attention",
    "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int)": "norm_elementwise",
    "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)": "norm_elementwise",
    "void moe::dev::routing::routingRenormalize::routingIndicesHistogramScoresKernel<moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true> >(moe::dev::routing::routingRenormalize::KernelParams<__nv_bfloat16, __nv_bfloat16, 128, false, true, true>)": "moe_routing",
    "void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*, c10::BFloat16 const*, float const*, int, long, long)": "quantization",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "_copy_page_indices_kernel": "step_prep",
    "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)": "norm_elementwise",
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, c10::BFloat16 const*, long, long, long, long, long, c10::BFloat16 const*, float, int, int)": "norm_elementwise",
    "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayR": "norm_elementwise",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned in": "norm_elementwise",
    "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0": "norm_elementwise",
    # TraceLens tests/traces/inference/sglang_decode (SGLang Qwen3-8B decode, MI300X)
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0_LBSPPA512_LBSPPB256_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT4_2_MO40_NTn1_NTA0_NTB0_NTC0_NTD": "gemm",
    "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0, 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16 const*, float, int const*, int const*, int const*, float const*,": "attention",
    "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib": "norm_elementwise",
    "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_": "norm_elementwise",
    "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i": "norm_elementwise",
    "void rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int)": "norm_elementwise",
    "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)": "attention",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)": "sampling",
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2u": "norm_elementwise",
    "void (anonymous namespace)::resolve_future_token_ids_kernel<long>(long*, long const*, unsigned long)": "step_prep",
    "void (anonymous namespace)::clamp_position_kernel<long>(long*, long const*, unsigned long)": "step_prep",
    "create_flashinfer_kv_indices_triton": "step_prep",
    "Memcpy DtoH (Device -> Host)": "memcpy",
    "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}>(int, at::native::arange_cuda_out(c10::Scalar cons": "norm_elementwise",
    # TraceLens tests/traces/inference/sglang_prefilldecode (SGLang, MI300X)
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA4_GRVWB4_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0_LBSPPA512_LBSPPB256_LBSPPM0_LPA4_LPB4_LPM0_LRVW4_LWPMn1_MIAV0_MIWT8_4_MO40_NTn1_NTA0_NTB0_NTC0_NTD4": "gemm",
    "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVSAsyncINS_36BlockFmhaBatchPrefillPipelineProblemIDF16bDF16bDF16bffDF16bhfDF16bfDF16bNS_13TileFmhaShapeINS_8sequenceIJLi128ELi128ELi32ELi128ELi32ELi128EEEENS5_IJLi4ELi1ELi1EEEENS5_IJLi32ELi32ELi1": "attention",
    "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib": "norm_elementwise",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<long>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<long>, std::array<char*, 2ul>)": "norm_elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<long, at::native::func_wrapper_t<long, at::native::MaxNanFunctor<long> >, unsigned int, long, 4, 4> >(at::native::ReduceOp<long, at::native::func_wrapper_t<long, at::native::MaxNanFunctor<long> >, unsigned int, long, 4, 4>)": "norm_elementwise",
    "Memcpy HtoD (Host -> Device)": "memcpy",
    "void at::native::elementwise_kernel_manual_unroll<128, 4, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#3}::operator()() const::{lambda(int)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::Te": "norm_elementwise",
    "compute_position_kernel": "step_prep",
    # TraceLens tests/traces/inference/vllm_decode_full (vLLM gpt-oss decode, MI300X)
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1": "moe",
    "kernel_unified_attention_3d": "attention",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT32x32x256_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA512_LBSPPB512_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD4_NTM0_NEPBS8_NLCA1_N": "gemm",
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF16bDF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1ELi3072EEEENS5_IJLi1ELi128EEEENS5_IJLi1ELi8EEEEEENS_18Rmsnorm2dFwdTraitsILb1ELb0ELb0ELb0ELNS_21Rmsnorm2dFusedAddEnumE1ELNS_": "norm_elementwise",
    "triton_poi_fused__to_copy_1": "norm_elementwise",
    "_finalize_matmul_scatter_bf16": "moe",
    "void vllm::reshape_and_cache_flash_kernel<__hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0>(__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16*, __hip_bfloat16*, long const*, long, long, long, long, long, int, int, int, float const*, float const*, int)": "attention",
    "_combined_routing_compute": "moe_routing",
    "_sum_bitmatrix_rows": "moe_routing",
    "_topk_forward": "moe_routing",
    "reduce_segments": "norm_elementwise",
    "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctorOnSelf_add<int>, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithoutCast, at::native::memory::StoreWithoutCast>(int, at::native::CUDAFunctorO": "norm_elementwise",
    "void at::native::elementwise_kernel_manual_unroll<128, 4, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::T": "norm_elementwise",
    # TraceLens tests/traces/h100 (HF Qwen1.5-0.5B, H100)
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at:": "norm_elementwise",
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)": "attention",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, ": "norm_elementwise",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned i": "norm_elementwise",
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::Tensor": "norm_elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)": "norm_elementwise",
    "Memset (Device)": "memcpy",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)": "gemm",
    "Memcpy DtoH (Device -> Pinned)": "memcpy",
    # TraceLens tests/traces/mi210/gpu_only_trace (training, MI210)
    "void at::native::batch_norm_backward_kernel<c10::BFloat16, c10::BFloat16, float, int>(at::GenericPackedTensorAccessor<c10::BFloat16 const, 3ul, at::DefaultPtrTraits, int>, at::GenericPackedTensorAccessor<c10::BFloat16 const, 3ul, at::DefaultPtrTraits, int>, at::GenericPackedTensorAccessor<c10::BFloa": "norm_elementwise",
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)": "norm_elementwise",
    "batched_transpose_16x64_pack_1x4_ediv_1x2_half": "norm_elementwise",
    "void at::native::batch_norm_collect_statistics_kernel<at::native::Var, c10::BFloat16, c10::BFloat16, float, int>(at::GenericPackedTensorAccessor<c10::BFloat16 const, 3ul, at::RestrictPtrTraits, int>, float, float, at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, int>, at::GenericPa": "norm_elementwise",
    "SubTensorOpWithCastTensor1d": "norm_elementwise",
    "igemm_wrw_gtcx2_nhwc_bf16_bx0_ex1_bt256x128x16_wt32x32x8_ws2x1_wr2x2_ta1x4x1x4_1x4x1x64_tb1x4x1x2_1x4x1x64_gkgs": "gemm",
    "SubTensorOpWithScalar1d": "norm_elementwise",
    "igemm_bwd_gtcx2_nhwc_bf16_bx0_ex1_bt32x128x32_wt16x64x4_ws1x1_wr1x1_ta1x4x1x1_1x8x1x32_tb1x4x1x4_1x8x1x32_mh_gkgs": "gemm",
    "void at::native::batch_norm_transform_input_kernel<c10::BFloat16, c10::BFloat16, float, true, int>(at::GenericPackedTensorAccessor<c10::BFloat16 const, 3ul, at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<c10::BFloat16, 3ul, at::RestrictPtrTraits, int>, at::GenericPackedTensorAccessor<s": "norm_elementwise",
    "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt32x256x32_wt16x64x4_ws1x1_wr1x2_ta1x4x1x1_1x8x1x32_tb1x4x8x1_1x8x1x32_gkgs": "gemm",
    "void at::native::(anonymous namespace)::max_pool_backward_nchw<c10::BFloat16, float>(c10::BFloat16 const*, long const*, int, long, long, long, int, int, int, int, int, int, int, int, int, int, c10::BFloat16*)": "norm_elementwise",
    "Cijk_Ailk_Bjlk_BBS_BH_Bias_HAS_SAV_UserArgs_MT128x64x32_MI32x32x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA90a_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0_LPA0_LPB0_LPM0_LRVW4_LWPMn1_MIAV0_MIWT2_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLCB1_ON": "gemm",
    "Cijk_Ailk_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT16x64x64_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA4_GRVWB4_GSUAMB_GLS0_ISA90a_IU1_K1_LBSPPA256_LBSPPB128_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLC": "gemm",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT32x32x64_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA90a_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLC": "gemm",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<c10::BFloat16, float, float, c10::BFloat16>, unsigned int, c10::BFloat16, 4, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<c10::BFloat16, float, float, c10::BFloat16>, unsigned int, c10::BFl": "norm_elementwise",
    "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::gpu_kernel_impl_nocast<at::native::mse_backward_cuda_kernel(at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16, c10::BFloat16)#1}>(at:": "norm_elementwise",
    # deepseek-ai/profile-data train.json (H800, EP64 training)
    "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, bool const*, int4 const*, float const*, int4 const*, int4 const*, int const*, int const*, dpsk::ep::internode::SourceMeta const*, int const*, int const*, int const*, int, int, int, int, void*, int, int, void**, i": "communication",
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel>(dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel::Params)": "gemm",
    "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*, int, int, int const*, int const*, int*, void*, void**, int**, int, int, int, int*, bool, int)": "communication",
    "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel::Params)": "moe",
    "void dpsk::ep::internode::dispatch<false, 8, false, 8>(int4*, float*, long*, float*, dpsk::ep::internode::SourceMeta*, int4 const*, float const*, long const*, float const*, int*, int*, int*, int*, int const*, int const*, int const*, int const*, int, int, int, int, int, bool const*, void*, int, int, ": "communication",
    "void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<192> >, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, true,": "attention",
    "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int, int const*, int*, int const*, int*, int, bool const*, int, int, int, int, int, int, int, int*, int*, int*, int*, void*, void**, int**, int, int, int*, int)": "communication",
    "void cuda::per_token_cast_to_fp8_with_channels<__nv_bfloat16, 128, false, 128, false>(__nv_bfloat16 const*, int, unsigned char*, float*, int, int, int, int, bool, float, __nv_fp8_interpretation_t)": "quantization",
    "void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, 128>, true, flash::SingleTileScheduler, flash::SeqLenTraits<true> >(flash::CollectiveMainloopFwd<Flash_fwd_kernel_traits<192, 128, 128, 12, 2, false, 1, cutlass::bfloat16_t, 128>, true, flash::Se": "attention",
    "void cuda::reduce_fused_impl<__nv_bfloat16, false, false>(int4 const*, float const*, int const*, int4*, int, int, int, __nv_fp8_interpretation_t, float const*, float const*)": "moe",
    "void cuda::per_channel_cast_and_transpose<256, 128, true, true, true, false, true>(void const*, float const*, int const*, int const*, unsigned char*, float*, int, int, float, __nv_fp8_interpretation_t)": "quantization",
    "void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 7168u, 1u, 1u, 4u, 16u, layer_norm::Kernel_traits_base<7168u, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 128u> >, false, fal": "norm_elementwise",
    "rotary_kernel": "norm_elementwise",
    "cuda::expand_to_fused_with_scales_impl(int4 const*, int4*, float const*, float*, int const*, int const*, int, int, int, int, int)": "moe",
    "void cuda::swiglu_forward_backward_with_weight_impl<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, float const*, int, int)": "norm_elementwise",
    "void cuda::batched_transpose<512, 128, 1, 1>(unsigned char const*, unsigned char*, int, int, int)": "norm_elementwise",
    "void layer_norm::ln_bwd_kernel<layer_norm::Kernel_traits<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 7168u, 1u, 1u, 8u, 8u, layer_norm::Kernel_traits_base<7168u, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 256u> >, false, fals": "norm_elementwise",
    "void cuda::cast_back_impl<__nv_fp8x2_e4m3>(void const*, void*, float const*, int, int, int, int)": "quantization",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::Tenso": "norm_elementwise",
    "void cuda::get_fused_mapping<512>(long const*, int*, int*, int*, int*, int*, int*, int const*, int, int, int)": "moe",
    "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsig": "sampling",
    "void cuda::swiglu_forward_with_weight_and_per_token_cast_to_fp8_with_channels_impl<__nv_bfloat16, true, false, 128>(unsigned char*, __nv_bfloat16 const*, int const*, float const*, int, int, float*, int const*, float, __nv_fp8_interpretation_t)": "quantization",
    "void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*, unsigned char*, int, int, int, int)": "gemm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)": "norm_elementwise",
    "void cuda::swiglu_weight_backward_with_weight_impl<__nv_bfloat16>(float*, __nv_bfloat16 const*, __nv_bfloat16 const*, int const*, int, int)": "norm_elementwise",
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)": "communication",
    "void cuda::clean_and_count_expert<512>(long const*, int*, int*, int*, int*, int*, int, int, int, int)": "moe",
    "sm90_xmma_gemm_bf16f32_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4> >(at::native::ReduceOp<c10::B": "norm_elementwise",
    "void cuda::swiglu_backward<__nv_bfloat16>(void const*, void const*, void*, int, int)": "norm_elementwise",
    "void cuda::swiglu_and_per_channel_cast_and_transpose<256, 128, false>(void const*, unsigned char*, float*, int, int, float, __nv_fp8_interpretation_t)": "quantization",
    "void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>, TrivialOffsetCalculator<2, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<2>, at::native::memory::StoreWithCast<1> >(int, at::native::CUDAFunctor_a": "norm_elementwise",
    "void at::native::_scatter_gather_elementwise_kernel<128, 4, at::native::_cuda_scatter_gather_internal_kernel<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1}>(int, at::native::_cuda_scatter_gather_internal_kernel<tr": "norm_elementwise",
    "void cuda::topk_sum_and_topk_idx<16, 64>(float const*, long*, int, int, int, int, int)": "moe_routing",
    "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_17e44f7d43distribution_elementwise_grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIffLm4EPNS_17CUDAGeneratorImplEZZZNS4_13normal_kernelIS7_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvRNS_18TensorIteratorBa": "norm_elementwise",
    "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#3}::operator()() const::{lambda(long)#1}>(int, at::native::arange_cuda_out(c10::Scalar cons": "norm_elementwise",
    "dpsk::grouped_gemm::cuda::utils::fill_tensormaps_kernel(CUtensorMap_st, CUtensorMap_st*, void*, int, long)": "gemm",
}


@pytest.mark.parametrize("name, category", PUBLIC_NAMES.items(), ids=[n[:50] for n in PUBLIC_NAMES])
def test_public_kernel_names_get_their_category(name: str, category: str) -> None:
    assert Classifier()(name) == category


def _trace(path: Path, events: list[dict], **meta: object) -> Path:
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events, **meta}).encode()))
    return path


def _kernel(name: str, ts: float, dur: float, correlation: int = -1) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts,
        "dur": dur,
        "tid": 7,
        "args": {"correlation": correlation},
    }


def test_an_uncovered_family_is_named_and_fails_strict(tmp_path: Path) -> None:
    """A made-up kernel family (the fault injected) at 30% of device time: named with its share
    and the rule file; --strict exits 2 with one line; a family under 2% is not named."""
    events = [
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "execute_context_0(0)_generation_1(1)",
            "ts": 0.0,
            "dur": 1000.0,
            "tid": 7,
        },
        _kernel("nvjet_sm90_tst_64x8", 10, 690),
        _kernel("zz_newstack_fused_thing<1>(int)", 700, 290),
        _kernel("qq_tiny_kernel", 995, 4),
    ]
    trace = _trace(tmp_path / "t.json.gz", events)
    rank = analyze_trace(trace, Classifier())
    assert [(u["family"], round(u["share_pct"])) for u in rank["uncategorised"]] == [
        ("zz_newstack_fused", 29)
    ]  # 290 of 984 µs
    out = run_cli(["analyze", str(trace)], tmp_path, timeout=120)
    assert out.returncode == 0 and "Uncategorised: `zz_newstack_fused` is 29.5%" in " ".join(out.stdout.split())
    strict = run_cli(["analyze", str(trace), "--strict"], tmp_path, timeout=120)
    assert strict.returncode == 2 and "Traceback" not in strict.stderr
    assert "rules.toml: no rule matches `zz_newstack_fused` (29.5%" in strict.stderr


def test_cpu_only_step_marks_attribute_kernels_by_their_launch(tmp_path: Path) -> None:
    """Two ProfilerStep ranges on the CPU; each step's second kernel runs after its range has
    closed (the GPU lags the CPU). By launch correlation every kernel is in its own step and the
    step's wall runs to its last kernel; by GPU start the late ones would be dropped or misfiled."""
    events = []
    for step in range(2):
        t0 = step * 1000.0
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "ts": t0, "dur": 400.0, "tid": 1}
        )
        for index, (launch, start) in enumerate(((t0 + 10, t0 + 50), (t0 + 300, t0 + 600))):
            correlation = step * 10 + index
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": launch,
                    "dur": 5.0,
                    "tid": 1,
                    "args": {"correlation": correlation},
                }
            )
            events.append(_kernel("nvjet_sm90_tst_64x8", start, 200.0, correlation))
    rank = analyze_trace(_trace(tmp_path / "cpu_marked.json.gz", events), Classifier(), marker=step_marker("auto"))
    assert rank["attributed_by"] == "launch" and rank["decode_steps"] == 2
    assert rank["device_ms_per_step"] == pytest.approx(0.4)  # both kernels, 200 µs each, in every step
    assert rank["wall_ms_per_step"] == pytest.approx(0.8)  # step start to the late kernel's end


def test_vllm_annotations_with_any_text_and_sglang_batches_mark_steps(tmp_path: Path) -> None:
    """vLLM's `execute_context_1(888_788544)_generation_0(0)` (B200 build: tokens and their
    square) is a prefill step of 888 tokens; SGLang's `step[DECODE bs=32]` a decode step of 32."""
    for name, kind, _prefill_tokens, decode in (
        ("execute_context_1(888_788544)_generation_0(0)", "prefill", 888, 0),
        ("execute_32_context_0(sq0sk0)_generation_32(sq32sk100)", "decode", 0, 32),
        ("step[DECODE bs=32]", "decode", 0, 32),
    ):
        events = [
            {"ph": "X", "cat": "gpu_user_annotation", "name": name, "ts": 0.0, "dur": 100.0, "tid": 7},
            _kernel("nvjet_sm90_tst_64x8", 10, 50),
        ]
        rank = analyze_trace(_trace(tmp_path / "s.json.gz", events), Classifier(), marker=step_marker("auto"))
        assert (rank["steps_kind"], rank["decode_steps"]) == (kind, 1), name
        assert rank["decode_tokens_per_step"] == decode
        if kind == "prefill":
            assert rank["other_steps"] == {} and rank["note"].startswith("no decode steps")


def test_a_training_trace_and_unrelated_traces_are_flagged(tmp_path: Path) -> None:
    """Backward kernels over 5% of device time: a training trace. Three files all saying rank 0
    with different world sizes: not one run's ranks; no imbalance is computed between them."""
    backward = [_kernel("void flash::FlashAttnBwd<1>(int)", 0, 60), _kernel("nvjet_sm90_tst_64x8", 70, 40)]
    paths = {
        i: _trace(tmp_path / f"t{i}.json.gz", backward, distributedInfo={"rank": 0, "world_size": 2 + i})
        for i in range(3)
    }
    result = analyze_ranks(paths)
    assert [r["rank"] for r in result["ranks"]] == [0, 1, 2]
    assert result["warnings"][0].startswith("3 traces say they are rank 0")
    assert "disagree on the world size (2, 3, 4)" in result["warnings"][1]
    assert result["imbalance"]["max_over_min"] is None
    assert result["ranks"][0]["backward_share_pct"] == pytest.approx(60.0)
