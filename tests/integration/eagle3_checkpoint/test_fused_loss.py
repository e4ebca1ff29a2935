"""speculators' fused Triton loss through eagle_assets' custom ops: the eager loss's values and
gradients, called plainly and from a ``torch.compile``d function (where speculators' own wrapper fails).

Triton kernels run here in Triton's interpreter (``TRITON_INTERPRET=1``, read when a kernel is
defined), so the check runs in a fresh process; the GPU benchmark trains with the compiled kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHECK = r"""
import torch
from speculators.losses import eager, fused
from eagle_assets.eagle3_checkpoint.trainer_process import fused_loss

fused_loss.install()
torch.manual_seed(0)
for name in ("kl_div_loss", "js_div_loss", "ce_loss", "tv_loss"):
    logits = torch.randn(1, 24, 333, requires_grad=True)
    targets = torch.randn(1, 24, 333)
    want = getattr(eager, name)(logits, targets)
    (want_grad,) = torch.autograd.grad(want.sum(), logits)
    fn = getattr(fused, "fused_" + name)
    compiled = torch.compile(lambda l, t: fn(l * 1.0, t), backend="aot_eager", fullgraph=True)
    for how, call in (("plain", fn), ("compiled", compiled)):
        got = call(logits, targets)
        (grad,) = torch.autograd.grad(got.sum(), logits)
        assert got.shape == want.shape, (name, how, got.shape)
        assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (name, how, (got - want).abs().max())
        assert torch.allclose(grad, want_grad, atol=1e-6, rtol=1e-4), (name, how, (grad - want_grad).abs().max())
        print(name, how, "ok")
"""


def test_fused_loss_matches_the_eager_loss_plain_and_compiled():
    pytest.importorskip("triton", reason="the fused loss is a Triton kernel; this torch has no Triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count(" ok") == 8
