"""Muon's Newton-Schulz iteration by strips: the same result as torch's, installed into torch.optim.Muon."""

import pytest
import torch
from torch.optim import _muon

from benchmarks.newton_schulz import exact_iteration
from eagle_assets.eagle3_checkpoint.trainer_process import newton_schulz as ns

COEFFICIENTS = (_muon.DEFAULT_A, _muon.DEFAULT_B, _muon.DEFAULT_C)


def _exact(grad: torch.Tensor, steps: int = 5) -> torch.Tensor:
    return exact_iteration(grad, COEFFICIENTS, steps, _muon.EPS)


@pytest.mark.parametrize("shape", [(96, 288), (288, 96), (100, 100), (130, 250), (20, 70)])
def test_strips_give_torchs_result(shape):
    """Wide, tall, square, strips that do not divide the rows, and a matrix of one strip."""
    torch.manual_seed(0)
    grad = torch.randn(shape)
    theirs = _muon._zeropower_via_newtonschulz(grad, COEFFICIENTS, 5, _muon.EPS)
    ours = ns.newton_schulz(grad, COEFFICIENTS, 5, _muon.EPS, block_rows=32)
    assert ours.shape == theirs.shape == shape and ours.dtype == theirs.dtype == torch.bfloat16
    exact = _exact(grad)
    # bf16 rounding apart, the same iteration: as close to the exact result as torch's, and to torch's.
    assert (ours.double() - exact).abs().max() <= 1.05 * (theirs.double() - exact).abs().max() + 1e-4
    assert (ours.double() - theirs.double()).norm() <= 1e-2 * theirs.double().norm()


def test_coefficients_of_any_value_give_torchs_result():
    """Muon takes its coefficients as a setting: b = 0 still scales A A by c."""
    torch.manual_seed(0)
    grad = torch.randn(64, 160)
    for coefficients in ((2.0, 0.0, -1.5), (1.5, -0.5, 0.0), (3.0, -3.0, 1.0)):
        theirs = _muon._zeropower_via_newtonschulz(grad, coefficients, 3, _muon.EPS)
        ours = ns.newton_schulz(grad, coefficients, 3, _muon.EPS, block_rows=16)
        assert (ours.double() - theirs.double()).norm() <= 1e-2 * theirs.double().norm(), coefficients


def test_symmetric_products_are_symmetric_and_equal_the_whole_products():
    torch.manual_seed(0)
    x = torch.randn(70, 90).bfloat16()
    gram = ns.symmetric_product(x, block_rows=16)
    assert torch.equal(gram, gram.T)
    torch.testing.assert_close(gram, x @ x.T, rtol=2e-2, atol=0.5)
    update = ns.symmetric_product(gram, scale=(-4.775, 2.0315), block_rows=16)
    assert torch.equal(update, update.T)
    expected = -4.775 * gram.float() + 2.0315 * gram.float() @ gram.float()
    assert (update.float() - expected).norm() <= 1e-2 * expected.norm()


def test_the_strips_compute_fewer_products_than_the_whole(monkeypatch):
    """(k + 1) / 2k of a symmetric product's multiply-adds for k strips: 5/8 with four."""
    x = torch.randn(64, 128)
    entries = []
    real_mm = torch.mm

    def counting(a, b, *, out):
        entries.append(a.size(0) * b.size(1))
        return real_mm(a, b, out=out)

    monkeypatch.setattr(torch, "mm", counting)
    gram = ns.symmetric_product(x, block_rows=16)
    torch.testing.assert_close(gram, x @ x.T)
    assert sum(entries) == (4 + 1) * 64 * 64 // (2 * 4)


def test_installed_muon_steps_as_torchs(monkeypatch):
    monkeypatch.setattr(_muon, "_zeropower_via_newtonschulz", _muon._zeropower_via_newtonschulz)
    torch.manual_seed(0)
    start = torch.randn(40, 120)
    grads = [torch.randn(40, 120) for _ in range(3)]

    def train() -> torch.Tensor:
        weight = torch.nn.Parameter(start.clone())
        optimizer = torch.optim.Muon([weight], lr=0.02)
        for grad in grads:
            weight.grad = grad.clone()
            optimizer.step()
        return weight.detach()

    before = train()
    assert ns.install() and _muon._zeropower_via_newtonschulz is ns.newton_schulz
    assert ns.install()  # a second install changes nothing
    torch.testing.assert_close(train(), before, rtol=0, atol=1e-3)


def test_install_leaves_a_muon_of_another_shape_alone(monkeypatch):
    def other(grad, coefficients, steps):
        return grad

    monkeypatch.setattr(_muon, "_zeropower_via_newtonschulz", other)
    assert not ns.install()
    assert _muon._zeropower_via_newtonschulz is other
    monkeypatch.delattr(_muon, "_zeropower_via_newtonschulz")
    assert not ns.install()


def test_a_sharded_update_keeps_torchs_iteration(monkeypatch):
    """A tensor subclass (FSDP's DTensor) goes to torch's own iteration, whose products DTensor distributes."""
    calls = []

    class Sharded(torch.Tensor):
        pass

    def torchs(grad, coefficients, steps, eps):
        calls.append(type(grad))
        return grad

    monkeypatch.setattr(ns, "_TORCH_ITERATION", torchs)
    grad = torch.randn(8, 16).as_subclass(Sharded)
    assert ns.newton_schulz(grad, COEFFICIENTS, 5, _muon.EPS) is grad and calls == [Sharded]
    ns.newton_schulz(torch.randn(8, 16), COEFFICIENTS, 5, _muon.EPS)
    assert calls == [Sharded]
