"""What one eagle3_eval measures, decided without Dagster or a server: the checkpoint, the partitions of
both prompt sets, and their prompts minus the problems the checkpoint trained on."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from eagle_assets.core.files import write_json, write_parquet
from eagle_assets.eagle3_eval.plan import (
    EvalPlanError,
    check_checkpoint,
    evaluation_only_sources,
    ood_partitions,
    plan_evaluation,
    set_label,
    training_partitions,
)
from tests.helpers.logs import Levels
from tests.helpers.synthetic import publish_prompts


def write_checkpoint(folder: Path, training_run: str | None, partitions: list[str], trained: list[tuple[str, str]]):
    """A checkpoint folder with a training.json naming its training folder's rows (prompt_id, group_id)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    data = folder.parent / f"data-{folder.name}"
    write_parquet(pa.Table.from_pylist([{"prompt_id": p, "group_id": g} for p, g in trained]), data / "rows.parquet")
    training = {"data": {"partitions": partitions, "folder": str(data)}}
    if training_run is not None:
        training["training_run"] = training_run
    write_json(training, folder / "training.json")
    return folder


def test_a_checkpoint_must_belong_to_the_training_run(tmp_path):
    kept = tmp_path / "eagle3_checkpoint"
    with pytest.raises(EvalPlanError, match=r"is gone or not a checkpoint folder: .*training run 'v1'"):
        check_checkpoint(kept / "gone", "v1")
    mine = write_checkpoint(kept / "aaaa", "v1", ["demo"], [])
    assert check_checkpoint(mine, "v1") == mine
    with pytest.raises(EvalPlanError, match="belongs to training run 'v1', not 'v2': evaluate it in partition 'v1'"):
        check_checkpoint(mine, "v2")
    unrecorded = write_checkpoint(kept / "bbbb", None, ["jsonl"], [])
    assert check_checkpoint(unrecorded, "v2") == unrecorded and training_partitions(unrecorded) == ["jsonl"]
    (tmp_path / "bare").mkdir()
    assert training_partitions(tmp_path / "bare") == []


def test_out_of_distribution_partitions_are_evaluation_only_sources(tmp_path):
    sources = {
        "demo": SimpleNamespace(evaluation_only=False),
        "demo_ood": SimpleNamespace(evaluation_only=True),
        "mine": SimpleNamespace(evaluation_only=True),
    }
    evaluation_only = evaluation_only_sources(sources)
    assert evaluation_only == ["demo_ood", "mine"]
    with pytest.raises(EvalPlanError, match=r"ood_partitions \['demo'\] are not evaluation-only sources"):
        ood_partitions(["demo_ood", "demo"], evaluation_only, tmp_path, Levels())
    assert ood_partitions([], evaluation_only, tmp_path, Levels()) == []
    assert ood_partitions(["mine"], evaluation_only, tmp_path, Levels()) == ["mine"]  # as asked, even unmaterialized
    publish_prompts(tmp_path, "demo_ood", [("o1", "heldout", "x")])
    log = Levels()
    assert ood_partitions(None, evaluation_only, tmp_path, log) == ["demo_ood"]
    assert log.infos == ["evaluation-only partitions without materialized prompts, not evaluated: ['mine']"]
    assert set_label("ood", ["demo_ood", "mine"]) == "ood[demo_ood+mine]"


def test_the_plan_holds_both_sets_without_the_problems_the_checkpoint_trained_on(tmp_path):
    publish_prompts(
        tmp_path, "demo", [("a", "heldout", "g1"), ("b", "heldout", "g2"), ("c", "train", "g3"), ("d", "heldout", "g4")]
    )
    publish_prompts(tmp_path, "demo_ood", [("o2", "heldout", "x2"), ("o1", "heldout", "x1"), ("o3", "heldout", "g3")])
    checkpoint = write_checkpoint(tmp_path / "eagle3_checkpoint" / "aaaa", "v1", ["demo"], [("c", "g3"), ("z", "g2")])
    log = Levels()
    plan = plan_evaluation(
        checkpoint,
        tmp_path,
        partitions=[],
        known_partitions=["demo", "jsonl"],
        ood_requested=None,
        evaluation_only=["demo_ood"],
        max_prompts=64,
        log=log,
    )
    assert plan.checkpoint == checkpoint and plan.partitions == ["demo"]  # the checkpoint's training partitions
    assert [r.prompt_id for r in plan.heldout.requests] == ["a", "d"] and plan.heldout.excluded_trained == 1
    assert [r.prompt_id for r in plan.ood.requests] == ["o1", "o2"] and plan.ood.excluded_trained == 1
    assert plan.label == "heldout[demo]" and plan.ood_label == "ood[demo_ood]"
    assert [w.split(":")[0] for w in log.warnings] == ["in-distribution", "out-of-distribution"]
    assert "1 held-out prompts left out: the checkpoint trained or validated on their problem" in log.warnings[0]

    capped = plan_evaluation(
        checkpoint,
        tmp_path,
        partitions=["demo"],
        known_partitions=[],
        ood_requested=[],
        evaluation_only=["demo_ood"],
        max_prompts=1,
        log=Levels(),
    )
    assert [r.prompt_id for r in capped.heldout.requests] == ["a"] and capped.ood.requests == []
    assert capped.ood_label is None


def test_a_plan_without_prompts_to_send_is_refused_before_any_server_starts(tmp_path):
    publish_prompts(tmp_path, "demo", [("a", "heldout", "g1"), ("c", "train", "g3")])
    checkpoint = write_checkpoint(tmp_path / "ckpt", "v1", [], [("a", "g1")])
    with pytest.raises(EvalPlanError, match=r"no held-out prompt of \['demo'\] is left once the 1"):
        plan_evaluation(
            checkpoint,
            tmp_path,
            partitions=[],
            known_partitions=["demo"],
            ood_requested=[],
            evaluation_only=[],
            max_prompts=8,
            log=Levels(),
        )
    json_file = checkpoint / "training.json"
    json_file.write_text(json.dumps({"data": {"folder": str(tmp_path / "moved")}}))
    with pytest.raises(EvalPlanError, match="the training folder was deleted or moved"):
        plan_evaluation(
            checkpoint,
            tmp_path,
            partitions=["demo"],
            known_partitions=[],
            ood_requested=[],
            evaluation_only=[],
            max_prompts=8,
            log=Levels(),
        )
    with pytest.raises(EvalPlanError, match="ood_partitions"):
        write_checkpoint(tmp_path / "ok", "v1", ["demo"], [("q", "gq")])
        plan_evaluation(
            tmp_path / "ok",
            tmp_path,
            partitions=[],
            known_partitions=[],
            ood_requested=["demo"],
            evaluation_only=[],
            max_prompts=8,
            log=Levels(),
        )
