"""The kept checkpoint: speculators' best epoch copied into a content-named folder, and its checks.

speculators saves each epoch as ``config.json`` (an ``Eagle3SpeculatorConfig`` with
``speculators_model_type: eagle3``, the draft decoder config, the auxiliary layer ids and the verifier
path) and ``model.safetensors`` (draft weights, the frozen embedding, and the ``d2t``/``t2d`` vocab maps).
That pair is what vLLM loads as an ``eagle3`` speculator. The kept folder holds the pair plus
``training.json`` (settings, data and metrics) and ``lineage.json``; its name and data version are the
:func:`~eagle_assets.core.files.checkpoint_id` of the pair and the training run, and nothing rewrites it once
kept: the same run keeping the same weights again finds it kept, another run keeps a folder of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from eagle_assets.core.files import checkpoint_id, file_sha256, hash_of_model_files, model_file_hashes, write_json
from eagle_assets.core.layout import (
    LINEAGE_DIGEST_FILE,
    LINEAGE_FILE,
    MODEL_FILES,
    TRAINING_STATE_FILES,
    read_training_record,
)
from eagle_assets.eagle3_checkpoint.feature_manifest import FeatureManifest
from eagle_assets.eagle3_checkpoint.simulated import draft_proposals, load_draft


def keep_checkpoint(
    best_dir: Path,
    out_root: Path,
    training_run: str,
    extra_json: dict[str, dict],
    finish: Callable[[Path, Mapping[str, str]], object] | None = None,
) -> tuple[Path, str, object]:
    """Copy the checkpoint files of ``best_dir`` and write ``extra_json`` files into ``out_root/<id>``
    (:func:`checkpoint_id` of the files and ``training_run``); ``finish`` (e.g. the lineage writer) runs on
    the complete folder before it takes its final name, given the :func:`model_file_hashes` of the copied
    files. Returns (folder, checkpoint id, what ``finish`` returned). A folder of that name that holds
    these model files was kept by this run before: it and its records stay as they are, and the third
    item is None."""
    hashes = model_file_hashes(best_dir)
    digest = checkpoint_id(hash_of_model_files(hashes), training_run)
    final = Path(out_root) / digest[:16]
    if _kept_before(final, hashes):
        return final, digest, None
    finished = None
    out_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=out_root))
    try:
        for path in Path(best_dir).iterdir():
            if path.is_file() and path.name not in TRAINING_STATE_FILES:
                shutil.copy2(path, tmp / path.name)
        for name, content in extra_json.items():
            write_json(content, tmp / name)
        if finish is not None:
            finished = finish(tmp, hashes)
        if final.exists():  # a damaged copy (a model file changed or gone, no record): nothing can verify it
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, digest, finished


def _kept_before(folder: Path, hashes: Mapping[str, str]) -> bool:
    """Whether ``folder`` is a complete kept checkpoint (its record written last) of these model files."""
    complete = (folder / LINEAGE_DIGEST_FILE).is_file() and all((folder / name).is_file() for name in MODEL_FILES)
    return complete and model_file_hashes(folder) == hashes


def kept_records(folder: Path) -> tuple[dict, dict, str]:
    """A kept folder's ``training.json``, ``lineage.json`` and the sha256 of ``lineage.json``."""
    lineage = folder / LINEAGE_FILE
    return read_training_record(folder), json.loads(lineage.read_text()), file_sha256(lineage)


def load_with_speculators(folder: Path):
    """Load the checkpoint as speculators would for fine-tuning or conversion (verifier weights too)."""
    from speculators.model import SpeculatorModel

    return SpeculatorModel.from_pretrained(str(folder))


