"""hopattn.quantize_fp8: e4m3 with per-block scales and optional incoherent processing.

The check that needs no copy of the kernel's rotation: quantizing Q and K with the same seed must
preserve Q K^T up to e4m3 rounding (the rotation is orthogonal), and without the rotation the
dequantized tensor must match the input. (Whether the rotation lowers the error of attention
outputs is the accuracy study's question, not a unit test's.)"""

import pytest

from hopattn_testing import require_hopper_extension

torch, hopattn = require_hopper_extension()


def _dequant(x8, descale, block_rows):
    s = x8.shape[1]
    rows = s if block_rows <= 0 else block_rows
    scale = descale.repeat_interleave(rows, dim=2)[:, :, :s]  # (B, H, S)
    return x8.double() * scale.permute(0, 2, 1).unsqueeze(-1).double()


def _inputs(d, outliers=True, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = (2, 256, 4, d)
    q = torch.randn(shape, device="cuda", generator=g)
    k = torch.randn(shape, device="cuda", generator=g)
    if outliers:  # N(0, 1) + N(0, 100) * Bernoulli(0.001), as in the paper's accuracy study
        for t in (q, k):
            t += 10 * torch.randn(shape, device="cuda", generator=g) * (torch.rand(shape, device="cuda", generator=g) < 1e-3)
    return q.bfloat16(), k.bfloat16()


@pytest.mark.parametrize("block_rows", [0, 64])
def test_plain_quantization_roundtrip(block_rows):
    x, _ = _inputs(128, outliers=False)
    x8, descale = hopattn.quantize_fp8(x, block_rows=block_rows)
    assert x8.dtype == torch.float8_e4m3fn and descale.dtype == torch.float32
    err = (_dequant(x8, descale, block_rows) - x.double()).abs()
    assert torch.all(err <= x.double().abs() * 0.0625 + descale.max().double() * 2**-9)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_rotation_preserves_scores(d):
    q, k = _inputs(d)
    exact = torch.einsum("bshd,bthd->bhst", q.double(), k.double())

    def scores(hadamard):
        q8, dq = hopattn.quantize_fp8(q, hadamard=hadamard, seed=7)
        k8, dk = hopattn.quantize_fp8(k, hadamard=hadamard, seed=7)
        return torch.einsum("bshd,bthd->bhst", _dequant(q8, dq, 0), _dequant(k8, dk, 0))

    err_plain = ((scores(False) - exact).pow(2).mean() / exact.pow(2).mean()).sqrt().item()
    err_rot = ((scores(True) - exact).pow(2).mean() / exact.pow(2).mean()).sqrt().item()
    assert err_plain < 0.05, err_plain
    assert err_rot < 0.05, err_rot
    assert err_rot < 1.5 * err_plain, (err_rot, err_plain)


def test_quantize_validation():
    x = torch.randn(1, 16, 2, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="hadamard"):
        hopattn.quantize_fp8(x, hadamard=True)
    with pytest.raises(ValueError, match="^x|^in"):
        hopattn.quantize_fp8(x.float())
    with pytest.raises(ValueError, match="block_rows"):
        hopattn.quantize_fp8(x, block_rows=-3)
