"""One evaluation of a draft checkpoint: vLLM-served acceptance on each prompt set (held-out, out-of-distribution,
registered suites), then the simulated value on the same greedy outputs, and optionally a sweep of K. Shared by
the ``eagle3_eval`` asset and ``benchmarks/reasoning_vs_static.py``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from eagle_assets.backends import ExtractionRequest
from eagle_assets.eagle3_checkpoint.simulated import GreedySample, load_draft, simulate
from eagle_assets.eagle3_eval.numbers import Evaluation
from eagle_assets.eagle3_eval.served import (
    GREEDY,
    ServedDraftError,
    ServedRun,
    confirm_serves_checkpoint,
    run_greedy,
)
from eagle_assets.eagle3_eval.suite_sets import SuiteSet
from eagle_assets.eagle3_eval.sweep import sweep_num_speculative_tokens
from eagle_assets.reasoning_samples.requests import PromptRequest
from eagle_assets.resources import Verifier, VLLMServer
from eagle_assets.resources.vllm_server import SPECULATIVE_FLAG

# vLLM 0.32: each response carries its own speculative-decoding statistics (metrics.speculative_decoding),
# detailed: the accepted/proposed count of every verify step, in order; and its timing.
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"
PER_REQUEST_ARGS = ("--enable-per-request-metrics", PER_REQUEST_FLAG, "detailed")
NO_STATS_FLAG = "--disable-log-stats"  # vLLM refuses per-request metrics without engine statistics
_fallback_log = logging.getLogger("eagle_assets.eagle3_eval")


class EvaluationError(RuntimeError):
    """The measurement could not be made; the message says why and what to change."""


def greedy_request(request: PromptRequest, max_tokens: int) -> PromptRequest:
    """``request`` with its sampling variant's chat-template switches kept (thinking on/off) but greedy:
    acceptance is measured on the verifier's greedy outputs, whatever temperature the variant trains with."""
    if request.sampling is None:
        return request
    return replace(request, sampling=replace(request.sampling, max_tokens=max_tokens, seed=None, **GREEDY))


def served_by_variant(
    urls, requests: Sequence[PromptRequest], max_tokens: int, log, concurrency: int, api_key: str | None
) -> tuple[ServedRun, dict[str, ServedRun]]:
    """The requests served greedily, one sampling variant after another when they name variants (each
    variant's counter delta then covers its own requests only), and all of them together."""
    groups: dict[str | None, list[PromptRequest]] = {}
    for request in requests:
        groups.setdefault(request.sampling.variant if request.sampling else None, []).append(request)
    if set(groups) == {None}:
        return run_greedy(urls, requests, max_tokens, log, concurrency=concurrency, api_key=api_key), {}
    by_variant = {}
    for name, group in groups.items():
        log(f"sampling variant {name}: {len(group)} prompts")
        by_variant[name or "none"] = run_greedy(urls, group, max_tokens, log, concurrency=concurrency, api_key=api_key)
    runs = list(by_variant.values())
    combined = replace(
        runs[0],
        counters=sum((r.counters for r in runs[1:]), runs[0].counters),
        rows=[row for r in runs for row in r.rows],
        wall_s=sum(r.wall_s for r in runs),
    )
    return combined, by_variant


def _check_speculating(served: ServedRun, urls, label: str) -> None:
    if not served.rows:
        raise EvaluationError(f"no {label} request was sent: the {label} set is empty")
    if not served.ok_rows:
        raise EvaluationError(f"every {label} request failed, e.g. {served.rows[0]['error']}")
    if not served.counters.spec_decode_enabled or served.counters.drafts == 0:
        raise EvaluationError(
            f"the server at {urls} reported no speculative drafts: it is not speculating "
            "(external/systemd servers need --speculative-config with this checkpoint)"
        )


def speculative_server(
    server: VLLMServer, checkpoint: Path, num_speculative_tokens: int, port: int | None = None
) -> VLLMServer:
    """The same server settings plus ``--speculative-config`` serving ``checkpoint`` as an eagle3 draft.

    A different port by choice: a kept-alive generation server on the resource's port would otherwise
    refuse the launch (its fingerprint differs).
    """
    if SPECULATIVE_FLAG in server.extra_args:
        raise EvaluationError(
            f"vllm_server.extra_args already holds {SPECULATIVE_FLAG}: remove it, eagle3_eval sets the draft itself"
        )
    if NO_STATS_FLAG in server.extra_args:
        raise EvaluationError(
            f"vllm_server.extra_args holds {NO_STATS_FLAG}: eagle3_eval reads each request's speculative-decoding "
            "statistics, which vLLM keeps only with engine statistics on; remove it"
        )
    per_request = [] if PER_REQUEST_FLAG in server.extra_args else list(PER_REQUEST_ARGS)
    return server.speculating(checkpoint, num_speculative_tokens, port=port, extra_args=per_request)


