"""Hidden-state features for the tests: real token sequences of the tiny verifier, the real
``hidden_states`` asset materialized over them and what that run left; random features of one shape
for the training tests."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from eagle_assets.hidden_states import asset as hs_family
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import Verifier
from eagle_assets.token_sequences import asset as ts_family
from tests.helpers.upstream import PARTITION, demo_prompts, sample_row, write_samples


def verifier_for(path, **kw) -> Verifier:
    return Verifier(model_path=str(path), device="cpu", **kw)


def write_token_sequences(storage_root, tiny_verifier, prompts: int, steps: int):
    """Real prompts and samples, then the real token_sequences asset."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    write_samples(storage_root, [sample_row(p, tokenizer, steps=steps) for p in demo_prompts(storage_root, prompts)])
    result = dg.materialize(
        ts_family.build(source_partitions())["assets"],
        partition_key=PARTITION,
        resources={"storage": storage_root, "verifier": verifier_for(tiny_verifier)},
    )
    assert result.success
    return pq.read_table(storage_root.path("token_sequences", PARTITION) / "sequences.parquet")


def materialize_hidden_states(storage_root, verifier, config=None):
    built = hs_family.build(source_partitions())
    return dg.materialize(
        built["assets"] + built["checks"],
        partition_key=PARTITION,
        resources={"storage": storage_root, "verifier": verifier},
        run_config={"ops": {"hidden_states": {"config": config}}} if config else None,
        raise_on_error=False,
    )


def metadata(result) -> dict:
    [mat] = result.asset_materializations_for_node("hidden_states")
    return {k: v.value for k, v in mat.metadata.items()}


def folder(storage_root):
    return storage_root.path("hidden_states", PARTITION)


# The random features' shape: a head-only 4-layer verifier, two partitions.
VOCAB, HIDDEN, LAYERS = 512, 64, [1, 2, 3, 4]
PARTITIONS = ["demo", "jsonl"]


def write_random_storage(base: Path) -> tuple[Path, Path]:
    """Random features for ``PARTITIONS`` in the storage layout under ``base`` (12 rows each, a quarter
    validation) and a head-only 4-layer verifier; (storage root, verifier folder)."""
    from transformers import Qwen3Config

    from tests.helpers.synthetic import write_head_only_verifier, write_random_features

    verifier = write_head_only_verifier(
        base / "verifier",
        Qwen3Config(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            num_hidden_layers=4,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            intermediate_size=128,
            max_position_embeddings=1024,
            eos_token_id=1,
        ),
    )
    root = base / "storage"
    for seed, partition in enumerate(PARTITIONS):
        write_random_features(
            root,
            partition,
            verifier_path=verifier,
            layer_ids=LAYERS,
            hidden_size=HIDDEN,
            vocab_size=VOCAB,
            num_rows=12,
            seq_len=(40, 120),
            seed=seed,
            validation_fraction=0.25,
        )
    return root, verifier


def copy_storage(src: Path, dst: Path) -> Path:
    """A copy of the storage root ``src`` at ``dst`` (links stay links), for a test that changes it."""
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst
