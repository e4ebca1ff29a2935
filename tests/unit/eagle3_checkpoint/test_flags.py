"""The speculators flags a training run passes: each ``auto`` kernel and dtype resolved for the device, and
what a CPU cannot run refused by name."""

from __future__ import annotations

import pytest

from eagle_assets.eagle3_checkpoint.settings import TrainingSettings
from eagle_assets.eagle3_checkpoint.trainer import speculators_flags
from eagle_assets.eagle3_checkpoint.training_data import build_training_data
from eagle_assets.eagle3_checkpoint.vocab import DraftVocab


@pytest.fixture(scope="module")
def planned(random_features, tmp_path_factory):
    """(training data, draft vocabulary, verifier folder, save folder) on the shared random features."""
    root, verifier = random_features
    work = tmp_path_factory.mktemp("flags")
    vocab = DraftVocab(work / "d2t.npy", work / "t2d.npy", 64, 100, 0.9, 0.1)
    return build_training_data(root, ["demo"], work / "work"), vocab, str(verifier), work / "save"


def _flags(planned, on_cpu: bool, **settings) -> dict[str, str]:
    argv = speculators_flags(TrainingSettings(total_seq_len=256, draft_vocab_size=64, **settings), *planned, on_cpu)
    names = ("--draft-attn-impl", "--loss-implementation", "--hidden-states-dtype")
    return {name: argv[argv.index(name) + 1] for name in names}


def test_auto_kernels_and_compute_dtype_follow_the_device(planned):
    assert _flags(planned, on_cpu=True) == {
        "--draft-attn-impl": "sdpa",
        "--loss-implementation": "eager",
        "--hidden-states-dtype": "float32",  # CPU bf16 matmuls convert on every call
    }
    assert _flags(planned, on_cpu=False) == {
        "--draft-attn-impl": "simple_flex_attention",
        "--loss-implementation": "fused",
        "--hidden-states-dtype": "bfloat16",  # speculators' own default: the GPU path is unchanged
    }
    explicit = _flags(planned, on_cpu=True, compute_dtype="bfloat16", attention_impl="eager")
    assert explicit["--hidden-states-dtype"] == "bfloat16" and explicit["--draft-attn-impl"] == "eager"
    assert _flags(planned, on_cpu=False, compute_dtype="float32")["--hidden-states-dtype"] == "float32"


def test_gpu_only_kernels_are_refused_on_cpu_by_name(planned):
    with pytest.raises(ValueError, match="attention_impl 'simple_flex_attention' has no CPU backward"):
        _flags(planned, on_cpu=True, attention_impl="simple_flex_attention")
    with pytest.raises(ValueError, match="loss_implementation 'fused' is a GPU"):
        _flags(planned, on_cpu=True, loss_implementation="fused")


def test_loader_workers_none_on_cpu_by_default_else_sized_to_the_shared_memory(planned):
    from eagle_assets.eagle3_checkpoint.trainer_process.loader_workers import LOADER_PREFETCH, shared_memory_free

    def loader(on_cpu, **settings):
        argv = speculators_flags(TrainingSettings(total_seq_len=256, draft_vocab_size=64, **settings), *planned, on_cpu)
        return int(argv[argv.index("--num-workers") + 1]), int(argv[argv.index("--prefetch-factor") + 1])

    assert loader(True) == (0, LOADER_PREFETCH)
    assert loader(True, dataloader_workers=2) == (2, LOADER_PREFETCH)  # a few KB a batch: fits anywhere
    if shared_memory_free() is not None:
        with pytest.raises(
            ValueError, match=r"dataloader_workers 100000000 needs .* set dataloader_workers to at most"
        ):
            loader(False, dataloader_workers=100_000_000)
