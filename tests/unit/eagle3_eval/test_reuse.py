"""An unchanged evaluation is reused, never a changed one: the measurement key moves with everything the
measurement depends on, a stored measurement is found only while its files still hold it, and the Dagster
result of a reuse is the measuring materialization's metadata and data version."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest

from eagle_assets.core.layout import EAGLE3_EVAL
from eagle_assets.eagle3_eval.acceptance import MEASUREMENT_KEY, AcceptanceSettings
from eagle_assets.eagle3_eval.eval_sets import EvalSet
from eagle_assets.eagle3_eval.plan import EvalPlan
from eagle_assets.eagle3_eval.result import stored_measurement
from eagle_assets.eagle3_eval.reuse import measurement_key, stored_report
from eagle_assets.reasoning_samples.requests import PromptRequest
from eagle_assets.resources import VLLMServer


def served_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "verifier"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def a_plan(tmp_path: Path, content: str = "2+2?", checkpoint: str = "0123abcd") -> EvalPlan:
    requests = [PromptRequest(p, [{"role": "user", "content": f"{p}: {content}"}], "heldout") for p in ("a", "b")]
    heldout = EvalSet("in-distribution", ["demo"], requests, excluded_trained=0)
    ood = EvalSet("out-of-distribution", [], [], 0)
    return EvalPlan(tmp_path / "eagle3_checkpoint" / checkpoint, ["demo"], heldout, ood)


def key_of(plan, server, config=None, settings=None):
    config = {"max_prompts": 64, "reuse": True} if config is None else config
    settings = settings or AcceptanceSettings(port=8101)
    return measurement_key(plan, settings, server, None, config, training_run="demo", code_version="eagle3_eval-4")


def test_the_key_moves_with_what_is_measured_and_is_none_for_servers_it_cannot_name(tmp_path):
    folder = served_folder(tmp_path)
    server = VLLMServer(model=str(folder), port=8100)
    plan = a_plan(tmp_path)
    key = key_of(plan, server)
    assert key and key == key_of(a_plan(tmp_path), VLLMServer(model=str(folder), port=8100))
    assert key == key_of(plan, server, {"max_prompts": 64, "reuse": False})  # whether to reuse is not measured
    changed = [
        key_of(a_plan(tmp_path, content="3+3?"), server),  # a prompt's text
        key_of(a_plan(tmp_path, checkpoint="4567cdef"), server),  # the checkpoint
        key_of(plan, server, {"max_prompts": 32, "reuse": True}),  # a launchpad setting
        key_of(plan, server, settings=AcceptanceSettings(port=8101, num_speculative_tokens=4)),  # the draft's K
        key_of(plan, VLLMServer(model=str(folder), port=8100, max_num_seqs=8)),  # the server's launch
    ]
    assert len({key, *changed}) == 6
    (folder / "model.safetensors").write_bytes(b"other weights")  # the served weights, under the same path
    assert key_of(plan, server) != key
    assert key_of(plan, VLLMServer(mode="external", base_urls=["http://h:8000/v1"])) is None
    assert key_of(plan, VLLMServer(model="org/model-on-the-hub")) is None


def stored_measurement_files(folder: Path, key: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps({MEASUREMENT_KEY: key, "data_version": "dv1"}))
    (folder / "greedy_outputs.parquet").write_bytes(b"rows")
    return {
        MEASUREMENT_KEY: key,
        "report": str(folder / "report.json"),
        "greedy_outputs": str(folder / "greedy_outputs.parquet"),
    }


def test_a_stored_measurement_counts_only_while_its_files_still_hold_it(tmp_path):
    metadata = stored_measurement_files(tmp_path / "eval", "k1")
    assert stored_report(metadata, "k1")["data_version"] == "dv1"
    assert stored_report(metadata, "k2") is None  # measured under another key
    assert stored_report({**metadata, "requests": str(tmp_path / "eval" / "gone.parquet")}, "k1") is None
    stored_measurement_files(tmp_path / "eval", "k2")  # measured again with other settings: files overwritten
    assert stored_report(metadata, "k1") is None


@pytest.fixture
def instance():
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def materialize(instance, metadata: dict, run_id: str) -> None:
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            EAGLE3_EVAL,
            partition="demo",
            metadata={**metadata, "measured_in_run": run_id, "acceptance_length": 3.5},
        )
    )


def test_a_reuse_returns_the_measuring_materializations_metadata_and_data_version(tmp_path, instance):
    materialize(instance, stored_measurement_files(tmp_path / "a", "k1"), "run-1")
    materialize(instance, stored_measurement_files(tmp_path / "b", "k2"), "run-2")  # newer, another key
    reused = stored_measurement(instance, "demo", "k1")
    assert reused.data_version == dg.DataVersion("dv1")
    assert reused.metadata["measured_in_run"].value == "run-1" and reused.metadata["acceptance_length"].value == 3.5
    assert stored_measurement(instance, "demo", "k3") is None
    assert stored_measurement(instance, "other-run", "k1") is None
    (tmp_path / "a" / "greedy_outputs.parquet").unlink()
    assert stored_measurement(instance, "demo", "k1") is None


def test_the_report_records_its_key_and_data_version(tmp_path):
    from eagle_assets.eagle3_eval.acceptance import build_report
    from eagle_assets.eagle3_eval.numbers import Evaluation
    from tests.unit.eagle3_eval.test_acceptance import a_plan as report_plan
    from tests.unit.eagle3_eval.test_acceptance import served

    evaluation = Evaluation(served(["a", "b"], 10, (8, 6, 4)), None, None, 3)
    plan = replace(report_plan(tmp_path, []))
    report = build_report(
        plan, evaluation, tmp_path / "out", training_run="v1", config={}, dagster_run_id="r1", measurement_key="k9"
    )
    assert report.report[MEASUREMENT_KEY] == "k9" and report.report["data_version"] == report.data_version
