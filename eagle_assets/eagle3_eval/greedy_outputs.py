"""``greedy_outputs.parquet``: the verifier's greedy outputs an evaluation measured acceptance on, per prompt set,
so that other drafts can be simulated on the same outputs later."""

from __future__ import annotations

import pyarrow as pa

from eagle_assets.eagle3_eval.numbers import Evaluation
from eagle_assets.eagle3_eval.plan import EvalPlan

OUTPUTS_SCHEMA = pa.schema(
    [
        ("eval_set", pa.string()),
        ("prompt_id", pa.string()),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("token_ids", pa.list_(pa.int32())),
        ("finish_reason", pa.string()),
        ("turn", pa.int32()),
    ]
)


def greedy_outputs(plan: EvalPlan, evaluation: Evaluation) -> pa.Table:
    """The verifier's greedy outputs the numbers were measured on (to re-simulate other drafts on them)."""
    served_sets = [
        (plan.heldout.name, evaluation.served),
        (plan.ood.name, evaluation.ood),
        *evaluation.suites.items(),
    ]
    return pa.Table.from_pylist(
        [
            {
                "eval_set": name,
                "prompt_id": r["prompt_id"],
                "prompt_token_ids": r["prompt_token_ids"],
                "token_ids": r["token_ids"],
                "finish_reason": r["finish_reason"],
                "turn": r.get("turn", -1),
            }
            for name, served in served_sets
            if served is not None
            for r in served.ok_rows
        ],
        schema=OUTPUTS_SCHEMA,
    )
