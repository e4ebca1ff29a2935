"""The best epoch saved in the background: the same files as speculators' synchronous save, written
crash-safe (a partial folder renamed into place, then the best link swapped), errors raised on the
training thread."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from speculators.train import checkpointer
from speculators.train.checkpointer import SingleGPUCheckpointer
from transformers import PretrainedConfig, PreTrainedModel, get_linear_schedule_with_warmup

from eagle_assets.eagle3_checkpoint.trainer_process import async_save
from eagle_assets.eagle3_checkpoint.trainer_process.async_save import BestCheckpointSaves, recover_interrupted_saves
from tests.helpers.patching import shadow

FILES = {"config.json", "model.safetensors", "optimizer_state_dict.pt", "scheduler_state_dict.pt"}
FILES |= {"val_metrics.json", "train_command.txt"}


class TinyConfig(PretrainedConfig):
    model_type = "tiny-async-save"


class TinyDraft(PreTrainedModel):
    """fp32 trainable weights, a frozen bf16 embedding and an integer buffer, like a draft's d2t."""

    config_class = TinyConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(11, 4, dtype=torch.bfloat16).requires_grad_(False)
        self.fc = torch.nn.Linear(4, 3)
        self.register_buffer("d2t", torch.arange(3))
        self.post_init()

    def forward(self, ids):
        return self.fc(self.embed(ids).float())


def trained(steps: int = 2):
    torch.manual_seed(0)
    model = TinyDraft(TinyConfig())
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=1, num_training_steps=10)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.tensor([1, 2, 3])).square().sum().backward()
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def checkpoints(path: Path) -> SingleGPUCheckpointer:
    path.mkdir(parents=True, exist_ok=True)
    (path / "train_command.txt").write_text("speculators train ...\n")
    return SingleGPUCheckpointer(path)


def save_synchronously(ckpt: SingleGPUCheckpointer, model, optimizer, scheduler, epoch: int, loss: float) -> None:
    """What speculators' Trainer.maybe_update_best does with --save-best."""
    ckpt.save_checkpoint(model, [optimizer], epoch)
    ckpt.save_scheduler_state_dict([scheduler], epoch)
    ckpt.save_val_metrics(epoch, {"loss_epoch": loss})
    ckpt.update_best_symlink(epoch)
    ckpt.cleanup_keep_only_best(best_epoch=epoch)


def assert_same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


def test_the_background_save_writes_what_speculators_writes(tmp_path, monkeypatch):
    model, optimizer, scheduler = trained()
    save_synchronously(checkpoints(tmp_path / "sync"), model, optimizer, scheduler, 1, 0.5)
    saves = BestCheckpointSaves(checkpoints(tmp_path / "async"), rank=0)
    saves.save(model, [optimizer], [scheduler], 1, {"loss_epoch": 0.5})
    trained_on = {k: v.clone() for k, v in model.state_dict().items()}
    model.fc.weight.data.add_(1.0)  # training goes on: the snapshot was taken before
    saves.close()

    sync, background = tmp_path / "sync" / "1", tmp_path / "async" / "1"
    assert {p.name for p in background.iterdir()} == {p.name for p in sync.iterdir()} == FILES
    assert sorted(p.name for p in (tmp_path / "async").iterdir()) == ["1", "checkpoint_best", "train_command.txt"]
    assert os.readlink(tmp_path / "async" / "checkpoint_best") == "1"
    for name in ("config.json", "val_metrics.json", "train_command.txt"):
        assert (background / name).read_text() == (sync / name).read_text()
    assert json.loads((background / "config.json").read_text())["dtype"] == "bfloat16"
    assert_same(load_file(sync / "model.safetensors"), load_file(background / "model.safetensors"))
    assert torch.equal(load_file(background / "model.safetensors")["fc.weight"], trained_on["fc.weight"].bfloat16())
    for name in ("optimizer_state_dict.pt", "scheduler_state_dict.pt"):
        assert_same(torch.load(sync / name, weights_only=True), torch.load(background / name, weights_only=True))

    # speculators' resume reads it back: the epoch, the best loss, the weights and optimizer state
    monkeypatch.setattr(checkpointer, "get_current_device", lambda: "cpu")
    resumed = SingleGPUCheckpointer(tmp_path / "async")
    assert resumed.previous_epoch == 1 and resumed.load_best_val_loss() == 0.5
    fresh, fresh_optimizer, _ = trained(steps=0)
    resumed.load_model_state_dict(fresh)
    resumed.load_optimizer_state_dict(fresh, [fresh_optimizer])
    assert torch.equal(fresh.fc.weight, trained_on["fc.weight"].bfloat16().float())


