"""speculators' fused (Triton) loss, callable from the draft's compiled forward.

speculators' ``fused`` loss computes the draft-vs-verifier divergence with an online softmax over the
draft vocabulary: the eager loss materialises several float32 ``[tokens, draft_vocab]`` tensors (8K
tokens x 32K vocabulary x 4 bytes = 1 GiB each, per TTT step). Its kernels are launched from an
``autograd.Function`` (``speculators.losses.fused._FusedLoss``) inside the draft's ``torch.compile``d
forward, where dynamo traces into Triton's launcher and autotuner; on torch 2.11 (the H200 image) that
fails ("ListVariable ... already tracked for mutation"), so speculators' CLI default cannot train there.

Here the same two kernels run as torch custom ops with an autograd formula: the compiler treats each as
one opaque call and never traces the launch. :func:`install` points speculators' fused loss functions
(``fused_kl_div_loss`` and the others look ``_FusedLoss`` up at call time) at :class:`CompilableFusedLoss`.
Results are speculators' own kernels' results, bit for bit.
"""

from __future__ import annotations

import torch
from speculators.losses import fused

_NAMESPACE = "eagle_assets"


@torch.library.custom_op(f"{_NAMESPACE}::fused_loss_forward", mutates_args=())
def fused_loss_forward(logits: torch.Tensor, targets: torch.Tensor, op: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and the softmax statistics the backward reuses; ``logits``/``targets``: ``[rows, vocab]``."""
    rows, cols = logits.shape
    loss = torch.empty(rows, device=logits.device, dtype=torch.float32)
    stats = torch.empty(fused._N_STATS, rows, device=logits.device, dtype=torch.float32)
    fused.loss_forward_kernel[(rows,)](logits, targets, loss, stats, stats.stride(0), cols, OP=op)
    return loss, stats


@fused_loss_forward.register_fake
def _(logits, targets, op):
    rows = logits.shape[0]
    return (logits.new_empty(rows, dtype=torch.float32), logits.new_empty((fused._N_STATS, rows), dtype=torch.float32))


@torch.library.custom_op(f"{_NAMESPACE}::fused_loss_backward", mutates_args=())
def fused_loss_backward(
    logits: torch.Tensor, targets: torch.Tensor, grad_loss: torch.Tensor, stats: torch.Tensor, op: int
) -> torch.Tensor:
    """Gradient of the per-row loss with respect to ``logits`` (targets get none, as in speculators)."""
    rows, cols = logits.shape
    grad = torch.empty_like(logits)
    fused.loss_backward_kernel[(rows,)](logits, targets, grad, grad_loss, stats, stats.stride(0), cols, OP=op)
    return grad


@fused_loss_backward.register_fake
def _(logits, targets, grad_loss, stats, op):
    return torch.empty_like(logits)


def _save_for_backward(ctx, inputs, output):
    logits, targets, op = inputs
    ctx.save_for_backward(logits, targets, output[1])
    ctx.op = op


def _backward(ctx, grad_loss, _grad_stats):
    logits, targets, stats = ctx.saved_tensors
    return fused_loss_backward(logits, targets, grad_loss.contiguous(), stats, ctx.op), None, None


fused_loss_forward.register_autograd(_backward, setup_context=_save_for_backward)


class CompilableFusedLoss:
    """Stands in for ``speculators.losses.fused._FusedLoss``: same ``apply(logits, targets, op)``."""

    @staticmethod
    def apply(logits: torch.Tensor, targets: torch.Tensor, op: int) -> torch.Tensor:
        batch, tokens, vocab = logits.shape
        loss, _ = fused_loss_forward(
            logits.contiguous().view(batch * tokens, vocab), targets.contiguous().view(batch * tokens, vocab), op
        )
        return loss.view(batch, tokens)


def install() -> None:
    """Route speculators' fused loss functions through the custom ops (this process only)."""
    fused._FusedLoss = CompilableFusedLoss
