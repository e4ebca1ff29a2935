"""FP8 versus bf16 hidden states on the demo: bytes per token, and the vLLM-measured acceptance length of
a draft trained on each.

The demo graph (``eagle_assets.demo.command.run_demo``: prompts, reasoning samples from the verifier through vLLM,
token sequences, hidden states, the EAGLE-3 checkpoint, its vLLM evaluation, with the demo's settings)
runs twice on one storage root and one Dagster instance, first with ``verifier.feature_dtype: bfloat16``,
then ``fp8``. The second run reuses the first one's prompts, samples and token sequences (same data), writes
fp8 hidden-state files beside the bf16 ones (the dtype is part of their content ids), trains with the same
recipe and seed (speculators reads the files through its ``fp8`` backend) and is evaluated on the same
held-out prompts by the same ``eagle3_eval`` asset.

    python benchmarks/fp8_features.py                       # embedded tiny verifier, demo prompts
    python benchmarks/fp8_features.py --root /tmp/fp8 --port 8700

Bytes per token are measured on disk (every distinct file of the partition's index: its size, over its
tokens; safetensors headers and token ids included) and given as the model's per-token figure. Prints a
table and, last, ``acceptance_length_ratio=<fp8/bf16>`` and ``bytes_per_token_ratio=<fp8/bf16>``. Finished
steps are reused when run again with the same ``--root``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq

from eagle_assets.core.layout import INDEX_FILE, current_folder
from eagle_assets.definitions import build_definitions
from eagle_assets.demo.command import run_demo, summarize
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer

DTYPES = ("bfloat16", "fp8")


def run_metadata(runs: list, asset: str) -> dict:
    """The metadata of ``asset``'s materialization in these demo runs."""
    for run in runs:
        for event in run.get_asset_materialization_events():
            mat = event.step_materialization_data.materialization
            if mat.asset_key == dg.AssetKey(asset):
                return {k: v.value for k, v in mat.metadata.items()}
    raise SystemExit(f"the demo runs did not materialize {asset}: {[r.success for r in runs]}")


def measured_bytes_per_token(folder: Path) -> tuple[float, int, int]:
    """(bytes per token, bytes, tokens) over the distinct files the partition's current index names."""
    index = pq.read_table(current_folder(folder) / INDEX_FILE, columns=["file", "seq_len"]).to_pylist()
    files = {row["file"]: row["seq_len"] for row in index}
    size = sum((folder / name).stat().st_size for name in files)
    tokens = sum(files.values())
    return size / tokens, size, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(".benchmarks/fp8_features"))
    parser.add_argument("--partition", default="demo")
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="vLLM port (the evaluation takes the next one); 0 = the vllm_server resource's default.",
    )
    args = parser.parse_args()

    root = args.root.resolve()
    (root / ".dagster").mkdir(parents=True, exist_ok=True)
    results = {}
    with dg.DagsterInstance.local_temp(tempdir=str(root / ".dagster")) as instance:
        for dtype in DTYPES:
            overrides = {"storage": StorageRoot(root=str(root / "data")), "verifier": Verifier(feature_dtype=dtype)}
            if args.port:
                overrides["vllm_server"] = VLLMServer(port=args.port)
            print(f"== demo graph with feature_dtype={dtype}", flush=True)

            def report(result, dtype=dtype) -> None:
                print(f"[{dtype}] run {result.run_id}: {'success' if result.success else 'FAILED'}", flush=True)
                for line in summarize(result):
                    print(f"[{dtype}]   {line}", flush=True)

            # Each dtype its own training run (same recipe), so each keeps its own checkpoint and evaluation.
            runs = run_demo(
                build_definitions(overrides), instance, args.partition, report, training_run=f"fp8-benchmark-{dtype}"
            )
            hs = run_metadata(runs, "hidden_states")
            if hs.get("feature_dtype") != dtype:
                raise SystemExit(f"the {dtype} run did not materialize {dtype} hidden states")
            per_token, size, tokens = measured_bytes_per_token(root / "data" / "hidden_states" / args.partition)
            checkpoint, evaluation = run_metadata(runs, "eagle3_checkpoint"), run_metadata(runs, "eagle3_eval")
            # The in-distribution held-out set's numbers, without their prompt-set label.
            held = f"{evaluation['eval_set']}/"
            evaluation.update({k.removeprefix(held): v for k, v in evaluation.items() if k.startswith(held)})
            if Path(evaluation["checkpoint"]) != Path(checkpoint["path"]):
                raise SystemExit(f"the {dtype} run's evaluation is not of its checkpoint")
            results[dtype] = {
                "hs": hs,
                "bytes_per_token": per_token,
                "bytes": size,
                "tokens": tokens,
                "checkpoint": checkpoint,
                "eval": evaluation,
            }

    k = results["bfloat16"]["eval"]["num_speculative_tokens"]
    print(
        f"\n'{args.partition}': {results['bfloat16']['tokens']} tokens of features; K={k}, greedy, "
        f"{results['bfloat16']['eval'].get('prompts_evaluated')} held-out prompts; tau = 1 + accepted/drafts"
    )
    header = [
        "features",
        "bytes/token (disk)",
        "bytes/token (model)",
        "feature bytes",
        "val_full_acc_0",
        "tau (vLLM)",
        *[f"pos {i + 1}" for i in range(k)],
        "checkpoint",
    ]
    print(" | ".join(header))
    for dtype, r in results.items():
        ev = r["eval"]
        cells = [
            dtype,
            f"{r['bytes_per_token']:.1f}",
            r["hs"]["bytes_per_token"],
            r["bytes"],
            f"{r['checkpoint'].get('val_full_acc_0', float('nan')):.3f}",
            f"{ev['acceptance_length']:.3f}",
            *[f"{ev[f'acceptance_pos_{i + 1}']:.3f}" for i in range(k)],
            r["checkpoint"]["path"],
        ]
        print(" | ".join(map(str, cells)))
    tau = results["fp8"]["eval"]["acceptance_length"] / results["bfloat16"]["eval"]["acceptance_length"]
    size = results["fp8"]["bytes_per_token"] / results["bfloat16"]["bytes_per_token"]
    model = results["fp8"]["hs"]["bytes_per_token"] / results["bfloat16"]["hs"]["bytes_per_token"]
    print(f"acceptance_length_ratio={tau:.4f}")
    print(f"bytes_per_token_ratio={size:.4f} (disk; model {model:.4f})")


if __name__ == "__main__":
    main()
