"""Stored versus online hidden states on the demo: acceptance, accuracy, training wall time, scratch and disk.

One storage root and Dagster instance, the demo's settings (``eagle_assets.demo.command.demo_ops``: the
embedded tiny verifier, its reasoning samples, the demo's draft recipe and seed). ``prompts``,
``reasoning_samples`` and ``token_sequences`` are materialized once; then two training runs of the same
recipe (each its own ``training_runs`` partition):

* **online** — ``eagle3_checkpoint`` with ``features: online``: a managed vLLM ``extract_hidden_states``
  server (verifier backend ``vllm``, the only kind online features accept) computes every train and
  validation row's features while the trainer runs, again each epoch, through the scratch folder. It runs
  first: once a ``hidden_states`` materialization exists, online training links its files instead of
  generating them.
* **stored** — ``hidden_states`` (train and validation splits, what training reads) then
  ``eagle3_checkpoint`` with ``features: stored``. ``--stored-backend vllm`` (default) extracts with the
  same vLLM engine the online server runs, so only where the features live differs; ``transformers`` is
  the demo's own default backend.

Both drafts are then served by vLLM (``eagle3_eval``: K=3, greedy, the same held-out prompts, checked by
prompt id). Wall times are the assets' step times from the event log (the online server's start-up, from
its "starting" to its "ready" log line, is given apart); the scratch folder's bytes are sampled every 10 ms
while the online run trains; bytes left on disk are what each side added to the storage root.

    python benchmarks/online_features.py                  # a fresh root under /tmp, port 8000 and 8001
    python benchmarks/online_features.py --root /tmp/online --port 8700 --scratch-cap-gb 0.01

One run of each side (on 2 shared CPU cores a repeat costs the whole pipeline again). The last line prints
``online_acceptance_ratio=<online τ / stored τ> peak_scratch_bytes=<bytes>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import dagster as dg

from eagle_assets.capacity import DEFAULT_SCRATCH_CAP_GB
from eagle_assets.core.files import checkpoint_hash
from eagle_assets.core.layout import EAGLE3_CHECKPOINT, HIDDEN_STATES, ONLINE_SCRATCH_PREFIX, WORK_DIR, asset_folder
from eagle_assets.core.partitions import add_training_run
from eagle_assets.definitions import build_definitions
from eagle_assets.demo.command import demo_ops, summarize
from eagle_assets.orchestration.jobs import stage_job_name
from eagle_assets.resources import StorageRoot, Verifier
from eagle_assets.resources.embedded import embedded_resources
from eagle_assets.tiny_verifier.embedded import DEFAULT_EMBEDDED

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fp8_features import run_metadata
from benchmarks.reasoning_vs_static import TRAINING_SPLITS
from benchmarks.scratch_sampler import ScratchSampler

SIDES = ("stored", "online")
RUNS = {side: f"online-features-{side}" for side in SIDES}  # the training runs (dynamic partitions)
STEP_TIMES = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS}


def disk_bytes(folder: Path) -> int:
    """Bytes of every file under ``folder``; links count as themselves, a hard-linked file once."""
    seen, total = set(), 0
    for parent, _, files in os.walk(folder):
        for name in files:
            stat = os.lstat(os.path.join(parent, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total


def stage(defs: dg.Definitions, instance, asset: str, partition: str, op: dict) -> dg.ExecuteInProcessResult:
    """``asset`` (and its checks) for ``partition`` with op config ``op``; exits when the asset's step fails."""
    print(f"== {asset}[{partition}]", flush=True)
    result = defs.resolve_job_def(stage_job_name(dg.AssetKey(asset))).execute_in_process(
        partition_key=partition,
        instance=instance,
        raise_on_error=False,
        run_config={"ops": {asset: op} if op else {}, "loggers": {"console": {"config": {"log_level": "INFO"}}}},
    )
    for line in summarize(result):
        print(f"[{asset}[{partition}]] {line}", flush=True)
    # A failed check is reported above and the comparison goes on; a failed materialization ends it.
    if any(event.step_key == asset for event in result.get_step_failure_events()):
        raise SystemExit(f"{asset}[{partition}] failed (run {result.run_id})")
    return result


def step_seconds(instance, result: dg.ExecuteInProcessResult, step: str) -> float:
    """Wall time of ``step`` in this run: its STEP_START to its STEP_SUCCESS."""
    logs = instance.all_logs(result.run_id, of_type=STEP_TIMES)
    times = {e.dagster_event_type: e.timestamp for e in logs if e.step_key == step}
    return times[dg.DagsterEventType.STEP_SUCCESS] - times[dg.DagsterEventType.STEP_START]


