"""The verifier folder handed to ``speculators train``: resolved for verifiers whose decoder is nested.

speculators reads the verifier's config without remote code and its embedding, LM head and final norm
by the names a plain decoder uses. Kimi-K2.5 nests its DeepSeek-V3 decoder (``text_config``, weights
under ``language_model.``, a remote-code config on the hub), so for such a verifier training gets a
small resolved folder instead: ``config.json`` = the text config as a DeepSeek-V3 (or its own family's)
config, and ``model.safetensors`` with ``model.embed_tokens.weight``, ``lm_head.weight`` and
``model.norm.weight`` only. It is named by the verifier's identity and written atomically, so it is
made once per verifier and a crash leaves no half folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from eagle_assets.backends import VerifierBackend

# Nested model types whose transformers config class has another name (Kimi-K2's is DeepSeek-V3's).
TEXT_MODEL_TYPES = {"kimi_k2": "deepseek_v3"}
ARCHITECTURES = {"deepseek_v3": "DeepseekV3ForCausalLM"}
FOLDER_PREFIX = "verifier-"  # + the verifier's identity, under the checkpoint's work folder


def training_verifier(backend: VerifierBackend, model_path: str | Path, out_root: str | Path) -> Path:
    """``model_path`` itself for a plain decoder; the resolved folder for a nested config."""
    model_path = Path(model_path)
    raw = json.loads((model_path / "config.json").read_text())
    if "text_config" not in raw:
        return model_path
    final = Path(out_root) / f"{FOLDER_PREFIX}{backend.identity(model_path)}"
    if (final / "model.safetensors").exists():
        return final
    from safetensors import safe_open
    from safetensors.torch import save_file

    text = dict(raw["text_config"])
    text["model_type"] = TEXT_MODEL_TYPES.get(text.get("model_type"), text.get("model_type"))
    if text["model_type"] in ARCHITECTURES:
        text["architectures"] = [ARCHITECTURES[text["model_type"]]]
    text.pop("quantization_config", None)  # the INT4 experts are not in the resolved folder
    embed = backend.embedding_weight_name(model_path)
    sources = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": backend.lm_head_weight_name(model_path),
        "model.norm.weight": embed.replace("embed_tokens.weight", "norm.weight"),
    }
    tensors = {}
    for name, source in sources.items():
        with safe_open(str(model_path / _shard_of(model_path, source)), framework="pt") as fh:
            tensors[name] = fh.get_tensor(source).contiguous()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(text, indent=2))
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "resolved_from.json").write_text(json.dumps({"verifier": str(model_path), "tensors": sources}, indent=2))
        os.replace(tmp, final)
    except OSError:
        if not (final / "model.safetensors").exists():  # not a concurrent twin that won the rename
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _shard_of(model_path: Path, tensor: str) -> str:
    index = model_path / "model.safetensors.index.json"
    if index.exists():
        return json.loads(index.read_text())["weight_map"][tensor]
    return "model.safetensors"
