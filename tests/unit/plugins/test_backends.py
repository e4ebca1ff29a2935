"""Verifier backends: configuration, layer ids, weight names, extraction plumbing, vLLM and Kimi."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import save_file

from eagle_assets.backends import ExtractionRequest, spread_layer_ids
from eagle_assets.plugin_manager import verifier_backend, verifier_backends
from eagle_assets.plugins.kimi_backend import KIMI_BACKEND
from eagle_assets.plugins.transformers_backend import TRANSFORMERS_BACKEND
from eagle_assets.plugins.transformers_extraction import bucket_batches
from eagle_assets.plugins.vllm_backend import VLLM_BACKEND
from eagle_assets.resources import Verifier
from tests.helpers.patching import shadow


def test_builtin_backends_are_registered_through_the_hook():
    assert {"transformers", "vllm", "kimi"} <= set(verifier_backends())
    assert verifier_backend("kimi").reasoning_parser == "kimi_k2"
    assert verifier_backend("transformers").reasoning_parser == "qwen3"


@pytest.mark.parametrize(
    ("layers", "expected"),
    [(61, [2, 30, 58]), (32, [2, 16, 29]), (36, [2, 18, 33]), (6, [1, 3, 5]), (4, [1, 2, 3]), (2, [1])],
)
def test_default_aux_layers_are_eagle3s_or_spread_on_tiny_models(layers, expected):
    ids = TRANSFORMERS_BACKEND.default_aux_layer_ids(layers)
    assert ids == expected and len(set(ids)) == len(ids) and all(1 <= i < layers for i in ids)


def test_spread_layer_ids_stays_inside_the_model():
    assert spread_layer_ids(1) == [] and spread_layer_ids(3) == [1, 2] and spread_layer_ids(100) == [1, 50, 99]


def test_capture_ids_end_with_the_final_layer_and_bad_ids_are_named(quick_tiny_verifier):
    assert TRANSFORMERS_BACKEND.capture_layer_ids(quick_tiny_verifier) == [1, 2, 3, 4]
    assert TRANSFORMERS_BACKEND.capture_layer_ids(quick_tiny_verifier, [0, 3]) == [0, 3, 4]
    with pytest.raises(ValueError, match=r"aux_layer_ids \[2, 4\] are invalid for a verifier with 4 layers"):
        TRANSFORMERS_BACKEND.capture_layer_ids(quick_tiny_verifier, [2, 4])
    with pytest.raises(ValueError, match="distinct"):
        TRANSFORMERS_BACKEND.capture_layer_ids(quick_tiny_verifier, [1, 1])


def test_transformers_backend_describes_the_tiny_verifier(quick_tiny_verifier):
    info = TRANSFORMERS_BACKEND.describe(quick_tiny_verifier)
    config = json.loads((quick_tiny_verifier / "config.json").read_text())
    assert info["num_layers"] == config["num_hidden_layers"] and info["hidden_size"] == config["hidden_size"]
    assert info["vocab_size"] == config["vocab_size"]
    assert info["embedding_weight"] == "model.embed_tokens.weight" and info["lm_head_weight"] == "lm_head.weight"
    assert len(info["identity"]) == 16
    tokenizer = TRANSFORMERS_BACKEND.load_tokenizer(quick_tiny_verifier)
    assert "<think>" in tokenizer.chat_template
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in TRANSFORMERS_BACKEND.stop_token_ids(
        tokenizer, quick_tiny_verifier
    )


def test_verifier_identity_follows_the_files(quick_tiny_verifier, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(quick_tiny_verifier, copy)
    assert TRANSFORMERS_BACKEND.identity(copy) == TRANSFORMERS_BACKEND.identity(quick_tiny_verifier)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    assert TRANSFORMERS_BACKEND.identity(copy) != TRANSFORMERS_BACKEND.identity(quick_tiny_verifier)


def test_render_places_reasoning_where_the_template_expects_it(quick_tiny_verifier):
    tokenizer = TRANSFORMERS_BACKEND.load_tokenizer(quick_tiny_verifier)
    stops = TRANSFORMERS_BACKEND.stop_token_ids(tokenizer, quick_tiny_verifier)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    prompt, completion = TRANSFORMERS_BACKEND.render(tokenizer, messages, "2 plus 3 is 5.", "The answer is 5.", stops)
    assert tokenizer.decode(prompt).endswith("<|im_start|>assistant\n<think>\n")
    # The stop token ends the completion; the template's trailing newline is never generated.
    assert tokenizer.decode(completion) == "2 plus 3 is 5.\n</think>\n\nThe answer is 5.<|im_end|>"


def test_render_with_thinking_off_matches_what_the_server_was_asked(quick_tiny_verifier):
    # A sample captured with chat_template_kwargs {enable_thinking: false} (an instant-mode sampling variant):
    # the template closes an empty thinking block in the prompt, so the local render must be given the switch.
    tokenizer = TRANSFORMERS_BACKEND.load_tokenizer(quick_tiny_verifier)
    stops = TRANSFORMERS_BACKEND.stop_token_ids(tokenizer, quick_tiny_verifier)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    prompt, completion = TRANSFORMERS_BACKEND.render(
        tokenizer, messages, None, "The answer is 5.", stops, {"enable_thinking": False}
    )
    assert tokenizer.decode(prompt).endswith("<think>\n\n</think>\n\n")
    assert tokenizer.decode(completion) == "The answer is 5.<|im_end|>"


def test_buckets_respect_the_token_budget_and_cover_every_row():
    lengths = [5, 300, 40, 41, 1000, 7, 7, 299]
    batches = bucket_batches(lengths, batch_tokens=600)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert lengths[batch[0]] == longest and (len(batch) * longest <= 600 or len(batch) == 1)


def test_extraction_hooks_only_the_captured_layers_and_removes_them(quick_tiny_verifier):
    from eagle_assets.plugins.transformers_extraction import HiddenStateExtractor

    model = TRANSFORMERS_BACKEND.load_model(quick_tiny_verifier, "cpu")
    extractor = HiddenStateExtractor(model, 4, model.config.hidden_size, [1, 4], batch_tokens=64)
    seen = []

    def sink(sample):
        seen.append((sample.key, tuple(sample.hidden_states.shape), sample.hidden_states.dtype))

    extractor.run([("a", [1, 2, 3]), ("b", list(range(10, 40)))], sink)
    assert sorted(seen) == [
        ("a", (3, 2, model.config.hidden_size), torch.bfloat16),
        ("b", (30, 2, model.config.hidden_size), torch.bfloat16),
    ]
    assert all(not layer._forward_hooks for layer in model.layers)  # our hooks are gone after the run


def test_a_slow_sink_holds_the_forward_loop_on_its_host_buffers_and_the_wait_and_drain_are_counted(
    quick_tiny_verifier,
):
    import time

    from eagle_assets.plugins.transformers_extraction import HiddenStateExtractor

    model = TRANSFORMERS_BACKEND.load_model(quick_tiny_verifier, "cpu")
    extractor = HiddenStateExtractor(model, 4, model.config.hidden_size, [1, 4], batch_tokens=8, host_buffers=1)
    seen = []

    def sink(sample):
        # Long beside a batch's forward pass even on a loaded 2-core machine (one took ~60 ms there, and 0.2 s
        # left the two waits at 0.28 s in all).
        time.sleep(0.5)
        seen.append(sample.key)

    extractor.run([(k, list(range(1, 9))) for k in "abc"], sink)  # one 8-token row per batch, one buffer
    assert sorted(seen) == ["a", "b", "c"]
    assert extractor.host_wait_s > 0.3  # the 2nd and 3rd batches waited for the 1st and 2nd writes
    assert extractor.drain_s >= 0.45  # the last batch's write, after the last forward
    extractor.run([("d", [1, 2, 3])], sink)
    assert extractor.host_wait_s < 0.1  # counted per run
    assert 0.45 <= extractor.drain_s < 1.0


def test_a_failing_sink_surfaces_its_error(quick_tiny_verifier):
    def sink(sample):
        raise OSError(f"disk full while writing {sample.key}")

    request = ExtractionRequest([("row-3", [1, 2, 3])], [1, 4], device="cpu")
    with pytest.raises(OSError, match="disk full while writing row-3"):
        TRANSFORMERS_BACKEND.extract(quick_tiny_verifier, request, sink)


# ---- Kimi-K2.5 family: a tiny config with the same nesting as the real one --------------------------
@pytest.fixture
def kimi_k25_config(tmp_path):
    """A folder with Kimi-K2.5's config nesting (61 layers, a text_config under a multimodal wrapper) and
    only the embedding, head and norm weights: what the kimi backend reads without loading a model."""
    folder = tmp_path / "kimi-k2.5-tiny"
    folder.mkdir()
    text = {
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "num_hidden_layers": 61,
        "vocab_size": 512,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "kv_lora_rank": 16,
        "q_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 3,
    }
    config = {
        "model_type": "kimi_k25",
        "architectures": ["KimiK25ForConditionalGeneration"],
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
        "text_config": text,
        "vision_config": {"model_type": "moonvit", "hidden_size": 32, "num_hidden_layers": 2},
    }
    (folder / "config.json").write_text(json.dumps(config))
    save_file(
        {
            "language_model.model.embed_tokens.weight": torch.zeros(512, 64),
            "language_model.lm_head.weight": torch.zeros(512, 64),
            "language_model.model.norm.weight": torch.ones(64),
            "vision_tower.patch_embed.embed_tokens.weight": torch.zeros(4, 32),
        },
        str(folder / "model.safetensors"),
    )
    return folder


def test_kimi_backend_reads_the_nested_text_config(kimi_k25_config):
    assert KIMI_BACKEND.num_layers(kimi_k25_config) == 61 and KIMI_BACKEND.hidden_size(kimi_k25_config) == 64
    assert KIMI_BACKEND.vocab_size(kimi_k25_config) == 512
    assert KIMI_BACKEND.capture_layer_ids(kimi_k25_config) == [2, 30, 58, 61]
    assert KIMI_BACKEND.embedding_weight_name(kimi_k25_config) == "language_model.model.embed_tokens.weight"
    assert KIMI_BACKEND.lm_head_weight_name(kimi_k25_config) == "language_model.lm_head.weight"
    assert KIMI_BACKEND.trust_remote_code and KIMI_BACKEND.reasoning_parser == "kimi_k2"
    assert KIMI_BACKEND.describe(kimi_k25_config)["num_layers"] == 61
    # The Verifier resource resolves the same through the registry.
    verifier = Verifier(model_path=str(kimi_k25_config), backend="kimi")
    assert verifier.layer_ids() == [2, 30, 58, 61]


def test_kimi_backend_names_a_plain_checkpoint(quick_tiny_verifier):
    with pytest.raises(ValueError, match="no 'text_config'"):
        KIMI_BACKEND.num_layers(quick_tiny_verifier)


def test_verifier_resource_names_a_bad_model_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"verifier.model_path .* has no config.json"):
        Verifier(model_path=str(tmp_path)).resolved_model_path()


def test_vllm_extraction_removes_its_temporary_scratch_when_the_engine_fails_to_start(tmp_path, monkeypatch):
    """No scratch_dir given: the backend's temporary folder goes even though the engine never exits."""
    import dataclasses
    import functools
    import tempfile

    from eagle_assets.plugins import vllm_backend

    class EngineThatFailsToStart:
        def __init__(self, model_path, layer_ids, scratch, settings):
            self.scratch = scratch

        def __enter__(self):
            (self.scratch / "partial.safetensors").touch()
            raise RuntimeError("engine failed to start")

        def __exit__(self, *exc):  # never called: __enter__ raised
            raise AssertionError("exited an engine that never started")

    monkeypatch.setattr(vllm_backend, "HiddenStatesEngine", EngineThatFailsToStart)
    temporary = functools.partial(tempfile.TemporaryDirectory, dir=tmp_path)
    shadow(monkeypatch, vllm_backend, "tempfile", TemporaryDirectory=temporary)
    backend = dataclasses.replace(VLLM_BACKEND, tensor_parallel_size=1)
    monkeypatch.setattr(type(backend), "hidden_size", lambda self, model_path: 8)
    with pytest.raises(RuntimeError, match="engine failed to start"):
        backend.extract("/models/m", ExtractionRequest([("a", [1, 2, 3])], [1, 2]), sink=lambda sample: None)
    assert not list(tmp_path.glob("vllm-hidden-states-*"))


