"""The GPU-bound probe: its padded rows are speculators' rows (what it compares ours with), its result line
is the one train_gpu.py reads, its draft without speculators' forced graph break has none, and it times the
loader path alone."""

from __future__ import annotations

import torch

from benchmarks.train_step_probe import padded_row
from tests.helpers.synthetic import training_sample


def test_a_cut_row_padded_back_is_speculators_row():
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import CollateFn

    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import trim_padding

    torch.manual_seed(0)
    samples = [training_sample(n, 8) for n in (700, 600)]
    theirs = CollateFn(3072, 8, 3, dtype=torch.float32, preprocess=shift_batch)(samples)
    cut = trim_padding(theirs, 3072)
    assert cut["input_ids"].shape[1] == 2048
    back = padded_row(cut, 3072)
    assert back.keys() == theirs.keys()
    for key, want in theirs.items():
        got = back[key]
        assert torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want, key


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


def test_the_loader_path_alone_is_timed_per_epoch_and_read_by_train_gpu(capsys):
    from torch.utils.data import DataLoader

    from benchmarks.train_runs import ProbeLog
    from benchmarks.train_step_probe import loader_epochs
    from eagle_assets.eagle3_checkpoint.trainer_process.device_batches import DeviceBatches

    class Sampler:  # as speculators' batch sampler: an order per epoch
        epoch = 0

        def set_epoch(self, epoch):
            self.epoch = epoch

        def __iter__(self):
            return iter([[0, 1], [2, 3], [4]])

        def __len__(self):
            return 3

    # Rows of 4 positions, the last one padding (-1): 4 tokens per batch of two rows, 2 in the last.
    rows = [{"document_ids": torch.tensor([0, 0, 0, -1])} for _ in range(5)]
    loader = DataLoader(rows, batch_sampler=Sampler())
    loader_epochs(DeviceBatches(loader, torch.device("cpu"), last_epoch=1), 2)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" seconds=")[0] for line in lines] == [
        f"probe loader epoch={epoch} batches=3 tokens=15" for epoch in (0, 1)
    ]
    assert all(" waited=" in line and " first_batch=" in line for line in lines)
    log = ProbeLog("gpu-bound")
    for line in lines:
        log.info(line)
    assert len(log.loader_rates) == 2 and all(rate > 0 for rate in log.loader_rates)
