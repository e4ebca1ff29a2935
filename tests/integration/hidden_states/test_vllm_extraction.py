"""Hidden states extracted by vLLM for real (``extract_hidden_states`` + our CPU-safe connector).

One vLLM extraction is killed with SIGKILL part-way and the ``hidden_states`` asset then completes it
with backend ``vllm`` (two engine starts on the tiny Qwen3 verifier, shared by the tests below
through a module fixture); tiny-kimi (MLA + MoE inside the ``kimi_k25`` wrapper) gets one engine,
driven directly so the connector's own files can be inspected, on rendered conversations and on a reply
of the session's tiny-kimi server.
"""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest
import torch

from eagle_assets.backends import ExtractionRequest
from eagle_assets.hidden_states.files import load_sample
from eagle_assets.plugins.transformers_backend import TRANSFORMERS_BACKEND
from eagle_assets.tiny_verifier.embedded import embedded_verifier
from tests.helpers.features import folder, index_path, manifest

# The same computation by two implementations (vLLM's kernels in bf16, transformers in fp32, both
# stored as bf16): per captured layer, the mean cosine over tokens and the worst token's (bf16
# rounding accumulates along a few hundred tokens of attention).
MIN_MEAN_COSINE = 0.999
MIN_TOKEN_COSINE = 0.995
ENGINE_TIMEOUT_S = 900


def assert_equivalent(ours: torch.Tensor, reference: torch.Tensor, name: str) -> None:
    """Two [seq, layers, H] captures agree within bf16 tolerance, layer by layer."""
    cosine = torch.nn.functional.cosine_similarity(ours.float(), reference.float(), dim=-1)
    mean, worst = cosine.mean(dim=0), cosine.min(dim=0).values
    assert bool((mean >= MIN_MEAN_COSINE).all()) and bool((worst >= MIN_TOKEN_COSINE).all()), (
        f"{name}: per-layer mean cosine {mean.tolist()}, worst token {worst.tolist()}"
    )


def transformers_states(model_path, sequences, layer_ids) -> dict:
    out = {}
    request = ExtractionRequest(sequences, layer_ids, device="cpu")
    TRANSFORMERS_BACKEND.extract(model_path, request, lambda s: out.__setitem__(s.key, s.hidden_states.clone()))
    return out


@pytest.fixture(scope="module")
def killed_then_resumed(vllm_extraction_run):
    """A vLLM extraction SIGKILLed (its whole process group, engine core included) once a few files
    are in place, then the asset run that completes it (tests/helpers/features.py; tests/conftest.py
    runs it in the background)."""
    return vllm_extraction_run.value()


def test_resume_after_kill_during_vllm_extraction_duplicates_nothing(killed_then_resumed):
    run = killed_then_resumed
    storage = run["storage"]
    assert run["success"]
    meta = run["metadata"]
    distinct = len({tuple(ids) for ids in run["sequences"]["input_ids"].to_pylist()})
    reused = len(run["finished_before"])
    assert 0 < reused < distinct
    assert meta["files_reused"] == reused and meta["files_written"] == distinct - reused
    tensors = folder(storage) / "tensors"
    assert len(list(tensors.glob("*.safetensors"))) == distinct  # one file per distinct row, nothing twice
    assert {n: (tensors / n).stat().st_mtime_ns for n in run["finished_before"]} == run["finished_before"]
    # The killed engine's scratch files are gone; no temporary is left anywhere in the partition.
    leftovers = [
        p for p in folder(storage).rglob("*") if p.is_file() and p.suffix not in (".safetensors", ".parquet", ".json")
    ]
    assert not leftovers and not (folder(storage) / "scratch").exists()


def test_the_asset_names_the_vllm_backend_and_its_engine(killed_then_resumed):
    meta = killed_then_resumed["metadata"]
    assert meta["backend"] == "vllm" and meta["engine_load_s"] > 0 and meta["tensor_parallel_size"] == 1
    assert manifest(killed_then_resumed["storage"])["verifier"]["backend"] == "vllm"


