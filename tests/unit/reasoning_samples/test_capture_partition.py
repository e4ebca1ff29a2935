"""``capture_partition``, called directly (no Dagster), against a scripted server (an httpx mock transport):
what it asks, what it stores, what it counts, what a re-capture leaves alone, and which sample set a
changed verifier or changed settings go to."""

from __future__ import annotations

import json
import logging
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from eagle_assets.core.layout import current_version, samples_folder
from eagle_assets.core.shards import shard_paths
from eagle_assets.plugin_manager import dataset_source
from eagle_assets.prompts.splits import MissingPrompts
from eagle_assets.prompts.write import write_prompts
from eagle_assets.reasoning_samples.capture_partition import CaptureSettings, capture_partition
from eagle_assets.reasoning_samples.engine import ClientSettings
from eagle_assets.reasoning_samples.recipe import read_recipe
from eagle_assets.reasoning_samples.requests import Sampling
from eagle_assets.reasoning_samples.sample_sets import SettingsChanged
from eagle_assets.reasoning_samples.sdk_http import httpx
from eagle_assets.reasoning_samples.store import load_samples
from eagle_assets.reasoning_samples.variants import SamplingVariant, read_variants
from tests.helpers.upstream import model_folder, served_from

LOG = logging.getLogger("tests.reasoning_samples.capture_partition")
URL = "http://verifier/v1"
CLIENT = ClientSettings(concurrency=4, max_retries=0)


class Server:
    """Just enough of vLLM's API: every chat answer is ok, except for the questions in ``failing`` (HTTP 400)
    and ``cut`` (stopped at max_tokens); ``asked`` counts the questions asked, ``bodies`` keeps the requests."""

    def __init__(self, failing=(), cut=()):
        self.failing, self.cut = set(failing), set(cut)
        self.asked: Counter = Counter()
        self.bodies: list[dict] = []
        self.entered = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        if request.url.path == "/tokenize":
            return httpx.Response(404)  # no marker ids: the reasoning parser's split is used
        payload = json.loads(request.content)
        self.bodies.append(payload)
        question = payload["messages"][-1]["content"]
        self.asked[question] += 1
        if question in self.failing:
            return httpx.Response(400, text="bad request")
        tokens = list(range(10, 40))
        answer = {"reasoning": f"thinking about {question}", "content": f"answer to {question}"}
        return httpx.Response(
            200,
            json={
                "model": "tiny",
                "choices": [
                    {
                        "index": 0,
                        "message": answer,
                        "token_ids": tokens,
                        "finish_reason": "length" if question in self.cut else "stop",
                    }
                ],
                "prompt_token_ids": [1, 2, 3],
                "usage": {"prompt_tokens": 3, "completion_tokens": len(tokens)},
            },
        )

    @contextmanager
    def serve(self):
        self.entered += 1
        yield [URL]


def write_questions(tmp_path: Path, conversations: list[list[dict]]) -> Path:
    """A prompts table (through the prompts stage) of these conversations; its path."""
    source = tmp_path / "questions.jsonl"
    source.write_text("\n".join(json.dumps({"messages": m}) for m in conversations))
    written = write_prompts(dataset_source("jsonl"), tmp_path / "prompts" / "jsonl", LOG, location=str(source))
    return written.path


def questions(n: int) -> list[list[dict]]:
    return [[{"role": "user", "content": f"q{i}"}] for i in range(n)]


def run_capture(prompts_path, folder, server, settings=CaptureSettings(), verifier=None, **kwargs):
    """Capture into the partition ``folder`` from ``server``, answering as ``verifier`` (by default a
    model folder beside ``folder``)."""
    verifier = verifier or served_from(model_folder(Path(folder).parent / "model"))
    return capture_partition(
        prompts_path,
        folder,
        "jsonl",
        settings,
        CLIENT,
        server.serve,
        LOG,
        verifier=verifier,
        transport=httpx.MockTransport(server),
        **kwargs,
    )


