"""Hidden-state features for the tests: real token sequences of the tiny verifier, the real
``hidden_states`` asset materialized over them and what that run left, a vLLM extraction killed and
resumed; random features of one shape for the training tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from eagle_assets.core.layout import MANIFEST_FILE, current_folder, index_file, sequences_file
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
    return pq.read_table(sequences_file(storage_root.root, PARTITION))


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
    """The hidden_states partition folder: its ``tensors/``, and what the index's ``file`` paths are relative to."""
    return storage_root.path("hidden_states", PARTITION)


def index_path(storage_root) -> Path:
    """The current hidden-state index."""
    return index_file(storage_root.root, PARTITION)


def manifest(storage_root) -> dict:
    """The current hidden-state manifest."""
    return json.loads((current_folder(folder(storage_root)) / MANIFEST_FILE).read_text())


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


KILLED_VLLM_RUN = """
import sys
import dagster as dg
from eagle_assets.hidden_states import asset as hidden_states
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier
if __name__ == "__main__":  # vLLM starts its engine core by spawn
    dg.materialize(hidden_states.build(source_partitions())["assets"], partition_key=sys.argv[3],
                   resources={"storage": StorageRoot(root=sys.argv[1]),
                              "verifier": Verifier(embedded=sys.argv[2], backend="vllm", device="cpu",
                                                   batch_tokens=256)})
"""
# The asset run that completes it, with its checks; what it reports goes to the JSON file argv[4].
RESUMED_VLLM_RUN = """
import json, sys
import dagster as dg
from eagle_assets.hidden_states import asset as hidden_states
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.resources import StorageRoot, Verifier
if __name__ == "__main__":
    built = hidden_states.build(source_partitions())
    result = dg.materialize(built["assets"] + built["checks"], partition_key=sys.argv[3], raise_on_error=False,
                            resources={"storage": StorageRoot(root=sys.argv[1]),
                                       "verifier": Verifier(embedded=sys.argv[2], backend="vllm", device="cpu",
                                                            batch_tokens=256)})
    mats = result.asset_materializations_for_node("hidden_states")
    metadata = {k: v.value for mat in mats for k, v in mat.metadata.items()}
    with open(sys.argv[4], "w") as out:
        json.dump({"success": result.success, "metadata": metadata}, out, default=str)
"""
ENGINE_TIMEOUT_S = 900
# The run's critical path is the demos' chain (tests/conftest.py), which runs at the tests' priority; this
# extraction, off that path, takes what they leave of the CPU.
BACKGROUND_NICE = ("nice", "-n", "10")


@contextmanager
def vllm_extraction_killed_then_resumed(base: Path, tiny_verifier, started: list) -> Iterator[dict]:
    """A vLLM extraction of 40 demo prompts' sequences SIGKILLed (its whole process group, engine core
    included) once a few files are in place, then the asset run that completes it (with backend ``vllm``,
    in a process of its own). Yields the storage root resource, the token sequences, the files finished
    before the kill (name -> mtime), and the completing run's ``success`` and ``metadata``. Both processes
    are appended to ``started``."""
    import signal
    import subprocess
    import sys

    from eagle_assets.hidden_states.files import check_sample, load_sample
    from eagle_assets.resources import StorageRoot
    from tests.helpers.processes import kill_group
    from tests.helpers.runs import wait_until

    storage = StorageRoot(root=str(base / "data"))
    sequences = write_token_sequences(storage, tiny_verifier, prompts=40, steps=30)
    tensors = folder(storage) / "tensors"
    log = base / "killed-run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*BACKGROUND_NICE, sys.executable, "-c", KILLED_VLLM_RUN, storage.root, "tiny-qwen3", PARTITION],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started.append(proc)
    try:
        wait_until(
            lambda: tensors.exists() and len(list(tensors.glob("*.safetensors"))) >= 3,
            ENGINE_TIMEOUT_S,
            "the first hidden-state files",
            proc,
            log,
            poll_s=0.005,
        )
    finally:
        kill_group(proc)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill: {log.read_text()[-3000:]}"
    finished = sorted(tensors.glob("*.safetensors"))
    before = {p.name: p.stat().st_mtime_ns for p in finished}
    for path in finished:  # whatever carries a final name is whole
        sample = load_sample(path)
        check_sample(sample["hidden_states"], sample["token_ids"], 4, sample["hidden_states"].shape[-1], path.name)
    report, resume_log = base / "resumed.json", base / "resumed-run.log"
    with open(resume_log, "wb") as out:
        resumed = subprocess.Popen(
            [
                *BACKGROUND_NICE,
                sys.executable,
                "-c",
                RESUMED_VLLM_RUN,
                storage.root,
                "tiny-qwen3",
                PARTITION,
                str(report),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started.append(resumed)
    try:
        returncode = resumed.wait(timeout=ENGINE_TIMEOUT_S)
    finally:
        kill_group(resumed)
    assert returncode == 0, f"the completing run crashed: {resume_log.read_text()[-3000:]}"
    completed = json.loads(report.read_text())
    yield {"storage": storage, "sequences": sequences, "finished_before": before, **completed}