def first_best_saved(root: Path):
    """(saves, model, optimizer, scheduler) once epoch 0 is saved as the best under ``root``."""
    model, optimizer, scheduler = trained()
    saves = BestCheckpointSaves(checkpoints(root), rank=0)
    saves.save(model, [optimizer], [scheduler], 0, {"loss_epoch": 0.9})
    saves.wait()
    return saves, model, optimizer, scheduler


def test_a_later_best_replaces_the_earlier_and_the_link_moves_only_after_the_rename(tmp_path, monkeypatch):
    root = tmp_path / "ckpt"
    saves, model, optimizer, scheduler = first_best_saved(root)
    seen = []
    rename, replace = os.rename, os.replace

    def watched_rename(src, dst):
        seen.append(("rename", Path(dst).name, os.readlink(root / "checkpoint_best")))
        rename(src, dst)

    def watched_replace(src, dst):
        seen.append(("link", sorted((root / "2").iterdir()) != [], (root / ".2.partial").exists()))
        replace(src, dst)

    shadow(monkeypatch, async_save, "os", rename=watched_rename, replace=watched_replace)
    saves.save(model, [optimizer], [scheduler], 2, {"loss_epoch": 0.4})
    saves.close()
    assert seen == [("rename", "2", "0"), ("link", True, False)]
    assert sorted(p.name for p in root.iterdir()) == ["2", "checkpoint_best", "train_command.txt"]
    assert os.readlink(root / "checkpoint_best") == "2"


def test_a_failed_write_is_raised_at_the_next_join(tmp_path, monkeypatch):
    model, optimizer, scheduler = trained()
    saves = BestCheckpointSaves(checkpoints(tmp_path / "ckpt"), rank=0)

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(async_save, "patch_config_dtype", disk_full)
    saves.save(model, [optimizer], [scheduler], 0, {"loss_epoch": 0.9})
    with pytest.raises(RuntimeError, match="saving best epoch 0 failed") as raised:
        saves.save(model, [optimizer], [scheduler], 1, {"loss_epoch": 0.8})  # joins the first save
    assert isinstance(raised.value.__cause__, OSError)
    saves.close()  # raised once: nothing left to raise


def test_a_crash_mid_write_leaves_the_previous_best_and_its_partial_folder_is_never_resumed(tmp_path, monkeypatch):
    root = tmp_path / "ckpt"
    saves, model, optimizer, scheduler = first_best_saved(root)
    before = {p.name: p.read_bytes() for p in (root / "0").iterdir()}

    def crash(*args, **kwargs):  # the model is written; the process dies writing the optimizer state
        raise SystemExit("killed")

    shadow(monkeypatch, async_save, "torch", save=crash)
    saves.save(model, [optimizer], [scheduler], 1, {"loss_epoch": 0.5})
    with pytest.raises(RuntimeError, match="saving best epoch 1 failed"):
        saves.close()
    monkeypatch.undo()

    assert os.readlink(root / "checkpoint_best") == "0"
    assert {p.name: p.read_bytes() for p in (root / "0").iterdir()} == before
    assert (root / ".1.partial" / "model.safetensors").exists() and not (root / "1").exists()
    assert SingleGPUCheckpointer(root).previous_epoch == 0  # speculators' resume skips the partial folder
    (root / ".checkpoint_best.tmp").symlink_to("1")  # a link that was being made when the process died

    recover_interrupted_saves(root)
    assert sorted(p.name for p in root.iterdir()) == ["0", "checkpoint_best", "train_command.txt"]
    resumed = SingleGPUCheckpointer(root)
    assert resumed.previous_epoch == 0 and resumed.load_best_val_loss() == 0.9


def test_other_ranks_write_nothing(tmp_path):
    model, optimizer, scheduler = trained()
    saves = BestCheckpointSaves(checkpoints(tmp_path / "ckpt"), rank=1)
    saves.save(model, [optimizer], [scheduler], 0, {"loss_epoch": 0.9})
    saves.close()
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["train_command.txt"]
