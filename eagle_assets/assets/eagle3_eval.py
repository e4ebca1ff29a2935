"""The ``eagle3_eval`` asset: how many tokens the draft saves, measured by vLLM speculative decoding.

The verifier is served with the latest ``eagle3_checkpoint`` as its EAGLE-3 draft; held-out prompts
(split ``heldout`` of ``prompts``: training reads only split ``train``) are sent greedily, and the
acceptance length and per-position acceptance come from vLLM's own spec-decode counters. The
simulated value of the same draft on the same greedy outputs (verifier hidden states, speculators'
forward) is recorded beside it. Both use vLLM's convention τ = 1 + accepted / drafts.
"""

# No `from __future__ import annotations`: Dagster reads the asset function's annotations at runtime.
import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field

from eagle_assets.assets import eagle3_checkpoint as checkpoint_asset
from eagle_assets.assets import prompts as prompts_asset
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer
from eagle_assets.storage import combined_hash, write_json, write_parquet

ASSET = "eagle3_eval"
CHECKPOINT_ASSET = checkpoint_asset.ASSET
HELDOUT_SPLIT = "heldout"
REPORT_FILE = "report.json"
OUTPUTS_FILE = "greedy_outputs.parquet"
# Bump when the same checkpoint and settings would be measured differently.
CODE_VERSION = "eagle3_eval-1"
OUTPUTS_SCHEMA = pa.schema([("prompt_id", pa.string()), ("prompt_token_ids", pa.list_(pa.int32())),
                            ("token_ids", pa.list_(pa.int32())), ("finish_reason", pa.string())])


class Eagle3EvalConfig(dg.Config):
    """Launchpad settings of ``eagle3_eval``."""

    num_speculative_tokens: int = Field(default=3, ge=1, description="Draft tokens vLLM proposes per step (K).")
    max_prompts: int = Field(
        default=64, ge=1, description="Held-out prompts to send (the first by prompt id, over the partitions)."
    )
    max_tokens: int = Field(default=1024, ge=1, description="Most new tokens per greedy request.")
    partitions: list[str] = Field(
        default_factory=list,
        description="Dataset partitions whose held-out prompts are used; empty = the checkpoint's training partitions.",
    )
    concurrency: int = Field(default=64, ge=1, description="Requests in flight at once.")
    port: int = Field(
        default=0, ge=0,
        description="Port of the speculating server; 0 = vllm_server.port + 1 (a kept-alive generation "
        "server on vllm_server.port stays untouched).",
    )
    simulated: bool = Field(
        default=True, description="Also compute the offline simulated acceptance on the same greedy outputs."
    )
    measure_baseline: bool = Field(
        default=False,
        description="Also serve without the draft (a second server start) to record tokens/s with and without.",
    )
    min_acceptance_length: float = Field(
        default=2.0, ge=1.0,
        description="Floor of the acceptance_length check (vLLM-measured τ). 2.0 = at least one draft token "
        "accepted per step on average; the embedded demo's draft reaches about 3.8 at K=3.",
    )


def latest_checkpoint(instance: dg.DagsterInstance) -> Path:
    """The latest ``eagle3_checkpoint`` folder, which must still exist to be served."""
    folder = checkpoint_asset.latest_checkpoint(instance)
    if not (folder / "config.json").exists():
        raise dg.Failure(f"the latest {CHECKPOINT_ASSET} folder {folder} is gone: re-materialize {CHECKPOINT_ASSET}")
    return folder


def training_partitions(checkpoint: Path) -> list[str]:
    training = checkpoint / "training.json"
    if not training.exists():
        return []
    return list(json.loads(training.read_text()).get("data", {}).get("partitions", []))


def heldout_requests(root: Path, partitions: list[str], limit: int):
    """The first ``limit`` held-out prompts (by prompt id) of ``partitions``, as capture requests."""
    from eagle_assets.generation.engine import PromptRequest

    rows = []
    for partition in partitions:
        path = root / "prompts" / partition / prompts_asset.FILE_NAME
        if not path.exists():
            raise dg.Failure(f"{path} is missing: materialize prompts for partition '{partition}' first")
        table = pq.read_table(path, columns=["prompt_id", "messages", "split"])
        rows += table.filter(pc.equal(table["split"], HELDOUT_SPLIT)).to_pylist()
    rows.sort(key=lambda r: r["prompt_id"])
    return [PromptRequest(r["prompt_id"], [dict(m) for m in r["messages"]], HELDOUT_SPLIT) for r in rows[:limit]]


