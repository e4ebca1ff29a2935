"""The one place where speculators' trainer is adapted to a machine without an accelerator.

speculators 0.9.0 assumes a CUDA-like accelerator in five places (read in its source):

1. ``Trainer.setup_model`` moves the model to ``get_local_rank()`` (the integer 0, i.e. ``cuda:0``),
   and every batch goes to the same device; ``Trainer.device_type`` falls back to ``"cuda"`` for
   ``torch.autocast`` when ``torch.accelerator`` reports none.
2. ``_StepTimer`` calls ``torch.accelerator.synchronize()``, which raises without an accelerator.
3. Flex attention (the default draft attention) has no CPU backward: the draft uses ``sdpa``.
4. The default fused loss is a Triton kernel: on CPU the ``eager`` loss runs.
5. Resuming loads ``model.safetensors`` and optimizer state onto ``get_current_device()``,
   which is ``"cuda:0"`` when there is no accelerator.
6. Under ``torchrun``, ``maybe_setup_distributed`` raises "No accelerator found": it picks the
   process-group backend from the accelerator. Without one the group uses ``gloo`` (DDP on CPU),
   so the several-process path can be exercised on any machine.

It also caps torch's intra-op threads (``cpu_threads``): OpenMP threads that share busy cores with
other processes spin at every barrier, and a small draft's matrices gain nothing from them.

(1), (2), (5) and (6) are patched here, in the training process only, and only when CUDA is absent.
(3) and (4) are ordinary speculators flags that :mod:`~eagle_assets.eagle3_checkpoint.trainer` passes
(``attention_impl: auto`` resolves to ``sdpa`` on CPU, ``loss_implementation: auto`` to ``eager``;
``compute_dtype: auto`` computes in float32 there, faster than bf16 on CPUs). On a GPU
host nothing here runs and speculators trains unchanged.
"""

from __future__ import annotations

CPU = "cpu"


def needs_cpu_adaptations() -> bool:
    import torch

    return not torch.cuda.is_available()


def apply_cpu_adaptations(threads: int) -> None:
    """Patch adaptations 1, 2, 5 and 6 into the already-imported speculators trainer modules."""
    import torch
    from speculators.train import checkpointer, cli, trainer

    torch.set_num_threads(threads)

    def synchronize_nothing(device=None) -> None:
        # CPU kernels run synchronously: there is nothing to wait for.
        return None

    if torch.accelerator.current_accelerator() is None:
        torch.accelerator.synchronize = synchronize_nothing
    # The trainer reads its device from this name at construction time (1).
    trainer.get_local_rank = lambda: CPU
    # Resume maps saved tensors onto this device (5).
    checkpointer.get_current_device = lambda: CPU

    original_init = trainer.Trainer.__init__

    def init_on_cpu(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.device_type = CPU  # autocast on the CPU, not "cuda" (1)

    trainer.Trainer.__init__ = init_on_cpu
    cli.maybe_setup_distributed = setup_gloo_distributed  # (6)


def setup_gloo_distributed(sp_size: int = 1) -> None:
    """speculators' ``maybe_setup_distributed`` with a ``gloo`` process group (6); the topology
    state lives in its module, which every other speculators module reads through getters."""
    import os

    import torch.distributed as dist
    from speculators.train import distributed

    if "LOCAL_RANK" not in os.environ:
        return
    dist.init_process_group("gloo")
    distributed._local_rank = int(os.environ["LOCAL_RANK"])
    distributed._is_distributed = True
    distributed._rank, distributed._world_size = dist.get_rank(), dist.get_world_size()
    distributed._init_sp_process_groups(distributed._rank, distributed._world_size, sp_size)
