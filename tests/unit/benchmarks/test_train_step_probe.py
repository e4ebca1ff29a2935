"""The GPU-bound probe: its result line is the one train_gpu.py reads, and its draft without speculators'
forced graph break has none."""

from __future__ import annotations

import torch

from tests.helpers.synthetic import training_sample


def test_train_gpu_reads_the_rate_of_the_steps_as_trained_from_the_probes_line():
    from benchmarks.train_runs import ProbeLog
    from benchmarks.train_step_probe import AS_TRAINED, resident_line

    log = ProbeLog("gpu-bound")
    trained = resident_line("fused", AS_TRAINED, 24, 172167, 3.718, "llama-3.1-8b", 0.455)
    assert trained.endswith(" recompiles=0") and "tokens_per_s=46306 " in trained
    log.info(trained)
    log.info(resident_line("fused", "rows padded to 9216 as speculators pads them", 24, 172167, 4.188, "x", 0.4))
    log.info(resident_line("eager", AS_TRAINED, 24, 172167, 3.9, "llama-3.1-8b", 0.43))
    assert log.rates == {"fused": 46306.0, "eager": 44145.0}


def test_without_the_forced_break_the_draft_layer_compiles_as_one_graph(monkeypatch):
    """What ``--without-forced-graph-break`` compares: the same draft, its layer's user-inserted break gone."""
    from speculators.models.eagle3 import model_definitions
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn
    from torch._dynamo.utils import counters

    from benchmarks.train_step_probe import torch_before_the_break
    from tests.helpers.drafts import eagle3_draft, llama_layer

    layer = llama_layer(64, 32, head_dim=16, intermediate_size=64, max_positions=1024)
    draft = eagle3_draft(layer, 64, "LlamaForCausalLM")
    batch = CollateFn(256, 32, 3, dtype=torch.float32, preprocess=shift_batch)([training_sample(100, 32, vocab=64)])
    skipped = ("error_records", "verifier_last_hidden_states")  # the forward alone: no loss, no backward
    batch = {key: value for key, value in batch.items() if key not in skipped}

    def user_breaks() -> int:
        def count() -> int:
            return sum(n for reason, n in counters["graph_break"].items() if "graph_break()" in reason)

        torch._dynamo.reset()
        before = count()
        torch.compile(draft, backend="eager")(**batch, ttt_steps=2)
        return count() - before

    assert user_breaks() > 0  # as speculators ships it on torch >= 2.10
    monkeypatch.setattr(model_definitions, "torch", torch_before_the_break())
    assert user_breaks() == 0


def test_the_device_busy_share_counts_overlapping_kernels_once():
    from types import SimpleNamespace

    from benchmarks.train_step_profiles import device_time_us

    def event(device: str, start: float, end: float):
        span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
        return SimpleNamespace(device_type=SimpleNamespace(name=device), time_range=span)

    # Two streams overlapping for 5 us, a gap, a host op that is no kernel.
    events = [event("CUDA", 0, 10), event("CUDA", 5, 12), event("CUDA", 20, 25), event("CPU", 0, 100)]
    assert device_time_us(SimpleNamespace(events=lambda: events)) == (22, 17)
