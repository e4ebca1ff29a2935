"""A chain for the lineage and gc tests: every asset the real one on the tiny verifier (a training run of
``TRAIN``), except the vLLM capture: reasoning-sample shards written through the real generation store
stand in for it (a capture needs a server)."""

# No `from __future__ import annotations`: Dagster reads the stand-in asset's annotations at runtime.

import json
from pathlib import Path

import dagster as dg

from eagle_assets.core.files import combined_hash, file_sha256
from eagle_assets.core.layout import prompts_file, samples_folder
from eagle_assets.eagle3_checkpoint import asset as ckpt_family
from eagle_assets.hidden_states import asset as hs_family
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts_family
from eagle_assets.reasoning_samples.store import load_samples
from eagle_assets.resources import StorageRoot
from eagle_assets.token_sequences import asset as ts_family
from tests.helpers.upstream import sample_row, write_samples

# One quick epoch: these tests are about what is recorded, not what the draft learned.
TRAIN = {"epochs": 1, "draft_vocab_size": 64, "total_seq_len": 256}


def chain_assets(tokenizer) -> list[dg.AssetsDefinition]:
    """prompts, the reasoning_samples stand-in, token_sequences, hidden_states, eagle3_checkpoint."""
    partitions = source_partitions()

    @dg.asset(name="reasoning_samples", partitions_def=partitions, deps=["prompts"], code_version="test-samples-1")
    def reasoning_samples(context: dg.AssetExecutionContext, storage: StorageRoot) -> dg.MaterializeResult:
        """Samples the verifier could have written, stored through the real shard writer."""
        import pyarrow.parquet as pq

        prompts = pq.read_table(prompts_file(storage.root, context.partition_key)).to_pylist()
        write_samples(
            storage, [sample_row(p, tokenizer, steps=2, sampling=json.dumps({"temperature": 0.0})) for p in prompts]
        )
        samples = load_samples(samples_folder(storage.root, context.partition_key))
        return dg.MaterializeResult(
            metadata={"ok": samples.num_rows, "reasoning_parser": "qwen3"},
            data_version=dg.DataVersion(combined_hash(samples["prompt_id"].to_pylist())[:16]),
        )

    return [
        prompts_family.build(partitions)["assets"][0],
        reasoning_samples,
        *ts_family.build(partitions)["assets"],
        *hs_family.build(partitions)["assets"],
        *ckpt_family.build(partitions)["assets"],
    ]


def train_checkpoint(assets, instance, resources, run: str) -> Path:
    """``eagle3_checkpoint`` of training run ``run`` (``TRAIN``), asserting it succeeded: the kept folder."""
    result = dg.materialize(
        assets,
        instance=instance,
        resources=resources,
        selection=["eagle3_checkpoint"],
        partition_key=run,
        run_config={"ops": {"eagle3_checkpoint": {"config": TRAIN}}},
    )
    assert result.success
    return Path(result.get_asset_materialization_events()[0].materialization.metadata["path"].value)


def train_checkpoint_at(home: str, root: str, verifier: str, run: str, out: str) -> None:
    """:func:`train_checkpoint` of the chain over storage ``root`` on the verifier folder ``verifier``, recorded in
    the instance at ``home``; the kept folder's path is written to the file ``out``. The body of a test that
    runs it in an interpreter of its own (tests/helpers/fresh_interpreter.py): its environment holds what
    this process's must not (a lineage key)."""
    from transformers import AutoTokenizer

    from eagle_assets.resources import Verifier

    resources = {"storage": StorageRoot(root=root), "verifier": Verifier(model_path=verifier, device="cpu")}
    with dg.DagsterInstance.from_config(home) as instance:
        folder = train_checkpoint(chain_assets(AutoTokenizer.from_pretrained(verifier)), instance, resources, run)
    Path(out).write_text(str(folder))


def weight_reads(monkeypatch) -> list[Path]:
    """Every hashing of a ``model.safetensors`` from now on, by the modules that hash checkpoint files."""
    import eagle_assets.core.files
    import eagle_assets.lineage.collect
    import eagle_assets.lineage.hashing
    import eagle_assets.lineage.record
    import eagle_assets.lineage.record_checks

    reads = []

    def counting(path):
        if Path(path).name == "model.safetensors":
            reads.append(Path(path))
        return file_sha256(path)

    lineage = (
        eagle_assets.lineage.collect,
        eagle_assets.lineage.hashing,
        eagle_assets.lineage.record,
        eagle_assets.lineage.record_checks,
    )
    for module in (*lineage, eagle_assets.core.files):
        monkeypatch.setattr(module, "file_sha256", counting)
    return reads