def test_vllm_states_match_transformers_on_the_tiny_qwen3_verifier(killed_then_resumed, tiny_verifier):
    storage = killed_then_resumed["storage"]
    index = pq.read_table(index_path(storage)).to_pylist()[:8]
    stored = {row["file"]: load_sample(folder(storage) / row["file"]) for row in index}
    layer_ids = killed_then_resumed["metadata"]["layer_ids"]
    assert layer_ids == [1, 2, 3, 4]  # aux spread + the final id n, captured before the final norm
    reference = transformers_states(tiny_verifier, [(f, s["token_ids"].tolist()) for f, s in stored.items()], layer_ids)
    for name, sample in stored.items():
        assert sample["hidden_states"].dtype == torch.bfloat16
        assert_equivalent(sample["hidden_states"], reference[name], name)


# ---- tiny-kimi: MLA + MoE inside the kimi_k25 wrapper, one engine driven directly ----------------
KIMI_CONVERSATIONS = [
    ("What is 12 + 7?", "12 plus 7 is 19.", "The answer is 19."),
    ("What is 9 * 8?", "9 times 8 is 72.\nCheck: 72 / 8 = 9.", "The answer is 72."),
    ("Say hello.", "A greeting.", "Hello!"),
]


# A question tiny-kimi answers greedily on the session's server; the states of its reply are captured too.
SERVED_QUESTION = [{"role": "user", "content": "What is 468 + 275?"}]


@pytest.fixture(scope="module")
def kimi_capture(tiny_kimi, kimi_server_config, kimi_server_urls, tmp_path_factory):
    """Rendered tiny-kimi conversations, and one greedy reply of the session's tiny-kimi server (its prompt
    and completion token ids as served), captured by vLLM through the kimi backend's engine settings;
    the engine stays up for the module's tests and the connector's own files stay in its scratch folder
    until each test reads them."""
    import httpx

    from eagle_assets.hidden_states.vllm_engine import HiddenStatesEngine
    from eagle_assets.plugins.kimi_backend import KIMI_BACKEND

    tokenizer = KIMI_BACKEND.load_tokenizer(tiny_kimi)
    stops = KIMI_BACKEND.stop_token_ids(tokenizer, tiny_kimi)
    sequences = []
    for i, (question, reasoning, answer) in enumerate(KIMI_CONVERSATIONS):
        prompt, completion = KIMI_BACKEND.render(
            tokenizer, [{"role": "user", "content": question}], reasoning, answer, stops
        )
        sequences.append((f"conv-{i}", prompt + completion))
    body = {
        "model": kimi_server_config.resolved_model(),
        "messages": SERVED_QUESTION,
        "max_tokens": 512,
        "temperature": 0.0,
        "return_token_ids": True,
    }
    reply = httpx.post(f"{kimi_server_urls[0]}/chat/completions", json=body, timeout=300)
    reply.raise_for_status()
    served = {"prompt": reply.json()["prompt_token_ids"], "completion": reply.json()["choices"][0]["token_ids"]}
    everything = [*sequences, ("served", served["prompt"] + served["completion"])]
    layer_ids = KIMI_BACKEND.capture_layer_ids(tiny_kimi)
    # Engine settings as the kimi demo's hidden_states gets them (the embedded verifier's eager engine).
    engine_args = embedded_verifier("tiny-kimi").engine_args()
    request = ExtractionRequest(everything, layer_ids, device="cpu", engine_args=engine_args)
    scratch = tmp_path_factory.mktemp("kimi-capture") / "scratch"
    with HiddenStatesEngine(tiny_kimi, layer_ids, scratch, KIMI_BACKEND.engine_settings(tiny_kimi, request)) as engine:
        files = {key: (ids, path) for key, ids, path in engine.capture(everything)}
        served["file"] = files.pop("served")
        yield {"files": files, "layer_ids": layer_ids, "sequences": sequences, "scratch": scratch, "served": served}


