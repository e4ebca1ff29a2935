"""Random features in the storage layout, for tests and benchmarks of the training path.

Writes exactly what the ``prompts`` (ids, splits), ``token_sequences`` and ``hidden_states`` assets
write (see DESIGN's contracts), each table published as the partition's current version, with random
tokens and random bf16 hidden states, plus a *head-only* verifier folder:
``config.json`` and a ``model.safetensors`` holding only ``model.embed_tokens.weight``,
``lm_head.weight`` and ``model.norm.weight`` -- all that speculators reads from a verifier to train
a draft. Nothing here produces a usable draft; it exercises the machinery at a chosen shape.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from safetensors.torch import save_file

from eagle_assets.backends import verifier_identity
from eagle_assets.core.files import atomic_path, combined_hash, publish_version, write_parquet
from eagle_assets.core.layout import (
    HIDDEN_STATES,
    LAST_TURN_ONLY,
    PROMPTS,
    PROMPTS_FILE,
    SEQUENCES_FILE,
    TOKEN_SEQUENCES,
    TRAIN,
    asset_folder,
)
from eagle_assets.hidden_states.files import INDEX_SCHEMA, content_id, encode_sample, write_sample
from eagle_assets.hidden_states.index import manifest_of, publish_index
from eagle_assets.prompts.records import PROMPTS_SCHEMA
from eagle_assets.prompts.splits import group_id, split_for
from eagle_assets.token_sequences.build import SEQUENCES_SCHEMA


def write_head_only_verifier(folder: Path, config, seed: int = 0, device: str = "cpu") -> Path:
    """Save ``config`` (a transformers ``PretrainedConfig``) and random embedding/head/norm weights."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    gen = torch.Generator(device=device).manual_seed(seed)
    shape = (config.vocab_size, config.hidden_size)
    tensors = {
        "model.embed_tokens.weight": torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16) * 0.02,
        "lm_head.weight": torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16) * 0.02,
        "model.norm.weight": torch.ones(config.hidden_size, dtype=torch.bfloat16),
    }
    with atomic_path(folder / "model.safetensors") as tmp:
        save_file({k: v.cpu().contiguous() for k, v in tensors.items()}, str(tmp))
    return folder