def test_fp8_storage_selects_hs_connectors_fp8_connector(tmp_path):
    from hs_connectors.fp8_hidden_states_connector import FP8HiddenStatesConnector

    from eagle_assets.hidden_states import vllm_connector as connector
    from eagle_assets.hidden_states.vllm_engine import kv_transfer_config

    name = kv_transfer_config(tmp_path, "fp8")["kv_connector"]
    assert issubclass(getattr(connector, name), FP8HiddenStatesConnector)
    with pytest.raises(ValueError, match="feature_dtype 'int4' has no hidden-states connector"):
        kv_transfer_config(tmp_path, "int4")


def test_kimi_backend_extracts_through_vllm_text_only():
    assert isinstance(KIMI_BACKEND, type(VLLM_BACKEND)) and not KIMI_BACKEND.data_parallel
    assert KIMI_BACKEND.engine_extra == {"limit_mm_per_prompt": {"vision_chunk": 0}}


def test_the_verifiers_engine_args_reach_the_extraction_engine_over_the_backends_own():
    from eagle_assets.resources import Verifier

    eager = {"enforce_eager": True, "compilation_config": {"custom_ops": ["all", "-rotary_embedding"]}}
    assert Verifier(embedded="tiny-kimi").resolved_engine_args() == eager
    assert Verifier(embedded="tiny-qwen3").resolved_engine_args() == {"enforce_eager": True}
    # A production model is compiled unless its resource says otherwise.
    assert Verifier(model_path="/models/Kimi-K2.5").resolved_engine_args() == {}
    mine = Verifier(model_path="/models/m", engine_args={"gpu_memory_utilization": 0.8}).resolved_engine_args()
    assert mine == {"gpu_memory_utilization": 0.8}
    request = ExtractionRequest([("a", [1, 2, 3])], [1, 2], engine_args=eager)
    kwargs = KIMI_BACKEND.engine_settings("/models/m", request).engine_kwargs("/models/m", [1, 2], "/tmp/scratch")
    assert kwargs["enforce_eager"] is True and kwargs["compilation_config"] == eager["compilation_config"]
    assert kwargs["limit_mm_per_prompt"] == {"vision_chunk": 0}
    plain = KIMI_BACKEND.engine_settings("/models/m", ExtractionRequest([("a", [1, 2, 3])], [1, 2]))
    assert plain.engine_kwargs("/models/m", [1, 2], "/tmp/scratch")["enforce_eager"] is False


def test_loading_the_verifier_decoder_is_quiet_and_headless(quick_tiny_verifier):
    # transformers logs through its own library logger (not propagated to the root, so not caplog's).
    warnings = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    try:
        model = TRANSFORMERS_BACKEND.load_model(quick_tiny_verifier, "cpu")
    finally:
        library_logger.removeHandler(handler)
    assert not [w for w in warnings if "LOAD REPORT" in w], warnings
    assert model.get_output_embeddings() is None and not model.training