def test_vllm_states_match_transformers_on_tiny_kimi(kimi_capture, tiny_kimi):
    from eagle_assets.plugins.kimi_backend import KIMI_BACKEND

    layer_ids = kimi_capture["layer_ids"]
    n = KIMI_BACKEND.num_layers(tiny_kimi)
    assert layer_ids == [*KIMI_BACKEND.default_aux_layer_ids(n), n]  # the spread aux ids + final pre-norm
    reference = transformers_states(tiny_kimi, kimi_capture["sequences"], layer_ids)
    hidden = KIMI_BACKEND.hidden_size(tiny_kimi)
    for key, (ids, path) in kimi_capture["files"].items():
        sample = KIMI_BACKEND.read_connector_file(path, key, ids, len(layer_ids), hidden)
        assert sample.hidden_states.dtype == torch.bfloat16 and sample.token_ids.tolist() == list(ids)
        assert_equivalent(sample.hidden_states, reference[key], key)


def test_real_connector_files_are_checked_against_their_request(kimi_capture, tiny_kimi):
    """The files vLLM's connector protocol leaves (``<req>.safetensors`` + ``.lock``) are read after
    the lock, refused with the fix named when they do not fit the request, and removed after."""
    from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import cleanup_hidden_states

    from eagle_assets.plugins.kimi_backend import KIMI_BACKEND

    key, (ids, path) = next(iter(kimi_capture["files"].items()))
    layers, hidden = len(kimi_capture["layer_ids"]), KIMI_BACKEND.hidden_size(tiny_kimi)
    assert os.path.exists(path + ".lock") and os.path.dirname(path) == str(kimi_capture["scratch"])
    with pytest.raises(ValueError, match="token_ids differ from the request's input_ids"):
        KIMI_BACKEND.read_connector_file(path, key, [*ids[:-1], ids[-1] + 1], layers, hidden)
    with pytest.raises(ValueError, match="check eagle_aux_hidden_state_layer_ids"):
        KIMI_BACKEND.read_connector_file(path, key, ids, layers - 1, hidden)
    assert KIMI_BACKEND.read_connector_file(path, key, ids, layers, hidden).hidden_states.shape == (
        len(ids),
        layers,
        hidden,
    )
    cleanup_hidden_states(path)
    assert not os.path.exists(path) and not os.path.exists(path + ".lock")


def test_kimi_backend_states_predict_the_served_greedy_tokens(kimi_capture, tiny_kimi):
    """The kimi backend's final pre-norm state of a served reply, through the checkpoint's norm and LM head,
    predicts the tokens vLLM decoded greedily: extraction and serving read the same nested checkpoint
    the same way."""
    from safetensors import safe_open
    from transformers import AutoConfig

    from eagle_assets.plugins.kimi_backend import KIMI_BACKEND

    prompt, completion = kimi_capture["served"]["prompt"], kimi_capture["served"]["completion"]
    ids, path = kimi_capture["served"]["file"]
    layers, hidden = len(kimi_capture["layer_ids"]), KIMI_BACKEND.hidden_size(tiny_kimi)
    states = KIMI_BACKEND.read_connector_file(path, "served", ids, layers, hidden).hidden_states[:, -1].float()
    with safe_open(str(tiny_kimi / "model.safetensors"), "pt") as fh:
        norm = fh.get_tensor("language_model.model.norm.weight")
        head = fh.get_tensor("language_model.lm_head.weight")
    eps = AutoConfig.from_pretrained(tiny_kimi).text_config.rms_norm_eps
    final = states[len(prompt) - 1 : -1]  # the states that predicted each completion token
    normed = final * torch.rsqrt(final.pow(2).mean(-1, keepdim=True) + eps) * norm
    predicted = (normed @ head.T).argmax(-1).tolist()
    agreement = sum(p == t for p, t in zip(predicted, completion)) / len(completion)
    assert agreement >= 0.95, f"the extracted states' greedy choice matches vLLM's on {agreement:.0%} of tokens"
