"""The reasoning_samples asset against the session's real vLLM server (the tiny verifier).

Generation is kept short (few prompts, small max_tokens): the suite runs on 2 CPU cores.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import httpx
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from eagle_assets.core.layout import current_version, prompts_file, samples_folder
from eagle_assets.core.shards import shard_paths
from eagle_assets.orchestration.partitions import source_partitions
from eagle_assets.prompts import asset as prompts
from eagle_assets.reasoning_samples import asset as reasoning_samples
from eagle_assets.reasoning_samples.store import load_samples
from eagle_assets.resources import StorageRoot, Verifier, VLLMServer
from tests.helpers.capture import kill_after_rows

MAX_TOKENS = 200


def materialize(
    storage: StorageRoot,
    server: VLLMServer,
    verifier,
    partition: str = "demo",
    limit: int | None = 12,
    location: str | None = None,
    with_prompts: bool = True,
    **sample_config,
):
    parts = source_partitions()
    assets = reasoning_samples.build(parts)["assets"]
    run_config = {
        "reasoning_samples": {"config": {"max_tokens": MAX_TOKENS, "progress_interval_s": 1.0, **sample_config}}
    }
    if with_prompts:
        assets = prompts.build(parts)["assets"] + assets
        run_config["prompts"] = {"config": {"limit": limit, "location": location}}
    return dg.materialize(
        assets,
        partition_key=partition,
        resources={"storage": storage, "vllm_server": server, "verifier": Verifier(model_path=str(verifier))},
        run_config={"ops": run_config},
        raise_on_error=False,
    )


def materialize_prompts(storage: StorageRoot, limit: int, partition: str = "demo") -> None:
    result = dg.materialize(
        prompts.build(source_partitions())["assets"],
        partition_key=partition,
        resources={"storage": storage},
        run_config={"ops": {"prompts": {"config": {"limit": limit}}}},
    )
    assert result.success


def samples_metadata(result) -> dict:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.path == ["reasoning_samples"]]
    return {k: v.value for k, v in event.materialization.metadata.items()} | {
        "data_version": event.materialization.tags["dagster/data_version"]
    }


def failure_message(result) -> str:
    return "\n".join(
        str(e.event_specific_data.error.message) for e in result.all_events if e.event_type_value == "STEP_FAILURE"
    )


def prompt_ids(storage: StorageRoot, partition: str = "demo") -> set[str]:
    return set(pq.read_table(prompts_file(storage.root, partition))["prompt_id"].to_pylist())


def test_demo_samples_carry_the_verifiers_exact_tokens_and_a_rerun_adds_nothing(
    storage_root, vllm_server_config, vllm_server_urls, tiny_verifier
):
    # The managed resource with the fixture's settings attaches to the session server.
    result = materialize(storage_root, vllm_server_config, tiny_verifier)
    assert result.success, failure_message(result)
    meta = samples_metadata(result)
    assert meta["ok"] == meta["prompts_selected"] == 12 and meta["errors"] == 0
    assert meta["completion_tokens_total"] > 0 and meta["output_tokens_per_s"] > 0
    assert 0 <= meta["truncation_rate"] <= 1 and "completion_tokens_p90" in meta

    assert meta["recipe_id"] == current_version(storage_root.path("reasoning_samples", "demo"))
    assert meta["recipe"]["verifier"]["folder"] == str(tiny_verifier) and meta["other_recipes"] == 0
    samples = load_samples(samples_folder(storage_root.root, "demo"))
    assert set(samples["prompt_id"].to_pylist()) == prompt_ids(storage_root)
    assert set(samples["recipe"].to_pylist()) == {meta["recipe_id"]}
    rows = {r["prompt_id"]: r for r in samples.to_pylist()}
    table = pq.read_table(prompts_file(storage_root.root, "demo")).to_pylist()
    tokenizer = AutoTokenizer.from_pretrained(tiny_verifier)
    for prompt in table:
        row = rows[prompt["prompt_id"]]
        rendered = tokenizer.apply_chat_template(prompt["messages"], add_generation_prompt=True, tokenize=False)
        assert row["prompt_token_ids"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert len(row["token_ids"]) == row["completion_tokens"] > 0
        assert row["split"] == prompt["split"] and row["truncated"] == (row["finish_reason"] == "length")
        assert row["vllm_version"] and row["server_model"] == str(tiny_verifier)
    # The tiny verifier really thinks, closes </think> and answers.
    finished = [r for r in rows.values() if r["finish_reason"] == "stop"]
    assert finished and all(r["reasoning"] and not r["unfinished_thinking"] for r in finished)
    assert any((r["content"] or "").strip() for r in finished)

    again = materialize(storage_root, vllm_server_config, tiny_verifier, with_prompts=False)
    assert again.success
    assert samples_metadata(again)["captured_this_run"] == 0
    assert samples_metadata(again)["data_version"] == meta["data_version"]

    # Another temperature over these samples is refused before a request goes out, naming the change.
    hotter = materialize(storage_root, vllm_server_config, tiny_verifier, with_prompts=False, temperature=0.9)
    assert not hotter.success and not hotter.asset_materializations_for_node("reasoning_samples")
    message = failure_message(hotter)
    assert "(temperature 0.6 -> 0.9)" in message and "holds 12 samples (12 ok)" in message
    assert "on_changed_settings: new_sample_set" in message
    assert current_version(storage_root.path("reasoning_samples", "demo")) == meta["recipe_id"]


def test_kill_9_mid_run_then_resume_loses_nothing_and_duplicates_nothing(
    storage_root, vllm_server_urls, tmp_path, tiny_verifier
):
    external = VLLMServer(mode="external", base_urls=vllm_server_urls)
    materialize_prompts(storage_root, limit=30)
    wanted = prompt_ids(storage_root)
    kill_after_rows(
        {"max_tokens": MAX_TOKENS, "concurrency": 1, "shard_rows": 2},
        tmp_path,
        storage_root.root,
        vllm_server_urls[0],
        rows=4,
        verifier=tiny_verifier,
    )
    folder = samples_folder(storage_root.root, "demo")
    before = load_samples(folder)
    assert 0 < pc.sum(pc.equal(before["status"], "ok")).as_py() < len(wanted), "the kill did not land mid-run"

    result = materialize(storage_root, external, tiny_verifier, with_prompts=False, concurrency=8)
    assert result.success, failure_message(result)
    assert samples_metadata(result)["captured_this_run"] == len(wanted) - before.num_rows
    assert samples_folder(storage_root.root, "demo") == folder  # the killed run's set, resumed
    # Every shard row, not just the latest view: each prompt has exactly one ok row.
    every_row = pa.concat_tables(pq.read_table(p, columns=["prompt_id", "status"]) for p in shard_paths(folder))
    ok_ids = [
        pid
        for pid, status in zip(every_row["prompt_id"].to_pylist(), every_row["status"].to_pylist())
        if status == "ok"
    ]
    assert Counter(ok_ids) == Counter(wanted)


class FlakyProxy:
    """A real HTTP proxy in front of the server.

    With ``stall_s``, a third of the prompts get a 503 on their first attempt and a third get no
    answer (a timeout); with ``die_after``, the proxy stops listening after that many completions,
    as a server that dies mid-run does.
    """

    def __init__(self, upstream: str, stall_s: float | None = None, die_after: int | None = None):
        self.upstream = upstream.removesuffix("/v1")
        self.relayed = 0
        self.attempts: Counter = Counter()
        self.injected: Counter = Counter()
        self.first_seen: dict[str, int] = {}
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.relay(httpx.get(proxy.upstream + self.path))

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                prompt = json.loads(body)["messages"][-1]["content"]
                with proxy.lock:
                    proxy.attempts[prompt] += 1
                    order = proxy.first_seen.setdefault(prompt, len(proxy.first_seen))
                    first = proxy.attempts[prompt] == 1 and stall_s is not None
                    fault = ("503", "timeout", None)[order % 3] if first else None
                    if fault:
                        proxy.injected[fault] += 1
                if fault == "503":
                    return self.relay(httpx.Response(503, json={"error": "overloaded (injected)"}))
                if fault == "timeout":
                    time.sleep(stall_s)  # the client gave up meanwhile; this answer goes nowhere
                    return None
                response = httpx.post(
                    proxy.upstream + self.path, content=body, headers={"content-type": "application/json"}, timeout=300
                )
                with proxy.lock:
                    proxy.relayed += 1
                    if proxy.relayed == die_after:
                        # Stop listening before this answer goes out, so the client's next request
                        # (concurrency 1) always finds the port closed. Handlers run in their own
                        # threads, so shutting the serving loop down from here cannot deadlock.
                        proxy.close()
                self.relay(response)

            def relay(self, response: httpx.Response) -> None:
                try:
                    self.send_response(response.status_code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(response.content)))
                    self.end_headers()
                    self.wfile.write(response.content)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_injected_5xx_and_timeouts_are_retried_to_success(storage_root, vllm_server_urls, tiny_verifier):
    proxy = FlakyProxy(vllm_server_urls[0], stall_s=12.0)
    try:
        result = materialize(
            storage_root,
            VLLMServer(mode="external", base_urls=[proxy.url]),
            tiny_verifier,
            request_timeout_s=10.0,
            max_retries=3,
        )
    finally:
        proxy.close()
    assert result.success, failure_message(result)
    meta = samples_metadata(result)
    assert proxy.injected == {"503": 4, "timeout": 4}  # a third of the 12 prompts each
    assert meta["ok"] == 12 and meta["errors"] == 0
    # Every injected fault cost a retry (a request slowed by a busy machine may add one more).
    assert meta["http_retries"] >= sum(proxy.injected.values())


def test_a_server_dying_mid_run_keeps_finished_samples_and_the_next_run_completes(
    storage_root, vllm_server_urls, tiny_verifier
):
    proxy = FlakyProxy(vllm_server_urls[0], die_after=4)
    dying = VLLMServer(mode="external", base_urls=[proxy.url])
    result = materialize(storage_root, dying, tiny_verifier, concurrency=1, max_retries=1)
    proxy.close()
    meta = samples_metadata(result)
    assert meta["ok"] == 4 and meta["errors"] == 8  # recorded with their reason, not dropped
    samples = load_samples(samples_folder(storage_root.root, "demo"))
    assert all("connection error" in r["error"] for r in samples.to_pylist() if r["status"] == "error")
    assert not result.success  # the blocking error-rate gate

    healthy = VLLMServer(mode="external", base_urls=vllm_server_urls)
    resumed = materialize(storage_root, healthy, tiny_verifier, with_prompts=False)
    assert resumed.success, failure_message(resumed)
    assert samples_metadata(resumed)["captured_this_run"] == 8 and samples_metadata(resumed)["ok"] == 12


def test_an_unreachable_server_fails_the_step_with_the_url_and_keeps_prompts(storage_root, tiny_verifier):
    url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    result = materialize(storage_root, VLLMServer(mode="external", base_urls=[url], startup_timeout_s=1), tiny_verifier)
    assert not result.success
    assert url in failure_message(result) and "re-materialize to resume" in failure_message(result)
    assert len(prompt_ids(storage_root)) == 12


def test_an_over_long_prompt_is_a_recorded_http_400_and_retried_next_run(
    storage_root, vllm_server_urls, tmp_path, tiny_verifier
):
    rows = [
        {"messages": [{"role": "user", "content": "What is 17 + 25?"}]},
        {"messages": [{"role": "user", "content": "Add 3 and 4. " + "12 " * 9000}]},  # > max-model-len
        {"messages": [{"role": "user", "content": "What is 6 times 7?"}]},
    ]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server = VLLMServer(mode="external", base_urls=vllm_server_urls)
    result = materialize(storage_root, server, tiny_verifier, partition="jsonl", limit=None, location=str(data))
    meta = samples_metadata(result)  # the samples are materialized ...
    assert (meta["ok"], meta["errors"]) == (2, 1)
    # ... and the blocking error-rate gate stops the step, so nothing downstream trains on a gap.
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "error_rate_below_limit"]
    assert not check.passed and not result.success and "error_rate_below_limit" in failure_message(result)
    samples = load_samples(samples_folder(storage_root.root, "jsonl"))
    (error,) = [r for r in samples.to_pylist() if r["status"] == "error"]
    assert error["error"].startswith("HTTP 400") and "context length" in error["error"]

    again = materialize(storage_root, server, tiny_verifier, partition="jsonl", with_prompts=False)
    assert samples_metadata(again)["captured_this_run"] == 1  # only the failed prompt is tried again
