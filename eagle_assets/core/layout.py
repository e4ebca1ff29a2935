"""The storage layout: every asset folder and file name under a storage root, defined once.

Each asset keeps its files in ``<root>/<asset>/<partition>/`` (per dataset source) or
``<root>/<asset>/`` (per training run); the names below are the only spelling of each.

A materialization of ``prompts``, ``token_sequences`` or ``hidden_states`` writes its tables into a folder of
its own, ``<partition>/versions/<data version>/``, that nothing rewrites afterwards: a kept checkpoint's
lineage points at those files, so a later materialization cannot change them. ``<partition>/current.json``
names the version readers see. ``reasoning_samples`` keeps one sample set per generation recipe,
``<partition>/recipes/<recipe id>/`` (append-only shards), and its ``current.json`` names the current recipe.
"""

from __future__ import annotations

import json
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

# A partition's published versions (or, for reasoning_samples, its recipes' sample sets), and the pointer
# to the one readers see.
VERSIONS_DIR = "versions"
RECIPES_DIR = "recipes"
CURRENT_FILE = "current.json"
# What current_folder returns before anything is published: no version or recipe id takes this name
# (both are 16 hex digits), so every file under it is missing.
UNPUBLISHED = "unpublished"

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
# reasoning_samples, in a recipe's sample set: the recipe, append-only shards, and the quality classes of
# their rows (quality-<time_ns>-<content hash>.parquet, one file per change of the classes; the newest counts).
RECIPE_FILE = "recipe.json"
SHARD_GLOB = "shard-*.parquet"
QUALITY_GLOB = "quality-*.parquet"

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
# A tensor file's data starts at a multiple of this (its safetensors header padded with spaces), so its states
# can be written with O_DIRECT; the header thus takes this many bytes of every file.
FEATURE_FILE_ALIGN = 4096
SCRATCH_DIR = "scratch"

# eagle3_checkpoint: the kept checkpoint's files, and the trainer's work folders beside them.
MODEL_FILES = ("config.json", "model.safetensors")
# Resume state stays in the trainer's folder; everything else speculators wrote for the epoch is kept.
TRAINING_STATE_FILES = ("optimizer_state_dict.pt", "scheduler_state_dict.pt", "training_state.json")
TRAINING_FILE = "training.json"
LINEAGE_FILE = "lineage.json"
# sha256sum's format, so `sha256sum -c lineage.sha256` checks the record too.
LINEAGE_DIGEST_FILE = "lineage.sha256"
# "hmac-sha256 <hex>" over lineage.json's bytes, written when a lineage key is configured: a record edited
# and re-digested off the Dagster instance is still caught by whoever holds the key.
LINEAGE_SIGNATURE_FILE = "lineage.sig"
WORK_DIR = "_work"
# A speculators training folder (under WORK_DIR): its hidden-state files link to hidden_states tensors.
TRAINING_DATA = "training_data"
TRAINING_LINKS = "hidden_states"
TRAINER_DONE_FILE = "done.json"
# A trainer folder (under WORK_DIR): one speculators training process's checkpoints and metrics.
TRAINER_FOLDER_PREFIX = "trainer-"
# Training with ``features: online``: the extraction server's scratch folder (under WORK_DIR, one per
# server port), where its connector writes each row's file until the trainer has loaded and deleted it,
# and the note the connector leaves there when a write found no room under the scratch cap.
ONLINE_SCRATCH_PREFIX = "online-scratch-"
SCRATCH_CAP_ERROR_FILE = "scratch-cap-error.txt"

# eagle3_eval
EVAL_REPORT_FILE = "report.json"
# One row per request: its per-request speculative-decoding statistics; and the plot of τ along the output.
EVAL_REQUESTS_FILE = "requests.parquet"
EVAL_TRACE_PLOT_FILE = "tau_along_trace.png"
GREEDY_OUTPUTS_FILE = "greedy_outputs.parquet"
EVAL_ROWS_FILE = "rows.parquet"


def asset_folder(root: str | Path, asset: str, partition: str | None = None) -> Path:
    """``<root>/<asset>[/<partition>]`` (not created)."""
    folder = Path(root) / asset
    return folder / partition if partition is not None else folder


def current_version(folder: str | Path) -> str | None:
    """The version (or recipe id) ``<folder>/current.json`` names; None before the first publication."""
    path = Path(folder) / CURRENT_FILE
    return json.loads(path.read_text())["version"] if path.exists() else None


def version_folder(folder: str | Path, version: str, kind: str = VERSIONS_DIR) -> Path:
    """``<folder>/<kind>/<version>``: one published version (``kind`` VERSIONS_DIR) or recipe (RECIPES_DIR)."""
    return Path(folder) / kind / version


def current_folder(folder: str | Path, kind: str = VERSIONS_DIR) -> Path:
    """The folder of the version (recipe) ``current.json`` names, or an ``UNPUBLISHED`` one that never exists."""
    return version_folder(folder, current_version(folder) or UNPUBLISHED, kind)


def published_kind(asset: str) -> str:
    """How a per-dataset ``asset`` publishes: RECIPES_DIR for reasoning_samples, VERSIONS_DIR for the others."""
    return RECIPES_DIR if asset == REASONING_SAMPLES else VERSIONS_DIR


def prompts_file(root: str | Path, partition: str) -> Path:
    """The current prompts table of ``partition``."""
    return current_folder(asset_folder(root, PROMPTS, partition)) / PROMPTS_FILE


def samples_folder(root: str | Path, partition: str) -> Path:
    """The current recipe's sample set of ``partition``."""
    return current_folder(asset_folder(root, REASONING_SAMPLES, partition), RECIPES_DIR)


def sequences_file(root: str | Path, partition: str) -> Path:
    """The current training rows of ``partition``."""
    return current_folder(asset_folder(root, TOKEN_SEQUENCES, partition)) / SEQUENCES_FILE


def index_file(root: str | Path, partition: str) -> Path:
    """The current hidden-state index of ``partition``."""
    return current_folder(asset_folder(root, HIDDEN_STATES, partition)) / INDEX_FILE


def online_scratch_folder(root: str | Path, port: int) -> Path:
    """The scratch folder of the online-features server on ``port`` (not created)."""
    return asset_folder(root, EAGLE3_CHECKPOINT) / WORK_DIR / f"{ONLINE_SCRATCH_PREFIX}{port}"


def named_checkpoint(name: str, checkpoints: str | Path) -> Path:
    """A kept checkpoint by folder name (under ``checkpoints``, the ``eagle3_checkpoint`` folder: a kept folder is
    named by its content hash) or, with a ``/`` in it, by path."""
    return Path(name) if "/" in name else Path(checkpoints) / name


def read_training_record(checkpoint: str | Path) -> dict:
    """The checkpoint folder's ``training.json`` (what trained it: run, data, verifier), or ``{}`` when it has
    none (a speculators folder not made by ``eagle3_checkpoint``)."""
    path = Path(checkpoint) / TRAINING_FILE
    return json.loads(path.read_text()) if path.exists() else {}
