"""The experiment behind the project: a draft trained on the verifier's own reasoning versus one
trained on the dataset's original responses.

Same prompts (the ``demo`` source by default), same training recipe (the demo's, from
``eagle_assets.demo.command.DEMO_OPS``), same verifier; only the training text differs:

* **reasoning** — the pipeline as it is: the verifier regenerates every train prompt through vLLM
  (``reasoning_samples``), rows are its exact tokens (``token_sequences``);
* **static** — prompt + the dataset's original answer (the ``reference`` column of ``prompts``),
  rendered through the verifier's chat template, loss mask on the answer.

Each side gets its own storage root and Dagster instance; hidden states and training are the real
``hidden_states`` and ``eagle3_checkpoint`` assets. Both drafts are then served by vLLM with the
verifier on the same held-out prompts (greedy), acceptance read from vLLM's spec-decode counters.

    python benchmarks/reasoning_vs_static.py                 # embedded tiny verifier, demo prompts
    python benchmarks/reasoning_vs_static.py --port 8600 --root /tmp/rvs

Prints a table and, last, ``acceptance_length_ratio=<reasoning/static>``. Finished steps are reused
when run again with the same ``--root``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from eagle_assets.core.layout import TOKEN_SEQUENCES, asset_folder, prompts_file, read_training_record
from eagle_assets.core.partitions import add_training_run, latest_checkpoint
from eagle_assets.definitions import build_definitions
from eagle_assets.demo.command import DEMO_OPS
from eagle_assets.eagle3_checkpoint import asset as eagle3_checkpoint
from eagle_assets.eagle3_eval.eval_sets import heldout_set, trained_on
from eagle_assets.eagle3_eval.evaluate import evaluate, replaced
from eagle_assets.hidden_states import asset as hidden_states
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts
from eagle_assets.reasoning_samples import asset as reasoning_samples
from eagle_assets.resources import StorageRoot, Verifier
from eagle_assets.token_sequences import asset as token_sequences
from eagle_assets.token_sequences.build import Policy, build_rows
from eagle_assets.token_sequences.drift import DriftReport
from eagle_assets.token_sequences.tokenize_partition import local_template, publish_sequences

FAMILIES = (prompts, reasoning_samples, token_sequences, hidden_states, eagle3_checkpoint)
TRAINING_SPLITS = {"config": {"splits": ["train", "validation"]}}
STATIC_SAMPLES_SCHEMA = pa.schema(
    [
        ("prompt_id", pa.string()),
        ("split", pa.string()),
        ("status", pa.string()),
        ("truncated", pa.bool_()),
        ("reasoning", pa.string()),
        ("content", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("token_ids", pa.list_(pa.int32())),
    ]
)


def graph() -> list:
    parts = source_partitions()
    built = [family.build(parts) for family in FAMILIES]
    return [a for b in built for a in b["assets"]]


def materialize(assets, selection, resources, instance, partition=None, ops=None) -> None:
    result = dg.materialize(
        assets,
        selection=selection,
        partition_key=partition,
        resources=resources,
        instance=instance,
        run_config={"ops": ops or {}},
        raise_on_error=False,
    )
    if not result.success:
        failures = [e.step_failure_data.error.message for e in result.get_step_failure_events()]
        raise SystemExit(f"materializing {selection} failed: {failures}")


def static_sequences(root: Path, partition: str, verifier) -> int:
    """token_sequences of the static side: prompt + the dataset's reference answer, mask on the answer."""
    table = pq.read_table(prompts_file(root, partition))
    rows = [r for r in table.to_pylist() if r["reference"]]
    # No server tokens: build_rows renders prompt + answer through the verifier's chat template.
    samples = pa.Table.from_pylist(
        [
            {
                "prompt_id": r["prompt_id"],
                "split": r["split"],
                "status": "ok",
                "truncated": False,
                "reasoning": None,
                "content": r["reference"],
                "prompt_token_ids": None,
                "token_ids": None,
            }
            for r in rows
        ],
        schema=STATIC_SAMPLES_SCHEMA,
    )
    messages = {r["prompt_id"]: [dict(m) for m in r["messages"]] for r in rows}
    splits = {r["prompt_id"]: r["split"] for r in rows}
    template = local_template(verifier)
    built = build_rows(samples, messages, splits, template.render, Policy(16384, "truncate", ("train", "validation")))
    # Rendered here from the dataset's answers: no server tokens, so no drift to measure.
    publish_sequences(asset_folder(root, TOKEN_SEQUENCES, partition), built.table(), template, DriftReport())
    return len(built.prompt_ids)