def build(partitions: dg.PartitionsDefinition) -> dict:
    @dg.asset(
        name=ASSET,
        deps=[CHECKPOINT_ASSET, dg.AssetDep("prompts", partition_mapping=dg.AllPartitionMapping())],
        kinds={"vllm", "speculators"},
        group_name="evaluation",
        code_version=CODE_VERSION,
        pool="gpu",
    )
    def eagle3_eval(context: dg.AssetExecutionContext, config: Eagle3EvalConfig, storage: StorageRoot,
                    vllm_server: VLLMServer, verifier: Verifier) -> dg.MaterializeResult:
        """Acceptance of the latest EAGLE-3 draft on held-out prompts, measured by vLLM speculative decoding.

        Metadata: ``acceptance_length`` (τ = 1 + accepted/drafts, vLLM's convention),
        ``acceptance_pos_1..K`` (accepted at position k / drafts), ``simulated_acceptance_length`` (the
        draft's chained proposals against the verifier's greedy tokens, same convention), tokens/s.
        """
        from eagle_assets.evaluation.run import EvaluationError, evaluate

        checkpoint = latest_checkpoint(context.instance)
        root = Path(storage.root)
        chosen = config.partitions or training_partitions(checkpoint) or partitions.get_partition_keys()
        requests = heldout_requests(root, chosen, config.max_prompts)
        context.log.info(f"evaluating {checkpoint} on {len(requests)} held-out prompts of {chosen}, "
                         f"K={config.num_speculative_tokens}, greedy, max_tokens {config.max_tokens}")
        try:
            result = evaluate(
                checkpoint, requests, vllm_server, verifier if config.simulated else None,
                num_speculative_tokens=config.num_speculative_tokens, max_tokens=config.max_tokens,
                concurrency=config.concurrency, port=config.port or vllm_server.port + 1,
                measure_baseline=config.measure_baseline, logger=context.log,
            )
        except EvaluationError as err:
            raise dg.Failure(str(err)) from err
        numbers = result.metadata()
        report = {
            "checkpoint": str(checkpoint),
            "partitions": chosen,
            "prompt_ids": [r.prompt_id for r in requests],
            "config": config.model_dump(),
            "server_model": result.served.server_model,
            "vllm_version": result.served.vllm_version,
            "dagster_run_id": context.run.run_id,
            **numbers,
        }
        folder = storage.path(ASSET) / checkpoint.name
        write_json(report, folder / REPORT_FILE)
        # The verifier's greedy outputs the numbers were measured on (re-simulate other drafts on them).
        write_parquet(pa.Table.from_pylist(
            [{"prompt_id": r["prompt_id"], "prompt_token_ids": r["prompt_token_ids"], "token_ids": r["token_ids"],
              "finish_reason": r["finish_reason"]} for r in result.served.ok_rows],
            schema=OUTPUTS_SCHEMA), folder / OUTPUTS_FILE)
        version = combined_hash([checkpoint.name, json.dumps(numbers, sort_keys=True)])[:16]
        return dg.MaterializeResult(
            metadata={
                **numbers,
                "min_acceptance_length": config.min_acceptance_length,
                "checkpoint": dg.MetadataValue.path(str(checkpoint)),
                "report": dg.MetadataValue.path(str(folder / REPORT_FILE)),
                "greedy_outputs": dg.MetadataValue.path(str(folder / OUTPUTS_FILE)),
                "partitions": ", ".join(chosen),
            },
            data_version=dg.DataVersion(version),
        )

    @dg.asset_check(asset=eagle3_eval, description="vLLM-measured acceptance length is at least the configured "
                    "floor (min_acceptance_length of the evaluation run).")
    def acceptance_length_above_floor(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        event = context.instance.get_latest_materialization_event(dg.AssetKey(ASSET))
        if event is None:
            return dg.AssetCheckResult(passed=False, description=f"{ASSET} has never been materialized")
        metadata = event.asset_materialization.metadata
        tau, floor = metadata["acceptance_length"].value, metadata["min_acceptance_length"].value
        return dg.AssetCheckResult(
            passed=tau >= floor,
            metadata={"acceptance_length": tau, "min_acceptance_length": floor},
            description=None if tau >= floor else f"τ {tau:.3f} < floor {floor}: train longer or on more samples",
        )

    return {"assets": [eagle3_eval], "checks": [acceptance_length_above_floor]}
