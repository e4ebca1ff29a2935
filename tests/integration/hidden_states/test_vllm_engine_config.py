"""The vLLM extraction backend's engine configuration, checked by vLLM's own config builder (the files the
real connector writes: test_vllm_extraction.py)."""

from __future__ import annotations

from eagle_assets.backends import ExtractionRequest
from eagle_assets.plugins.vllm_backend import VLLM_BACKEND


def test_vllm_engine_config_resolves_the_extraction_setup(tiny_verifier, tmp_path):
    """vLLM builds its full engine config from our settings, with our connector loaded by module path."""
    from vllm.engine.arg_utils import EngineArgs

    request = ExtractionRequest([("a", list(range(100)))], [1, 2, 3, 4], batch_tokens=64)
    settings = VLLM_BACKEND.engine_settings(tiny_verifier, request)
    assert settings.max_model_len == 101 and settings.max_num_batched_tokens == 101
    config = EngineArgs(**settings.engine_kwargs(tiny_verifier, [1, 2, 3, 4], tmp_path)).create_engine_config()
    assert config.speculative_config.method == "extract_hidden_states"
    assert config.speculative_config.draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids == [1, 2, 3, 4]
    assert config.kv_transfer_config.kv_connector == "CPUSafeHiddenStatesConnector"
    assert config.kv_transfer_config.kv_connector_module_path == "eagle_assets.hidden_states.vllm_connector"
    assert config.kv_transfer_config.kv_connector_extra_config == {"shared_storage_path": str(tmp_path)}
    assert not config.cache_config.enable_prefix_caching and not config.scheduler_config.enable_chunked_prefill
