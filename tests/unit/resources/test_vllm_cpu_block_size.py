"""The CPU attention backends' block size on an MLA target, fixed by the general plugin vLLM loads
(resources/vllm_cpu_block_size.py)."""

from __future__ import annotations


def test_cpu_attention_shares_block_size_16_with_mla_once_the_plugin_loaded():
    """The draft (CPU_ATTN) and an MLA target (CPU_MLA) need one block size; vLLM loads our fix as a
    general plugin (resources/vllm_cpu_block_size.py) in each of its processes."""
    from vllm.plugins import load_general_plugins
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.attention.backends.mla.cpu_mla import CPUMLABackend
    from vllm.v1.worker.utils import select_common_block_size

    load_general_plugins()
    assert select_common_block_size(16, [CPUMLABackend, CPUAttentionBackend]) == 16
    assert select_common_block_size(128, [CPUAttentionBackend]) == 128
