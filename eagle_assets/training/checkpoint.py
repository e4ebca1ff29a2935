"""The kept checkpoint: speculators' best epoch copied into a content-named folder, and its checks.

speculators saves each epoch as ``config.json`` (an ``Eagle3SpeculatorConfig`` with
``speculators_model_type: eagle3``, the draft decoder config, the auxiliary layer ids and the verifier
path) and ``model.safetensors`` (draft weights, the frozen embedding, and the ``d2t``/``t2d`` vocab maps).
That pair is what vLLM loads as an ``eagle3`` speculator. The kept folder holds the pair plus
``training.json`` (settings, data and metrics) and ``lineage.json``; its name and data version are a
hash of the pair, so an identical checkpoint is one folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from eagle_assets.storage import combined_hash, file_sha256, write_json
from eagle_assets.training.data_dir import FeatureManifest

MODEL_FILES = ("config.json", "model.safetensors")
# Resume state stays in the run folder; everything else speculators wrote for the epoch is kept.
TRAINING_STATE_FILES = ("optimizer_state_dict.pt", "scheduler_state_dict.pt", "training_state.json")


def checkpoint_hash(folder: Path) -> str:
    """The content hash of a checkpoint: its config and weights."""
    return combined_hash(f"{name}:{file_sha256(Path(folder) / name)}" for name in MODEL_FILES)


def keep_checkpoint(best_dir: Path, out_root: Path, extra_json: dict[str, dict],
                    finish: Callable[[Path], object] | None = None) -> tuple[Path, str]:
    """Copy the checkpoint files of ``best_dir`` and write ``extra_json`` files into ``out_root/<hash>``;
    ``finish`` (e.g. the lineage writer) runs on the complete folder before it takes its final name."""
    digest = checkpoint_hash(best_dir)
    final = Path(out_root) / digest[:16]
    out_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=out_root))
    try:
        for path in Path(best_dir).iterdir():
            if path.is_file() and path.name not in TRAINING_STATE_FILES:
                shutil.copy2(path, tmp / path.name)
        for name, content in extra_json.items():
            write_json(content, tmp / name)
        if finish is not None:
            finish(tmp)
        if final.exists():  # the same weights kept before: refresh the metadata files
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, digest


def load_with_speculators(folder: Path):
    """Load the checkpoint as speculators would for fine-tuning or conversion (verifier weights too)."""
    from speculators.model import SpeculatorModel

    return SpeculatorModel.from_pretrained(str(folder))


def _vocab_maps(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    from safetensors import safe_open

    with safe_open(str(Path(folder) / "model.safetensors"), framework="np") as fh:
        keys = set(fh.keys())
        if not {"d2t", "t2d"} <= keys:
            raise KeyError(f"{folder}/model.safetensors has no d2t/t2d vocab maps (keys: {sorted(keys)[:8]}...)")
        return fh.get_tensor("d2t"), fh.get_tensor("t2d")


def verifier_facts(backend, model_path) -> dict[str, int]:
    """What the checks compare, read through the verifier's backend (which knows nested text configs)."""
    return {"hidden_size": backend.hidden_size(model_path), "num_hidden_layers": backend.num_layers(model_path),
            "vocab_size": backend.vocab_size(model_path)}


def verifier_mismatches(folder: Path, verifier: dict[str, int], manifest: FeatureManifest) -> list[str]:
    """Every way the checkpoint disagrees with the verifier (:func:`verifier_facts`) and the captured
    features' manifest; empty when they all agree."""
    config = json.loads((Path(folder) / "config.json").read_text())
    layer = config.get("transformer_layer_config", {})
    problems = []
    if config.get("speculators_model_type") != "eagle3":
        problems.append(f"speculators_model_type is {config.get('speculators_model_type')!r}, not 'eagle3'")
    sizes = {"draft": layer.get("hidden_size"), "verifier": verifier["hidden_size"], "features": manifest.hidden_size}
    if len(set(sizes.values())) != 1:
        problems.append(f"hidden sizes differ: {sizes}")
    n_layers = verifier["num_hidden_layers"]
    aux = config.get("eagle_aux_hidden_state_layer_ids")
    if aux != manifest.aux_layer_ids:
        problems.append(f"aux layer ids {aux} differ from the captured features' {manifest.aux_layer_ids}")
    if aux and not all(0 <= i <= n_layers for i in aux):
        problems.append(f"aux layer ids {aux} are outside the verifier's 0..{n_layers}")
    if manifest.layer_ids and manifest.layer_ids[-1] != n_layers:
        problems.append(f"features' final layer {manifest.layer_ids[-1]} is not the verifier's last ({n_layers})")
    d2t, t2d = _vocab_maps(folder)
    draft_vocab = config.get("draft_vocab_size")
    if d2t.shape != (draft_vocab,):
        problems.append(f"d2t has shape {list(d2t.shape)}, draft_vocab_size is {draft_vocab}")
    if t2d.shape != (verifier["vocab_size"],):
        problems.append(f"t2d has shape {list(t2d.shape)}, the verifier's vocab_size is {verifier['vocab_size']}")
    elif d2t.ndim == 1:
        chosen = np.nonzero(t2d)[0]
        if len(chosen) != len(d2t) or not np.array_equal(chosen, np.arange(len(d2t)) + d2t):
            problems.append("d2t and t2d name different verifier tokens (d2t[i] + i must list t2d's true ids)")
    return problems