def test_every_prompt_is_captured_once_and_counted_and_errors_are_retried(tmp_path):
    prompts = write_questions(tmp_path, questions(6))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    server = Server(failing={"q1"}, cut={"q2"})
    first = run_capture(prompts, folder, server)
    assert server.entered == 1 and server.asked == Counter({f"q{i}": 1 for i in range(6)})
    counts = first.counts
    assert (counts["prompts_selected"], counts["requests_selected"], counts["ok"], counts["errors"]) == (6, 6, 5, 1)
    assert counts["missing"] == 0 and counts["truncated"] == 1 and counts["truncation_rate"] == pytest.approx(0.2)
    assert counts["error_rate"] == pytest.approx(1 / 6) and counts["completion_tokens_total"] == 5 * 30
    assert counts["captured_this_run"] == 6 and counts["errors_this_run"] == 1 and counts["http_attempts"] == 6
    assert counts["server_model"] == "tiny" and counts["vllm_version"] == "0.32.0"
    assert counts["reasoning_parser"] == "qwen3"
    assert first.quality["quality/ok"] == 4 and first.quality["quality/truncated"] == 1
    assert first.quality["quality/error"] == 1 and first.quality["quality/non_ok_share"] == pytest.approx(2 / 6)
    assert "| truncated | 1 | 16.7% |" in first.quality_examples
    [failed] = [r for r in first.samples.to_pylist() if r["status"] == "error"]
    assert first.error_examples == [
        f"prompt {failed['prompt_id']}: HTTP 400: bad request (retried on the next materialization)"
    ]
    # On disk: the recipe's sample set, named current, with its recipe (the turn mode in it), the shards, whose
    # every row names the recipe, and the classes of every row.
    rid = first.recipe.recipe_id
    assert first.folder == folder / "recipes" / rid == samples_folder(tmp_path, "jsonl")
    assert current_version(folder) == rid and read_recipe(first.folder) == first.recipe
    assert json.loads((first.folder / "recipe.json").read_text())["settings"]["turns"] == "last"
    [quality_file] = first.folder.glob("quality-*.parquet")
    assert shard_paths(first.folder) and pq.read_table(quality_file).num_rows == 6
    assert load_samples(first.folder).num_rows == first.samples.num_rows == 6
    assert set(load_samples(first.folder)["recipe"].to_pylist()) == {rid}
    assert first.other_recipes_rows == {}

    server.failing.clear()
    second = run_capture(prompts, folder, server)
    assert server.asked["q1"] == 2 and sum(server.asked.values()) == 7  # only the error is asked again
    assert second.counts["captured_this_run"] == 1 and second.counts["ok"] == 6 and second.counts["errors"] == 0
    assert second.data_version != first.data_version

    quality_bytes = quality_file.read_bytes()
    third = run_capture(prompts, folder, server)
    assert server.entered == 2  # nothing left to ask: the server is not even started
    assert third.counts["captured_this_run"] == 0 and "http_attempts" not in third.counts
    assert third.data_version == second.data_version
    # The classes changed once (q1's retry): a second quality file; the first one is as it was.
    assert len(list(first.folder.glob("quality-*.parquet"))) == 2 and quality_file.read_bytes() == quality_bytes


def test_missing_prompts_raise_before_anything_is_written(tmp_path):
    folder = tmp_path / "reasoning_samples" / "jsonl"
    with pytest.raises(MissingPrompts, match="materialize the `prompts` asset"):
        run_capture(tmp_path / "prompts" / "jsonl" / "prompts.parquet", folder, Server())
    assert not folder.exists()


def test_only_the_chosen_splits_are_asked_and_reported(tmp_path):
    prompts = write_questions(tmp_path, questions(30))
    splits = dict(zip(*pq.read_table(prompts, columns=["prompt_id", "split"]).to_pydict().values()))
    train = {pid for pid, split in splits.items() if split == "train"}
    server = Server()
    captured = run_capture(prompts, tmp_path / "samples", server, CaptureSettings(splits=["train"]))
    assert set(captured.samples["prompt_id"].to_pylist()) == train and 0 < len(train) < 30
    assert captured.counts["prompts_selected"] == len(train) == sum(server.asked.values())


def test_sampling_variants_share_the_prompts_and_are_counted(tmp_path):
    prompts = write_questions(tmp_path, questions(20))
    variants = (
        SamplingVariant("thinking", 0.5),
        SamplingVariant("instant", 0.5, temperature=0.0, chat_template_kwargs={"enable_thinking": False}),
    )
    settings = CaptureSettings(sampling=Sampling(temperature=0.6, max_tokens=64), variants=variants)
    server = Server()
    captured = run_capture(prompts, tmp_path / "samples", server, settings)
    by_variant = captured.variant_ok_samples
    assert (
        set(by_variant) == {"thinking", "instant"} and sum(by_variant.values()) == 20 and min(by_variant.values()) > 0
    )
    instant = [b for b in server.bodies if b["temperature"] == 0.0]
    assert len(instant) == by_variant["instant"]
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in instant)
    assert read_variants(captured.folder) == list(variants)  # the recipe records them


def test_all_turns_asks_every_assistant_turn_in_order(tmp_path):
    conversation = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "dataset answer"},
        {"role": "user", "content": "second"},
    ]
    prompts = write_questions(tmp_path, [conversation, *questions(2)])
    server = Server()
    captured = run_capture(prompts, tmp_path / "samples", server, CaptureSettings(turns="all"))
    assert captured.counts["prompts_selected"] == 3 and captured.counts["requests_selected"] == 4
    assert captured.counts["ok"] == 4 and captured.counts["missing"] == 0
    assert server.asked == Counter({"first": 1, "second": 1, "q0": 1, "q1": 1})
    [second] = [b for b in server.bodies if b["messages"][-1]["content"] == "second"]
    earlier = second["messages"][1]  # the verifier's own earlier answer, not the dataset's
    assert (earlier["role"], earlier["content"], earlier["reasoning"]) == (
        "assistant",
        "answer to first",
        "thinking about first",
    )
    assert sorted(captured.samples["turn"].to_pylist()) == [0, 0, 0, 1]


