"""What ``benchmarks/hidden_states_gpu.py`` reports: the FLOPs its MFU figures count, every figure of the job
by name (printed, and written as JSON under ``$OUT``), and the ``result ...`` headline line."""

from __future__ import annotations

from statistics import median as med

from benchmarks.spread import spread

# Dense (no sparsity) bf16 tensor-core FLOP/s from NVIDIA's datasheets, by device name.
DATASHEET_BF16_DENSE = {"H200": 989.4e12, "H100": 989.4e12}


def datasheet_peak(name: str) -> float | None:
    return next((flops for key, flops in DATASHEET_BF16_DENSE.items() if key in name), None)


def row_flops(model, config, length: int) -> float:
    """Forward FLOPs of one row: 2 x non-embedding parameters per token + causal attention (QK^T and AV,
    each over ``length``/2 keys on average per query)."""
    params = sum(p.numel() for p in model.parameters()) - model.get_input_embeddings().weight.numel()
    attn = 2 * length * length * config.num_attention_heads * config.head_dim * config.num_hidden_layers
    return 2 * params * length + attn


def result_fields(job, equivalence: dict, rates: dict[str, list], fp8_cosine: float | None) -> dict:
    """The job's settings, the equivalence check, and every path's median rate, MFU and ratio."""
    args, peak = job.args, job.peak
    extract, forward, naive = rates["extract"], rates["forward"], rates["naive"]
    result = {
        "device": job.name,
        "dtype": str(job.dtype),
        "shape": "tiny" if args.tiny else "Llama-3.1-8B",
        "row_lengths": [job.low, job.high],
        "batch_tokens": job.batch_tokens,
        "layer_ids": job.layer_ids,
        "samples_per_repeat": job.samples,
        "naive_samples_per_repeat": job.naive_samples,
        "repeats": args.repeats,
        "model_build_s": round(job.build_s, 1),
        "measured_peak_tflops": round(peak / 1e12, 1),
        "datasheet_peak_tflops": round(job.datasheet / 1e12, 1) if job.datasheet else None,
        **equivalence,
        "forward_same_rows_tok_s": round(med(forward)),
        "forward_same_rows_runs_tok_s": [round(r) for r in forward],
        "forward_same_rows_mfu_measured": round(med(rates["forward_mfu"]) / peak, 3),
        "capture_no_writes_tok_s": round(med(rates["capture"])),
        "capture_no_writes_runs_tok_s": [round(r) for r in rates["capture"]],
        "capture_vs_forward_ratio": round(med(rates["capture"]) / med(forward), 3),
        "extract_vs_forward_ratio": round(med(extract) / med(forward), 3),
        "extract_vs_forward_per_repeat": [round(e / f, 3) for e, f in zip(extract, forward)],
        "extract_tok_s": round(med(extract)),
        "extract_tok_s_spread": round(spread(extract), 3),
        "extract_runs_tok_s": [round(r) for r in extract],
        "extract_mfu_measured": round(med(rates["extract_mfu"]) / peak, 3),
        "naive_tok_s": round(med(naive)),
        "naive_tok_s_spread": round(spread(naive), 3),
        "naive_mfu_measured": round(med(rates["naive_mfu"]) / peak, 3),
        "speedup_vs_naive": round(med(extract) / med(naive), 2),
        "written_gb_per_s": round(med(rates["written"]) / 1e9, 3),
        "bytes_per_token": round(med(rates["bytes_per_token"])),
    }
    result["host_buffers"] = args.host_buffers
    result["host_wait_s_per_run"] = [round(w, 2) for w in rates["host_wait_s"]]
    # The writes a run waits for after its last forward: once per run, however long the run.
    result["drain_s_per_run"] = [round(d, 2) for d in rates["drain_s"]]
    if rates["alt"]:
        result.update(
            alt_host_buffers=args.alt_host_buffers or args.host_buffers,
            alt_buffered_writes=args.alt_buffered_writes,
            alt_extract_tok_s=round(med(rates["alt"])),
            alt_runs_tok_s=[round(r) for r in rates["alt"]],
            alt_host_wait_s_per_run=[round(w, 2) for w in rates["alt_host_wait_s"]],
            alt_vs_extract_ratio=round(med(rates["alt"]) / med(extract), 3),
            alt_vs_forward_ratio=round(med(rates["alt"]) / med(forward), 3),
        )
    if rates["fp8"]:
        result.update(fp8_fields(rates, fp8_cosine))
    if job.datasheet:
        result["extract_mfu_datasheet"] = round(med(rates["extract_mfu"]) / job.datasheet, 3)
        result["naive_mfu_datasheet"] = round(med(rates["naive_mfu"]) / job.datasheet, 3)
    return result


def fp8_fields(rates: dict[str, list], fp8_cosine: float) -> dict:
    """The fp8 extractor against the bf16 one and against the forward pass."""
    fp8, fp8_bytes = rates["fp8"], rates["fp8_bytes_per_token"]
    return {
        "fp8_min_token_cosine": round(fp8_cosine, 5),
        "extract_fp8_tok_s": round(med(fp8)),
        "extract_fp8_tok_s_spread": round(spread(fp8), 3),
        "extract_fp8_runs_tok_s": [round(r) for r in fp8],
        "fp8_bytes_per_token": round(med(fp8_bytes)),
        "fp8_vs_bf16_bytes_ratio": round(med(fp8_bytes) / med(rates["bytes_per_token"]), 4),
        "fp8_vs_bf16_extract_ratio": round(med(fp8) / med(rates["extract"]), 3),
        "fp8_extract_vs_forward_ratio": round(med(fp8) / med(rates["forward"]), 3),
        "fp8_drain_s_per_run": [round(d, 2) for d in rates["fp8_drain_s"]],
    }


def print_result(result: dict, job, fp8: bool) -> None:
    """Every field, right-aligned, then the headline line."""
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    print(
        f"result shape={result['shape']} rows={job.low}-{job.high} batch_tokens={job.batch_tokens} "
        f"extract_vs_forward_ratio={result['extract_vs_forward_ratio']} "
        f"capture_vs_forward_ratio={result['capture_vs_forward_ratio']} extract_tok_s={result['extract_tok_s']} "
        f"forward_same_rows_tok_s={result['forward_same_rows_tok_s']} drain_s={med(result['drain_s_per_run']):.2f}"
        + (f" fp8_extract_vs_forward_ratio={result['fp8_extract_vs_forward_ratio']}" if fp8 else ""),
        flush=True,
    )