def replaced(server: VLLMServer, port: int | None = None, **changes) -> VLLMServer:
    """A copy of the resource's settings with ``changes`` (and ``port`` when given)."""
    fields = {name: getattr(server, name) for name in type(server).model_fields}
    return type(server)(**{**fields, **changes, **({"port": port} if port else {})})


def warm_then(urls, greedy: Callable, requests: Sequence[PromptRequest], warm: bool = True) -> ServedRun:
    """``requests`` served, after one of them unmeasured on a fresh server: a server's first requests run
    slower, and each K of a sweep is compared by its tokens/s."""
    if warm:
        greedy(urls, requests[:1])
    return greedy(urls, requests)


def checkpoint_layer_ids(checkpoint: Path, verifier_path: Path) -> list[int]:
    """Aux ids the draft was trained on, then the verifier's final layer (the pre-norm state)."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    verifier = json.loads((Path(verifier_path) / "config.json").read_text())
    verifier = verifier.get("text_config", verifier)
    return [*config["eagle_aux_hidden_state_layer_ids"], int(verifier["num_hidden_layers"])]


def greedy_samples(rows: Sequence[dict], verifier: Verifier, layer_ids: list[int]) -> list[GreedySample]:
    """The verifier's hidden states for its own greedy sequences, through the verifier backend and its engine
    as the resource configures it for the ``hidden_states`` asset (an embedded verifier's eager engine too)."""
    sequences = [(i, [*row["prompt_token_ids"], *row["token_ids"]]) for i, row in enumerate(rows)]
    states: dict[int, object] = {}

    def sink(sample) -> None:
        states[sample.key] = sample.hidden_states.clone()  # the backend reuses its buffer afterwards

    request = ExtractionRequest(
        sequences=sequences,
        layer_ids=layer_ids,
        device=verifier.device,
        dtype=verifier.dtype,
        batch_tokens=verifier.batch_tokens,
        engine_args=verifier.resolved_engine_args(),
    )
    verifier.get_backend().extract(verifier.resolved_model_path(), request, sink)
    return [GreedySample(ids, states[i], len(rows[i]["prompt_token_ids"])) for i, ids in sequences]


def evaluate(
    checkpoint: Path,
    requests: Sequence[PromptRequest],
    server: VLLMServer,
    verifier: Verifier | None,
    num_speculative_tokens: int = 3,
    max_tokens: int = 1024,
    concurrency: int = 64,
    port: int | None = None,
    measure_baseline: bool = False,
    log: Callable[[str], None] | None = None,
    logger=None,
    ood_requests: Sequence[PromptRequest] = (),
    suites: Sequence[SuiteSet] = (),
    sweep_ks: Sequence[int] = (),
    sweep_requests: Sequence[PromptRequest] = (),
) -> Evaluation:
    """Serve the verifier with ``checkpoint`` as its EAGLE-3 draft, send ``requests`` greedily, and
    read acceptance from vLLM's counters and each response's own statistics; then ``ood_requests`` (an
    out-of-distribution set) and each of ``suites``, measured apart on the same server; then (``verifier``
    given) the simulated value on the in-distribution greedy outputs, (``measure_baseline``) the same
    requests without the draft for tokens/s, and (``sweep_ks``) ``sweep_requests`` served with each K and
    without the draft (a managed server only: it is restarted per K).

    ``logger`` receives the server's log (a Dagster ``context.log``); ``log`` the progress lines.
    """
    logger = logger or _fallback_log
    log = log or logger.info
    if not requests:
        raise EvaluationError("no held-out prompts to evaluate: materialize prompts with a held-out split")
    requests = [greedy_request(r, max_tokens) for r in requests]
    managed = server.mode == "managed"
    speculating = speculative_server(server, checkpoint, num_speculative_tokens, port) if managed else server
    if not managed:
        log(f"vllm_server mode {server.mode!r}: the server must already serve {checkpoint} as its eagle3 draft")
    ood, suite_runs = None, {}
    sweep_ks = sorted(set(sweep_ks))
    if sweep_ks and not managed:
        log(f"vllm_server mode {server.mode!r}: the K sweep needs servers eagle3_eval starts itself; not swept")
        sweep_ks = []
    sweep_requests = [greedy_request(r, max_tokens) for r in sweep_requests]
    swept: dict[int | None, ServedRun] = {}

    def greedy(urls, items) -> ServedRun:
        return run_greedy(urls, items, max_tokens, log, concurrency=concurrency, api_key=server.api_key())

    with speculating.serve(log=logger) as urls:
        if not managed:
            try:
                confirm_serves_checkpoint(urls, checkpoint, num_speculative_tokens, server.api_key())
            except ServedDraftError as exc:
                raise EvaluationError(f"refusing to evaluate {checkpoint} on that server: {exc}") from None
        served, by_variant = served_by_variant(urls, requests, max_tokens, log, concurrency, server.api_key())
        _check_speculating(served, urls, "held-out")
        for name, run in by_variant.items():
            _check_speculating(run, urls, f"held-out (variant {name})")
            log(f"variant {name}: acceptance length {run.counters.acceptance_length:.3f}")
        log(
            f"served: acceptance length {served.counters.acceptance_length:.3f}, per position "
            f"{[round(r, 3) for r in served.counters.acceptance_per_position]} over "
            f"{int(served.counters.drafts)} drafts, {served.tokens_per_s:.0f} tok/s"
        )
        if ood_requests:
            # After the first set has settled: each run's counter delta covers its own requests only.
            ood = run_greedy(urls, ood_requests, max_tokens, log, concurrency=concurrency, api_key=server.api_key())
            _check_speculating(ood, urls, "out-of-distribution")
            log(
                f"out-of-distribution: acceptance length {ood.counters.acceptance_length:.3f}, per position "
                f"{[round(r, 3) for r in ood.counters.acceptance_per_position]} over "
                f"{int(ood.counters.drafts)} drafts"
            )
        for suite in suites:
            log(f"eval suite {suite.label} (version {suite.version}): {len(suite.items)} prompts")
            run = suite_runs[suite.label] = greedy(urls, suite.items)
            _check_speculating(run, urls, f"eval suite {suite.label}")
            log(f"{suite.label}: acceptance length {run.counters.acceptance_length:.3f}")
        if num_speculative_tokens in sweep_ks and sweep_requests:
            swept[num_speculative_tokens] = greedy(urls, sweep_requests)  # this server is one of the sweep's
    simulated = None
    if verifier is not None:
        started = time.monotonic()
        samples = greedy_samples(
            served.ok_rows, verifier, checkpoint_layer_ids(checkpoint, verifier.resolved_model_path())
        )
        simulated = simulate(load_draft(checkpoint), samples, num_speculative_tokens)
        log(
            f"simulated: acceptance length {simulated.acceptance_length:.3f}, per position "
            f"{[round(r, 3) for r in simulated.acceptance_per_position]} over {simulated.drafts} draft starts "
            f"({time.monotonic() - started:.0f}s)"
        )
    baseline = None
    if (measure_baseline or sweep_ks) and managed:
        with replaced(server, port=port).serve(log=logger) as urls:
            if measure_baseline:
                baseline = greedy(urls, requests)
                log(f"without the draft: {baseline.tokens_per_s:.0f} tok/s")
            if sweep_ks and sweep_requests:
                swept[None] = warm_then(urls, greedy, sweep_requests, warm=baseline is None)

    def measure(k: int | None) -> ServedRun:
        if k not in swept:
            with speculative_server(server, checkpoint, k, port).serve(log=logger) as urls:
                swept[k] = warm_then(urls, greedy, sweep_requests)
                _check_speculating(swept[k], urls, f"sweep K={k}")
        return swept[k]

    sweep = None
    if sweep_ks and sweep_requests:
        sweep = sweep_num_speculative_tokens(sweep_ks, measure, len(sweep_requests), log)
        log(f"sweep: K={sweep.best.k} decodes fastest on this host")
    return Evaluation(served, simulated, baseline, num_speculative_tokens, ood, by_variant, suite_runs, sweep)