# ----------------------------------------------------------------------------------- sample sets
def samples_on_disk(partition_folder: Path) -> dict[str, int]:
    """Recipe id -> rows stored in its set (every shard row)."""
    return {
        rid.name: sum(pq.read_metadata(p).num_rows for p in shard_paths(rid))
        for rid in sorted((partition_folder / "recipes").iterdir())
    }


@pytest.mark.parametrize(
    ("setting", "changed"),
    [
        ("temperature", CaptureSettings(sampling=Sampling(temperature=0.8))),
        ("max_tokens", CaptureSettings(sampling=Sampling(max_tokens=256))),
    ],
)
def test_changed_sampling_is_refused_naming_the_change_and_nothing_is_written(tmp_path, setting, changed):
    prompts = write_questions(tmp_path, questions(4))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    server = Server()
    first = run_capture(prompts, folder, server)
    before = samples_on_disk(folder)
    old, new = CaptureSettings().sampling, changed.sampling
    with pytest.raises(SettingsChanged) as refused:
        run_capture(prompts, folder, server, changed)
    message = str(refused.value)
    # The one change, and nothing else, between the parentheses.
    assert f"({setting} {json.dumps(getattr(old, setting))} -> {json.dumps(getattr(new, setting))})" in message
    assert "holds 4 samples (4 ok)" in message and str(first.folder) in message
    assert "set these back" in message and "on_changed_settings: new_sample_set" in message
    # Nothing asked, nothing written: the current set is still the first one, alone on disk.
    assert server.entered == 1 and current_version(folder) == first.recipe.recipe_id
    assert samples_on_disk(folder) == before


def test_a_new_sample_set_when_asked_keeps_the_old_one_and_counts_it_and_setting_back_reuses_it(tmp_path):
    prompts = write_questions(tmp_path, questions(4))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    server = Server()
    first = run_capture(prompts, folder, server)
    hot = CaptureSettings(sampling=Sampling(temperature=0.8))
    second = run_capture(prompts, folder, server, hot, on_changed_settings="new_sample_set")
    assert second.recipe.recipe_id != first.recipe.recipe_id and current_version(folder) == second.recipe.recipe_id
    assert second.counts["captured_this_run"] == 4 and sum(server.asked.values()) == 8
    assert {json.loads(s)["temperature"] for s in second.samples["sampling"].to_pylist()} == {0.8}
    assert second.other_recipes_rows == {first.recipe.recipe_id: 4}  # the old set stays, counted
    assert samples_on_disk(folder) == {first.recipe.recipe_id: 4, second.recipe.recipe_id: 4}
    # The same answers under another recipe are another data version.
    assert second.data_version != first.data_version

    # Setting temperature back returns to the first set as it is (refuse or not: that set exists).
    back = run_capture(prompts, folder, server)
    assert back.folder == first.folder and back.counts["captured_this_run"] == 0 and server.entered == 2
    assert back.data_version == first.data_version and back.other_recipes_rows == {second.recipe.recipe_id: 4}


def test_changed_settings_over_a_set_without_ok_samples_start_a_new_set(tmp_path):
    prompts = write_questions(tmp_path, questions(2))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    first = run_capture(prompts, folder, Server(failing={"q0", "q1"}))
    assert first.counts["ok"] == 0
    second = run_capture(prompts, folder, Server(), CaptureSettings(turns="all"))
    assert second.folder != first.folder and second.counts["ok"] == 2


def test_another_verifier_gets_its_own_set_and_switching_back_asks_nothing(tmp_path):
    prompts = write_questions(tmp_path, questions(4))
    folder = tmp_path / "reasoning_samples" / "jsonl"
    qwen = served_from(model_folder(tmp_path / "qwen", vocabulary="qwen"))
    kimi = served_from(model_folder(tmp_path / "kimi", vocabulary="kimi"), reasoning_parser="kimi_k2")
    server = Server()
    first = run_capture(prompts, folder, server, verifier=qwen)
    # Another model (its tokenizer, identity and parser differ) with changed sampling too: no refusal, its own set.
    other = run_capture(prompts, folder, server, CaptureSettings(sampling=Sampling(temperature=1.0)), verifier=kimi)
    assert other.folder != first.folder and other.counts["captured_this_run"] == 4
    assert other.recipe.verifier.tokenizer_hash != first.recipe.verifier.tokenizer_hash
    assert other.counts["reasoning_parser"] == "kimi_k2" and other.other_recipes_rows == {first.recipe.recipe_id: 4}
    assert samples_folder(tmp_path, "jsonl") == other.folder

    asked = sum(server.asked.values())
    back = run_capture(prompts, folder, server, verifier=qwen)
    assert back.folder == first.folder and samples_folder(tmp_path, "jsonl") == first.folder
    assert back.counts["captured_this_run"] == 0 and sum(server.asked.values()) == asked and server.entered == 2
    assert back.data_version == first.data_version