def server_startup_seconds(instance, result: dg.ExecuteInProcessResult) -> float:
    """From the managed server's "starting" log line to its "ready" one, in this run (nan: not found)."""
    said = [(e.timestamp, e.user_message or "") for e in instance.all_logs(result.run_id)]
    started = next((t for t, message in said if message.startswith("vLLM server: starting")), None)
    ready = next((t for t, message in said if message.startswith("vLLM server: ready at")), None)
    return ready - started if started is not None and ready is not None else float("nan")


def evaluate(defs: dg.Definitions, instance, run: str, evaluation: dict) -> dict:
    """``eagle3_eval`` of training run ``run``: its metadata, the held-out set's numbers also under bare names."""
    metadata = run_metadata([stage(defs, instance, "eagle3_eval", run, evaluation)], "eagle3_eval")
    label = f"{metadata['eval_set']}/"
    return {**metadata, **{k.removeprefix(label): v for k, v in metadata.items() if k.startswith(label)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=None, help="Storage root + instance (default: a fresh one).")
    parser.add_argument("--partition", default="demo")
    parser.add_argument("--port", type=int, default=0, help="Generation server port (eval: the next); 0 = 8000.")
    parser.add_argument("--stored-backend", default="vllm", choices=["vllm", "transformers"])
    parser.add_argument("--scratch-cap-gb", type=float, default=DEFAULT_SCRATCH_CAP_GB)
    parser.add_argument("--max-prompts", type=int, default=64, help="Held-out prompts evaluated.")
    args = parser.parse_args()

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    root = (args.root or Path(tempfile.mkdtemp(prefix="online_features-"))).resolve()
    data = root / "data"
    if asset_folder(data, HIDDEN_STATES, args.partition).exists():
        raise SystemExit(
            f"{data} already holds hidden_states[{args.partition}]: online would link them, use a new root"
        )
    print(f"storage root {data}", flush=True)
    serving = embedded_resources(DEFAULT_EMBEDDED, **({"port": args.port} if args.port else {}))

    def definitions(backend: str) -> dg.Definitions:
        verifier = Verifier(embedded=DEFAULT_EMBEDDED, backend=backend, device="cpu")
        return build_definitions({"storage": StorageRoot(root=str(data)), **serving, "verifier": verifier})

    defs = {"online": definitions("vllm"), "stored": definitions(args.stored_backend)}
    ops = demo_ops(DEFAULT_EMBEDDED)
    recipe = {**ops["eagle3_checkpoint"]["config"], "partitions": [args.partition]}
    features = {
        "stored": {"config": recipe},
        "online": {"config": {**recipe, "features": "online", "scratch_cap_gb": args.scratch_cap_gb}},
    }
    evaluation = {
        "config": {
            **ops["eagle3_eval"]["config"],
            "suites": ["heldout"],
            "simulated": False,
            "max_prompts": args.max_prompts,
        }
    }
    work, results = asset_folder(data, EAGLE3_CHECKPOINT) / WORK_DIR, root / "results.json"
    r: dict[str, dict] = {side: {} for side in SIDES}
    (root / ".dagster").mkdir(parents=True, exist_ok=True)
    with dg.DagsterInstance.local_temp(tempdir=str(root / ".dagster")) as instance:
        for asset in ("prompts", "reasoning_samples", "token_sequences"):
            stage(defs["online"], instance, asset, args.partition, ops.get(asset, {}))
        before = disk_bytes(data)
        # Online first: it must find no hidden_states files to link.
        add_training_run(instance, RUNS["online"])
        with ScratchSampler(work) as scratch:
            run = stage(defs["online"], instance, EAGLE3_CHECKPOINT, RUNS["online"], features["online"])
        r["online"].update(
            train_s=step_seconds(instance, run, EAGLE3_CHECKPOINT),
            startup_s=server_startup_seconds(instance, run),
            checkpoint=run_metadata([run], EAGLE3_CHECKPOINT),
        )
        r["online"]["disk"] = disk_bytes(data) - before
        r["online"]["scratch"] = {"peak": scratch.peak, "busy": scratch.busy, "samples": scratch.samples}
        r["online"]["eval"] = evaluate(defs["online"], instance, RUNS["online"], evaluation)
        results.write_text(json.dumps(r, indent=1, default=str))  # the numbers so far, should a step fail
        before = disk_bytes(data)
        run = stage(defs["stored"], instance, HIDDEN_STATES, args.partition, TRAINING_SPLITS)
        r["stored"].update(extract_s=step_seconds(instance, run, HIDDEN_STATES), hs=run_metadata([run], HIDDEN_STATES))
        add_training_run(instance, RUNS["stored"])
        run = stage(defs["stored"], instance, EAGLE3_CHECKPOINT, RUNS["stored"], features["stored"])
        r["stored"].update(train_s=step_seconds(instance, run, EAGLE3_CHECKPOINT))
        r["stored"]["checkpoint"] = run_metadata([run], EAGLE3_CHECKPOINT)
        r["stored"]["disk"] = disk_bytes(data) - before
        r["stored"]["eval"] = evaluate(defs["stored"], instance, RUNS["stored"], evaluation)
        results.write_text(json.dumps(r, indent=1, default=str))
    left_in_scratch = sorted(work.glob(f"{ONLINE_SCRATCH_PREFIX}*"))
    identical = len({checkpoint_hash(Path(r[side]["checkpoint"]["path"])) for side in SIDES}) == 1

    online, stored = r["online"], r["stored"]
    problems = []  # reported under the table: a finished run's numbers are worth printing either way
    generated, rows = online["checkpoint"].get("generated_rows"), online["checkpoint"]["rows"]
    if generated != rows:
        problems.append(f"the online run generated {generated} of {rows} rows (the rest were linked)")
    prompt_ids = {side: json.loads(Path(r[side]["eval"]["report"]).read_text())["prompt_ids"] for side in SIDES}
    if prompt_ids["online"] != prompt_ids["stored"]:
        problems.append("the two drafts were evaluated on different held-out prompts")
    problems += [
        f"the {side} evaluation is not of the {side} checkpoint"
        for side in SIDES
        if Path(r[side]["eval"]["checkpoint"]) != Path(r[side]["checkpoint"]["path"])
    ]
    stored["wall_s"] = stored["extract_s"] + stored["train_s"]
    online["wall_s"] = online["train_s"]

    meta, k = stored["checkpoint"], stored["eval"]["num_speculative_tokens"]
    print(
        f"\n'{args.partition}': {meta['rows']} rows ({meta['validation_rows']} validation), {meta['tokens']} tokens; "
        f"recipe {recipe}, seed {meta['recipe'].get('seed')}; stored backend {args.stored_backend}, online vllm.\n"
        f"vLLM eval: K={k}, greedy, {len(prompt_ids['stored'])} held-out prompts (same ids); "
        "tau = 1 + accepted/drafts.\nOne run of each side on 2 shared CPU cores, online first: single figures, "
        "no medians or spread."
    )
    header = ["features", "tau (vLLM)", *[f"pos {i + 1}" for i in range(k)], "val_full_acc_0", "epochs"]
    header += ["training wall s", "bytes left on disk", "checkpoint"]
    print(" | ".join(header))
    walls = {
        "stored": f"{stored['wall_s']:.1f} (hidden_states {stored['extract_s']:.1f} + training "
        f"{stored['train_s']:.1f})",
        "online": f"{online['wall_s']:.1f} (server start-up {online['startup_s']:.1f} + training "
        f"{online['train_s'] - online['startup_s']:.1f})",
    }
    for side in SIDES:
        ev, ck = r[side]["eval"], r[side]["checkpoint"]
        cells = [side, f"{ev['acceptance_length']:.3f}", *[f"{ev[f'acceptance_pos_{i + 1}']:.3f}" for i in range(k)]]
        cells += [f"{ck.get('val_full_acc_0', float('nan')):.3f}", ck["epochs_run"], walls[side], r[side]["disk"]]
        print(" | ".join(map(str, [*cells, ck["path"]])))
    cap = round(args.scratch_cap_gb * 1e9)
    print(
        f"stored hidden_states: {stored['hs']['bytes_written']} bytes written ({stored['hs']['bytes_per_token']} "
        f"bytes/token), {stored['hs']['tokens_per_s']} tok/s, backend {stored['hs']['backend']}"
    )
    print(f"drafts with bit-identical config and weights (each run's own kept folder): {'yes' if identical else 'no'}")
    print(
        f"online scratch: peak {scratch.peak} bytes of the {cap}-byte cap ({scratch.peak / cap:.2e}); "
        f"{scratch.busy} of {scratch.samples} samples found files; {len(left_in_scratch)} scratch folders left"
    )
    print(
        f"online_vs_stored_wall_ratio={online['wall_s'] / stored['wall_s']:.3f} "
        f"(without the server start-up {(online['wall_s'] - online['startup_s']) / stored['wall_s']:.3f}); "
        f"online_vs_stored_disk_ratio={online['disk'] / stored['disk']:.3f}"
    )
    ratio = online["eval"]["acceptance_length"] / stored["eval"]["acceptance_length"]
    print(f"target: online tau within 2 % of stored: {'met' if abs(ratio - 1) <= 0.02 else 'NOT met'}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    print(f"online_acceptance_ratio={ratio:.4f} peak_scratch_bytes={scratch.peak}")
    if problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
