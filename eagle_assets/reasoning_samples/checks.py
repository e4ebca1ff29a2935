"""The ``reasoning_samples`` asset's check results, from its materialization metadata (``meta``): a failure
names the counts and what to change."""

from __future__ import annotations

import dagster as dg

from eagle_assets.core.checks import check_result
from eagle_assets.reasoning_samples.quality import QUALITY_CLASSES, REMEDIES


def error_rate_check_result(meta: dict, limit: float, examples: list[str]) -> dg.AssetCheckResult:
    """Selected prompts without an ok sample against `limit`; a failure names the counts and the first errors."""
    rate = meta["error_rate"]
    return check_result(
        rate <= limit,
        {
            "error_rate": rate,
            "limit": limit,
            "errors": meta["errors"],
            "missing": meta["missing"],
            "examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in examples) or "none"),
        },
        check_name="error_rate_below_limit",
        failed=f"{rate:.1%} of {meta['requests_selected']} selected prompts (turns) have no ok sample "
        f"({meta['errors']} errors, {meta['missing']} never captured), above max_error_rate {limit:.1%}",
        fix="re-materialize reasoning_samples: it retries only those prompts (the errors are in `examples` and "
        "the run log); for timeouts raise request_timeout_s or lower concurrency; to train on fewer samples, "
        "raise max_error_rate",
    )


def truncation_check_result(meta: dict, limit: float, max_tokens: int) -> dg.AssetCheckResult:
    """Ok samples cut at max_tokens against `limit` (a warning: cut samples are still the verifier's text)."""
    rate = meta["truncation_rate"]
    return check_result(
        rate <= limit,
        {"truncation_rate": rate, "limit": limit, "truncated": meta["truncated"], "max_tokens": max_tokens},
        check_name="truncation_rate_below_limit",
        severity=dg.AssetCheckSeverity.WARN,
        failed=f"{meta['truncated']} of {meta['ok']} ok samples ({rate:.1%}) stopped at max_tokens={max_tokens}, "
        f"above max_truncation_rate {limit:.1%}",
        fix="raise max_tokens (and vllm_server.max_model_len to fit prompt + max_tokens) and re-materialize, or "
        "raise max_truncation_rate; token_sequences' quality_policy.truncated decides whether cut samples train",
    )


def quality_check_result(meta: dict, limit: float) -> dg.AssetCheckResult:
    """The non-ok share against `limit`; a failure names the classes, their shares and what to change."""
    share = meta["quality/non_ok_share"]
    found = sorted(
        ((meta[f"quality/{name}_share"], name) for name in QUALITY_CLASSES if name != "ok" and meta[f"quality/{name}"]),
        reverse=True,
    )
    return check_result(
        share <= limit,
        {
            "non_ok_share": share,
            "limit": limit,
            **{f"{name}_share": value for value, name in found},
            **{name: meta[f"quality/{name}"] for _, name in found},
        },
        check_name="quality_non_ok_share_below_limit",
        severity=dg.AssetCheckSeverity.WARN,
        failed=f"{share:.1%} of the samples are not ok, above max_non_ok_share {limit:.1%}: "
        + ", ".join(f"{name} {value:.1%}" for value, name in found),
        fix="\n".join(f"- {name}: {REMEDIES[name]}" for _, name in found),
    )