def speculators_load_problems(folder: Path, num_speculative_tokens: int = 3) -> tuple[list[str], dict]:
    """(problems, facts) of the checkpoint loaded by speculators (verifier weights too): an EAGLE-3
    draft, every saved tensor finite and loaded as saved, no draft weight missing from the file, vocab
    maps that fit ``draft_vocab_size`` and the verifier's vocabulary, and a forward pass on a tiny
    random batch that proposes ``num_speculative_tokens`` verifier-vocabulary tokens per position."""
    import torch
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel

    try:
        model = load_draft(folder, device="cpu")
    except Exception as exc:
        return [f"speculators could not load {folder}: {type(exc).__name__}: {exc}"], {}
    config = model.config
    problems = []
    if not isinstance(model, Eagle3DraftModel) or config.speculators_model_type != "eagle3":
        problems.append(f"loaded as {type(model).__name__} ({config.speculators_model_type!r}), not an eagle3 draft")
    saved = load_file(str(Path(folder) / "model.safetensors"))
    state = model.state_dict()
    missing = sorted(set(state) - set(saved) - set(model._keys_to_ignore_on_save))
    if missing:
        problems.append(f"model.safetensors lacks draft weights {missing[:6]}")
    nonfinite = sorted(k for k, v in saved.items() if v.is_floating_point() and not torch.isfinite(v).all())
    if nonfinite:
        problems.append(f"non-finite values in {nonfinite[:6]}")
    differ = sorted(k for k, v in saved.items() if k in state and not torch.equal(state[k].to(v.dtype), v))
    if differ:
        problems.append(f"the loaded model's {differ[:6]} differ from model.safetensors: not loaded as saved")
    draft_vocab, verifier_vocab = config.draft_vocab_size, model.verifier_vocab_size
    if model.use_draft_vocab:
        if tuple(model.d2t.shape) != (draft_vocab,) or tuple(model.t2d.shape) != (verifier_vocab,):
            problems.append(
                f"d2t {list(model.d2t.shape)} / t2d {list(model.t2d.shape)} do not fit draft vocab "
                f"{draft_vocab} / verifier vocab {verifier_vocab}"
            )
        elif int(model.t2d.sum()) != draft_vocab:
            problems.append(f"t2d marks {int(model.t2d.sum())} tokens, draft_vocab_size is {draft_vocab}")
    generator = torch.Generator().manual_seed(0)
    seq, aux = 8, len(config.eagle_aux_hidden_state_layer_ids)
    ids = torch.randint(0, verifier_vocab, (seq,), generator=generator)
    states = torch.randn(seq, aux + 1, config.transformer_layer_config.hidden_size, generator=generator)
    proposals = draft_proposals(model, ids, states, num_speculative_tokens)
    if tuple(proposals.shape) != (seq - 1, num_speculative_tokens):
        problems.append(
            f"a forward on {seq} tokens proposed shape {list(proposals.shape)}, expected "
            f"[{seq - 1}, {num_speculative_tokens}]"
        )
    elif int(proposals.min()) < 0 or int(proposals.max()) >= verifier_vocab:
        problems.append(f"a forward proposed token ids outside the verifier's vocabulary 0..{verifier_vocab - 1}")
    facts = {
        "model_class": type(model).__name__,
        "tensors": len(saved),
        "draft_vocab_size": draft_vocab,
        "verifier_vocab_size": verifier_vocab,
        "draft_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }
    return problems, facts


def _vocab_maps(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    from safetensors import safe_open

    with safe_open(str(Path(folder) / "model.safetensors"), framework="np") as fh:
        keys = set(fh.keys())
        if not {"d2t", "t2d"} <= keys:
            raise KeyError(f"{folder}/model.safetensors has no d2t/t2d vocab maps (keys: {sorted(keys)[:8]}...)")
        return fh.get_tensor("d2t"), fh.get_tensor("t2d")


def verifier_facts(backend, model_path) -> dict[str, int]:
    """What the checks compare, read through the verifier's backend (which knows nested text configs)."""
    return {
        "hidden_size": backend.hidden_size(model_path),
        "num_hidden_layers": backend.num_layers(model_path),
        "vocab_size": backend.vocab_size(model_path),
    }


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