def train_side(name: str, root: Path, partition: str, resources: dict, prompts_config: dict) -> Path:
    resources = {**resources, "storage": StorageRoot(root=str(root))}
    assets = graph()
    # A persistent instance per side, so a re-run reuses finished work (the assets resume by content).
    (root / ".dagster").mkdir(parents=True, exist_ok=True)
    instance = dg.DagsterInstance.local_temp(tempdir=str(root / ".dagster"))
    materialize(assets, ["prompts"], resources, instance, partition, {"prompts": prompts_config})
    if name == "reasoning":
        materialize(assets, ["reasoning_samples", "token_sequences"], resources, instance, partition)
    else:
        rows = static_sequences(root, partition, resources["verifier"])
        print(f"static: {rows} rows of prompt + original answer")
    materialize(assets, ["hidden_states"], resources, instance, partition, {"hidden_states": TRAINING_SPLITS})
    recipe = {**DEMO_OPS["eagle3_checkpoint"]["config"], "partitions": [partition]}
    add_training_run(instance, name)  # each side is its own training run
    materialize(assets, ["eagle3_checkpoint"], resources, instance, name, {"eagle3_checkpoint": {"config": recipe}})
    return latest_checkpoint(instance, name)


def training_numbers(checkpoint: Path) -> tuple[int, int]:
    data = read_training_record(checkpoint)["data"]
    return data["rows"], data["supervised_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(".benchmarks/reasoning_vs_static"))
    parser.add_argument("--partition", default="demo")
    parser.add_argument("--limit", type=int, default=None, help="Prompts to use (default: all of the source).")
    parser.add_argument("--port", type=int, default=8000, help="First port; the eval servers use the next ones.")
    parser.add_argument("--max-prompts", type=int, default=64, help="Held-out prompts evaluated.")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    parser.add_argument("--verifier", default="", help="Verifier model folder (default: the embedded tiny verifier).")
    args = parser.parse_args()

    resources = dict(build_definitions().resources)
    resources["vllm_server"] = replaced(resources["vllm_server"], port=args.port, model=args.verifier)
    resources["verifier"] = Verifier(model_path=args.verifier)
    prompts_config = {"config": {"limit": args.limit}} if args.limit else {}
    checkpoints = {
        side: train_side(side, args.root.resolve() / side, args.partition, resources, prompts_config)
        for side in ("reasoning", "static")
    }
    # Both sides train on the same prompts and splits: the reasoning side's trained rows stand for both.
    requests = heldout_set(
        "in-distribution",
        args.root.resolve() / "reasoning",
        [args.partition],
        args.max_prompts,
        trained_on(checkpoints["reasoning"]),
    ).requests
    results = {}
    for offset, (side, checkpoint) in enumerate(checkpoints.items(), start=1):
        results[side] = evaluate(
            checkpoint,
            requests,
            resources["vllm_server"],
            resources["verifier"],
            num_speculative_tokens=args.num_speculative_tokens,
            max_tokens=args.max_tokens,
            port=args.port + offset,
            log=print,
        ).metadata()

    k = args.num_speculative_tokens
    header = [
        "draft",
        "train rows",
        "supervised tokens",
        "tau (vLLM)",
        *[f"pos {i + 1}" for i in range(k)],
        "tau (simulated)",
    ]
    print(f"\n{len(requests)} held-out prompts of '{args.partition}', K={k}, greedy; tau = 1 + accepted/drafts")
    print(" | ".join(header))
    for side, meta in results.items():
        rows, tokens = training_numbers(checkpoints[side])
        cells = [
            side,
            rows,
            tokens,
            f"{meta['acceptance_length']:.3f}",
            *[f"{meta[f'acceptance_pos_{i + 1}']:.3f}" for i in range(k)],
            f"{meta['simulated_acceptance_length']:.3f}",
        ]
        print(" | ".join(map(str, cells)))
    ratio = results["reasoning"]["acceptance_length"] / results["static"]["acceptance_length"]
    print(f"acceptance_length_ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
