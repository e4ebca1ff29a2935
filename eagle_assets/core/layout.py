"""The storage layout: every asset folder and file name under a storage root, defined once.

Each asset keeps its files in ``<root>/<asset>/<partition>/`` (per dataset source) or
``<root>/<asset>/`` (per training run); the names below are the only spelling of each.
"""

from __future__ import annotations

from pathlib import Path

# The stages, in pipeline order: each is an asset and the folder its files live in.
PROMPTS = "prompts"
REASONING_SAMPLES = "reasoning_samples"
TOKEN_SEQUENCES = "token_sequences"
HIDDEN_STATES = "hidden_states"
EAGLE3_CHECKPOINT = "eagle3_checkpoint"
EAGLE3_EVAL = "eagle3_eval"
STAGES = (PROMPTS, REASONING_SAMPLES, TOKEN_SEQUENCES, HIDDEN_STATES, EAGLE3_CHECKPOINT, EAGLE3_EVAL)
# The stages partitioned by dataset source: what a checkpoint's lineage records upstream of it.
PER_DATASET_STAGES = STAGES[:4]

# The one asset group: Dagster draws group boxes only when a graph holds more than one group, and
# opens them collapsed; with a single group it shows every asset at once, in pipeline order.
PIPELINE = "pipeline"

# prompts: each row's split, from the hash of its problem key.
TRAIN, VALIDATION, HELDOUT = "train", "validation", "heldout"
SPLITS = (TRAIN, VALIDATION, HELDOUT)
PROMPTS_FILE = "prompts.parquet"
SKIPPED_FILE = "skipped.json"

# reasoning_samples: which assistant turns are asked (``turns: last | all``), and the ``turn`` column
# value of a ``turns: last`` row.
TURN_MODES = ("last", "all")
LAST_TURN_ONLY = -1
# reasoning_samples: append-only shards, the quality classes of their rows, the turn mode and variants.
SHARD_GLOB = "shard-*.parquet"
QUALITY_FILE = "quality.parquet"
TURNS_FILE = "turns.json"
VARIANTS_FILE = "sampling_variants.json"

# token_sequences: the rows and the tokenization report (tokenizer, template hash, policy, drift).
SEQUENCES_FILE = "sequences.parquet"
TOKENIZATION_FILE = "tokenization.json"

# hidden_states: row -> file index, the manifest (backend, layers, dtype), content-named tensor files,
# and a backend's own temporary files.
INDEX_FILE = "index.parquet"
# The storage dtypes of hidden-state files (the manifest's ``dtype``).
BF16, FP8 = "bfloat16", "fp8"
FEATURE_DTYPES = (BF16, FP8)
MANIFEST_FILE = "manifest.json"
TENSORS_DIR = "tensors"
SCRATCH_DIR = "scratch"

# eagle3_checkpoint: the kept checkpoint's files, and the trainer's work folders beside them.
MODEL_FILES = ("config.json", "model.safetensors")
# Resume state stays in the trainer's folder; everything else speculators wrote for the epoch is kept.
TRAINING_STATE_FILES = ("optimizer_state_dict.pt", "scheduler_state_dict.pt", "training_state.json")
TRAINING_FILE = "training.json"
LINEAGE_FILE = "lineage.json"
# sha256sum's format, so `sha256sum -c lineage.sha256` checks the record too.
LINEAGE_DIGEST_FILE = "lineage.sha256"
WORK_DIR = "_work"
# A speculators training folder (under WORK_DIR): its hidden-state files link to hidden_states tensors.
TRAINING_DATA = "training_data"
TRAINING_LINKS = "hidden_states"
TRAINER_DONE_FILE = "done.json"
# A trainer folder (under WORK_DIR): one speculators training process's checkpoints and metrics.
TRAINER_FOLDER_PREFIX = "trainer-"

# eagle3_eval
EVAL_REPORT_FILE = "report.json"
GREEDY_OUTPUTS_FILE = "greedy_outputs.parquet"
EVAL_ROWS_FILE = "rows.parquet"


def asset_folder(root: str | Path, asset: str, partition: str | None = None) -> Path:
    """``<root>/<asset>[/<partition>]`` (not created)."""
    folder = Path(root) / asset
    return folder / partition if partition is not None else folder


def prompts_file(root: str | Path, partition: str) -> Path:
    return asset_folder(root, PROMPTS, partition) / PROMPTS_FILE


def sequences_file(root: str | Path, partition: str) -> Path:
    return asset_folder(root, TOKEN_SEQUENCES, partition) / SEQUENCES_FILE


def index_file(root: str | Path, partition: str) -> Path:
    return asset_folder(root, HIDDEN_STATES, partition) / INDEX_FILE