def publish_table(root: Path, asset: str, partition: str, name: str, table: pa.Table) -> Path:
    """Publish ``table`` as the file ``name`` of a new current version of ``asset[partition]``, the version
    named by the table's content (its Arrow stream); returns the file's path."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    version = combined_hash([sink.getvalue().to_pybytes()])[:16]
    folder = asset_folder(root, asset, partition)
    return publish_version(folder, version, lambda tmp: write_parquet(table, tmp / name)) / name


def publish_prompts(root: Path, partition: str, rows: list[tuple[str, str, str]]) -> Path:
    """A current prompts table of (prompt_id, split, group_id) rows, with the columns eagle3_eval reads."""
    table = pa.Table.from_pylist(
        [
            {"prompt_id": pid, "messages": [{"role": "user", "content": pid}], "split": split, "group_id": group}
            for pid, split, group in rows
        ]
    )
    return publish_table(root, PROMPTS, partition, PROMPTS_FILE, table)


def write_random_features(
    root: Path,
    partition: str,
    *,
    verifier_path: Path,
    layer_ids: list[int],
    hidden_size: int,
    vocab_size: int,
    num_rows: int,
    seq_len: tuple[int, int],
    prompt_fraction: float = 0.3,
    seed: int = 0,
    device: str = "cpu",
    distinct_rows: int | None = None,
    validation_fraction: float = 0.1,
    feature_dtype: str = "bfloat16",
) -> None:
    """Write ``num_rows`` random rows of ``partition`` under the storage ``root``: the ``train`` and
    ``validation`` splits (``validation_fraction`` of them, by the usual group hash), no ``heldout``.

    ``layer_ids`` are the captured layers in file order: the auxiliary ids, then the final layer's.
    ``distinct_rows`` (default: all) bounds how many different token sequences -- and tensor files --
    are drawn; further rows repeat them under their own prompt ids, as duplicate prompts would. Large
    benchmark sets then cost the writing of a few files instead of tens of gigabytes. ``feature_dtype``
    is the storage dtype (``bfloat16`` or ``fp8``), written by the ``hidden_states`` asset's own writer.
    """
    rng = np.random.default_rng(seed)
    identity = verifier_identity(verifier_path)
    gen = torch.Generator(device=device).manual_seed(seed)
    hs_folder = asset_folder(root, HIDDEN_STATES, partition)
    (hs_folder / "tensors").mkdir(parents=True, exist_ok=True)
    distinct = num_rows if distinct_rows is None else max(1, min(distinct_rows, num_rows))
    seq_rows, index_rows, prompt_rows = [], [], []
    for i in range(num_rows):
        prompt_id = hashlib.sha256(f"{partition}/{seed}/{i}".encode()).hexdigest()[:16]
        group = group_id(prompt_id)
        prompt_rows.append(
            {
                "prompt_id": prompt_id,
                "source": partition,
                "source_id": str(i),
                "messages": [{"role": "user", "content": f"synthetic row {i}"}],
                "reference": None,
                "split": split_for(group, validation_fraction, 0.0) if validation_fraction else TRAIN,
                "group_id": group,
                "metadata": "{}",
            }
        )
        if i >= distinct:
            source_seq, source_index = seq_rows[i % distinct], index_rows[i % distinct]
            seq_rows.append({**source_seq, "prompt_id": prompt_id})
            index_rows.append({**source_index, "prompt_id": prompt_id})
            continue
        length = int(rng.integers(seq_len[0], seq_len[1] + 1))
        input_ids = rng.integers(0, vocab_size, size=length, dtype=np.int64)
        prompt_len = max(1, int(length * prompt_fraction))
        loss_mask = np.r_[np.zeros(prompt_len, np.int8), np.ones(length - prompt_len, np.int8)]
        cid = content_id(input_ids, identity, layer_ids, feature_dtype)
        hidden = torch.randn((length, len(layer_ids), hidden_size), generator=gen, device=device, dtype=torch.bfloat16)
        tensors = encode_sample(
            hidden.cpu(), torch.from_numpy(input_ids), len(layer_ids), hidden_size, f"row {i}", feature_dtype
        )
        rel, sha, _ = write_sample(hs_folder, cid, tensors)
        seq_rows.append(
            {
                "prompt_id": prompt_id,
                "turn": LAST_TURN_ONLY,
                "input_ids": input_ids.astype(np.int32).tolist(),
                "loss_mask": loss_mask.tolist(),
                "seq_len": length,
                "origin": "rendered",
            }
        )
        index_rows.append(
            {
                "prompt_id": prompt_id,
                "turn": LAST_TURN_ONLY,
                "content_id": cid,
                "file": rel,
                "seq_len": length,
                "sha256": sha,
            }
        )
    publish_table(root, PROMPTS, partition, PROMPTS_FILE, pa.Table.from_pylist(prompt_rows, schema=PROMPTS_SCHEMA))
    sequences = pa.Table.from_pylist(seq_rows, schema=SEQUENCES_SCHEMA)
    publish_table(root, TOKEN_SEQUENCES, partition, SEQUENCES_FILE, sequences)
    config = json.loads((Path(verifier_path) / "config.json").read_text())
    verifier = {
        "backend": "transformers",
        "model_path": str(verifier_path),
        "identity": identity,
        "num_layers": config["num_hidden_layers"],
        "hidden_size": hidden_size,
        "vocab_size": config["vocab_size"],
    }
    files = len({row["content_id"] for row in index_rows})
    manifest = manifest_of(
        verifier, list(layer_ids), hidden_size, feature_dtype, files, sum(sequences["seq_len"].to_pylist())
    )
    publish_index(hs_folder, pa.Table.from_pylist(index_rows, schema=INDEX_SCHEMA), manifest)


def training_sample(length: int, hidden: int, vocab: int = 300) -> dict:
    """One sample as speculators' dataset yields it (random ids and features, a random loss mask), for a
    collate to pack: ``hidden_states`` holds three aux layers of ``hidden`` each."""
    return {
        "input_ids": torch.randint(0, vocab, (length,)),
        "hidden_states": torch.randn(length, 3 * hidden),
        "verifier_last_hidden_states": torch.randn(length, hidden),
        "loss_mask": (torch.rand(length) > 0.3).long(),
        "lengths": torch.tensor([length]),
        "position_ids": torch.arange(length),
    }
