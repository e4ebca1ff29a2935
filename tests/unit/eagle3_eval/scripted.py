"""A scripted speculating vLLM server for eagle3_eval's unit tests: real HTTP on 127.0.0.1 (tests/helpers/http),
the endpoints eagle3_eval reads (/v1/models, /version, /tokenize, /server_info, /metrics, /v1/chat/completions),
each answer carrying per-request statistics as vLLM 0.32 sends them, and counters that add them up."""

from __future__ import annotations

import hashlib
import json
import threading

from tests.helpers.http import LocalServer, Reply, Request

K = 3
THINK, END_THINK = 3, 4


def steps_for(text: str, k: int = K, steps: int = 12) -> list[int]:
    """Accepted draft tokens per verify step, a fixed function of the prompt (some prompts accepted less)."""
    digest = hashlib.sha256(text.encode()).digest()
    return [digest[i] % (k + 1) for i in range(steps)]


class ScriptedVLLM:
    """``with ScriptedVLLM(checkpoint) as server: server.url``. ``phantom_drafts``: drafts the counters count
    beyond the answers' own (another client on the server); ``per_request``: whether answers carry statistics;
    ``k``: the draft tokens per step (0: no draft, nothing speculated)."""

    def __init__(self, checkpoint: str, phantom_drafts: int = 0, per_request: bool = True, k: int = K):
        self.k = k
        self.checkpoint = checkpoint
        self.phantom_drafts = phantom_drafts
        self.per_request = per_request
        self.bodies: list[dict] = []
        self.drafts = self.accepted = 0
        self.per_pos = [0] * max(k, 1)
        self._lock = threading.Lock()
        self._server = LocalServer(self.answer)
        self.url = self._server.url

    def __enter__(self) -> ScriptedVLLM:
        return self

    def __exit__(self, *exc) -> None:
        self._server.close()

    def metrics_page(self) -> str:
        lines = [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f'vllm:spec_decode_num_drafts_total{{engine="0"}} {float(self.drafts)}',
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {float(self.k * self.drafts)}',
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {float(self.accepted)}',
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
            *(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{k}"}} {float(n)}'
                for k, n in enumerate(self.per_pos)
            ),
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0"} 0.0',
        ]
        return "\n".join(lines) + "\n"

    def completion(self, body: dict) -> dict:
        last = body["messages"][-1]["content"]
        accepted = steps_for(last, self.k) if self.k else []
        tokens = 1 + sum(a + 1 for a in accepted) if self.k else 40
        ids = [7] * tokens
        ids[tokens // 2] = END_THINK  # the thinking ends halfway
        with self._lock:
            self.bodies.append(body)
            self.drafts += len(accepted) + self.phantom_drafts
            self.accepted += sum(accepted)
            for a in accepted:
                for k in range(a):
                    self.per_pos[k] += 1
        answer = {
            "model": "m",
            "choices": [
                {"message": {"role": "assistant", "content": f"answer to {last}", "reasoning": "thought"},
                 "finish_reason": "stop", "token_ids": ids},
            ],
            "prompt_token_ids": [9, THINK],
            "usage": {"prompt_tokens": 2, "completion_tokens": tokens},
        }  # fmt: skip
        if self.per_request and self.k:
            answer["metrics"] = {
                "tokens_per_second": 500.0,
                "speculative_decoding": {
                    "mean_acceptance_length": 1 + sum(accepted) / len(accepted),
                    "acceptance_histogram": [accepted.count(j) for j in range(self.k + 1)],
                    "num_spec_steps": len(accepted),
                    "num_accepted_draft_tokens": sum(accepted),
                    "num_draft_tokens": self.k * len(accepted),
                    "num_spec_tokens": self.k,
                    "per_step_accepted": accepted,
                    "per_step_drafted": [self.k] * len(accepted),
                },
            }
        return answer

    def answer(self, request: Request) -> Reply:
        path = request.path.split("?")[0]
        if path == "/v1/models":
            return Reply.of_json({"data": [{"id": "m"}]})
        if path == "/version":
            return Reply.of_json({"version": "0.32.0"})
        if path == "/tokenize":
            return Reply.of_json({"tokens": [THINK if request.json()["prompt"] == "<think>" else END_THINK]})
        if path == "/server_info":
            spec = {"method": "eagle3", "model": self.checkpoint, "num_speculative_tokens": self.k}
            return Reply.of_json({"vllm_config": {"speculative_config": spec}})
        if path == "/metrics":
            return Reply(200, self.metrics_page().encode(), "text/plain")
        if path == "/v1/chat/completions":
            return Reply.of_json(self.completion(request.json()))
        return Reply(404, json.dumps({"error": {"message": f"no {path}"}}).encode())
