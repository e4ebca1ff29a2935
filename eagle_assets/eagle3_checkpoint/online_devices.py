"""Which GPUs the extraction server and the trainer of a ``features: online`` run each claim.

Both run at once inside the one ``gpu`` pool slot the step holds, so the split is the pool's account of
the host. By default both see every GPU: a Kimi-K2.5-sized verifier needs all eight for its weights, and
the draft's training fits beside it once vLLM leaves part of each GPU's memory free
(:data:`SHARED_GPU_MEMORY_FRACTION`). A smaller verifier can have GPUs of its own (``server_devices``,
``trainer_devices``); each process sees only its own through ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# vLLM's share of a GPU's memory when the trainer runs on the same GPU (vLLM's own default is 0.9).
SHARED_GPU_MEMORY_FRACTION = 0.7


class DeviceSplitError(ValueError):
    """The configured devices do not exist on this host, or do not suit the server's tensor parallelism."""


@dataclass(frozen=True)
class DeviceSplit:
    server: tuple[int, ...]  # CUDA device indices the extraction server sees; () on a CPU host
    trainer: tuple[int, ...]  # and the trainer

    @property
    def shared(self) -> bool:
        """Whether some GPU runs both (the server then leaves room for the trainer)."""
        return bool(set(self.server) & set(self.trainer))

    def server_env(self) -> dict[str, str]:
        return _visible(self.server)

    def trainer_env(self) -> dict[str, str]:
        return _visible(self.trainer)

    def describe(self) -> str:
        if not self.server:
            return "no GPU: the extraction server and the trainer share the CPU"
        shared = f" (shared; vLLM takes {SHARED_GPU_MEMORY_FRACTION:.0%} of each)" if self.shared else ""
        return f"extraction server on GPUs {_listed(self.server)}, trainer on GPUs {_listed(self.trainer)}{shared}"


def _visible(devices: tuple[int, ...]) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))} if devices else {}


def _listed(devices: tuple[int, ...]) -> str:
    return ",".join(map(str, devices))


def visible_gpus() -> int:
    import torch  # loaded when an online run is planned, not when the code location loads

    return torch.cuda.device_count()


def split_devices(visible: int, server: Sequence[int] = (), trainer: Sequence[int] = ()) -> DeviceSplit:
    """The split on a host with ``visible`` GPUs: each side the devices it names, else those the other side
    leaves, else every GPU (both sides share them when neither names any)."""
    server, trainer = tuple(server), tuple(trainer)
    if visible == 0:
        if server or trainer:
            raise DeviceSplitError(
                f"server_devices {list(server)} / trainer_devices {list(trainer)} name GPUs, but this host shows "
                "none: leave both empty on a CPU host"
            )
        return DeviceSplit((), ())
    unknown = sorted({d for d in (*server, *trainer) if not 0 <= d < visible})
    if unknown:
        raise DeviceSplitError(
            f"server_devices / trainer_devices name GPUs {unknown}, but this host shows {visible} "
            f"(0-{visible - 1}): name GPUs of this host"
        )
    everything = tuple(range(visible))
    return DeviceSplit(
        server or tuple(d for d in everything if d not in trainer) or everything,
        trainer or tuple(d for d in everything if d not in server) or everything,
    )


def server_engine(split: DeviceSplit, tensor_parallel_size: int, auto_tensor_parallel: bool, kwargs: dict) -> dict:
    """The server's engine keyword arguments for ``split``: an automatic tensor parallelism spans the server's
    GPUs, a configured one must fit in them; on shared GPUs vLLM leaves room for the trainer unless the
    engine arguments size its memory."""
    if not split.server:
        return kwargs
    tp = len(split.server) if auto_tensor_parallel else tensor_parallel_size
    if tp > len(split.server):
        raise DeviceSplitError(
            f"the verifier's tensor_parallel_size {tp} needs {tp} GPUs, but the extraction server has "
            f"{len(split.server)} ({_listed(split.server)}): give server_devices at least {tp} GPUs, or lower "
            "the tensor parallelism"
        )
    kwargs = {**kwargs, "tensor_parallel_size": tp}
    if split.shared:
        kwargs.setdefault("gpu_memory_utilization", SHARED_GPU_MEMORY_FRACTION)
    return kwargs
