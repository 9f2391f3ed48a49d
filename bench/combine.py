#!/usr/bin/env python3
"""The combine of split attention results (hopattn.flash_attn_combine) against the same merge
written in PyTorch, in one process.

Shapes: split-KV decoding (one query row per sequence, many splits) and ring / context-parallel
attention (long sequences, few splits). Inputs: out_partial float32 (splits, batch, seqlen,
nheads, head_dim) random normal, lse_partial float32 (splits, batch, nheads, seqlen) random
normal times 4; output bf16. Both are memory-bound, so the figure is the bandwidth of the bytes
each must move at least: every partial and LSE read once, out (bf16) and its LSE written once.
Timing: triton.testing.do_bench median (L2 cleared before every rep). The PyTorch merge:
lse = logsumexp over splits, weights exp(lse_i - lse), out = sum_i w_i out_i, cast to bf16.
Results are checked against each other before timing. See bench/README.md.

    python3 bench/combine.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import hopattn

# (label, splits, batch, seqlen, nheads, head_dim)
SHAPES = (
    ("decode, 16 splits", 16, 64, 1, 32, 128),
    ("decode, 32 splits", 32, 128, 1, 64, 128),
    ("decode d64, 64 splits", 64, 256, 1, 32, 64),
    ("ring, 2 splits", 2, 4, 8192, 16, 128),
    ("ring, 8 splits", 8, 1, 16384, 16, 128),
    ("ring d256, 4 splits", 4, 2, 8192, 8, 256),
)


def torch_combine(out_partial: torch.Tensor, lse_partial: torch.Tensor):
    lse = torch.logsumexp(lse_partial, dim=0)  # (batch, nheads, seqlen)
    w = torch.exp(lse_partial - lse).permute(0, 1, 3, 2).unsqueeze(-1)  # (splits, batch, seqlen, nheads, 1)
    return (out_partial * w).sum(0).to(torch.bfloat16), lse


def min_bytes(splits: int, batch: int, seqlen: int, nheads: int, hdim: int) -> int:
    rows = batch * seqlen * nheads
    return splits * rows * (hdim + 1) * 4 + rows * (hdim * 2 + 4)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="write the records as JSON here")
    ap.add_argument("--rep-ms", type=float, default=200.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("combine.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    from triton.testing import do_bench

    gpu = torch.cuda.get_device_name()
    torch.manual_seed(0)
    records = []
    print(f"GPU: {gpu}")
    print("| shape | splits x batch x seqlen x heads x d | hopattn us | GB/s | PyTorch us | GB/s | speedup |")
    print("|---|---|---|---|---|---|---|")
    for label, n, b, s, h, d in SHAPES:
        o = torch.randn(n, b, s, h, d, device="cuda", dtype=torch.float32)
        lse = torch.randn(n, b, h, s, device="cuda", dtype=torch.float32) * 4
        got, got_lse = hopattn.flash_attn_combine(o, lse, out_dtype=torch.bfloat16)
        want, want_lse = torch_combine(o, lse)
        err = (got.float() - want.float()).abs().max().item()
        lse_err = (got_lse - want_lse).abs().max().item()
        # Both round an fp32 merge to bf16: at most one bf16 ulp apart (2^-7 relative), LSE in fp32.
        out_ok = bool(((got.float() - want.float()).abs() <= 2.0**-7 * want.float().abs() + 1e-6).all())
        if not out_ok or lse_err > 1e-4:
            print(f"combine.py: {label}: results differ (out {err:.3g}, lse {lse_err:.3g})", file=sys.stderr)
            return 1
        t_hop = do_bench(lambda: hopattn.flash_attn_combine(o, lse, out_dtype=torch.bfloat16), rep=args.rep_ms,
                         return_mode="median")
        t_torch = do_bench(lambda: torch_combine(o, lse), rep=args.rep_ms, return_mode="median")
        nbytes = min_bytes(n, b, s, h, d)
        gbs_hop, gbs_torch = nbytes / (t_hop * 1e6), nbytes / (t_torch * 1e6)
        print(f"| {label} | {n} x {b} x {s} x {h} x {d} | {t_hop * 1e3:.1f} | {gbs_hop:.0f} | "
              f"{t_torch * 1e3:.1f} | {gbs_torch:.0f} | {t_torch / t_hop:.2f} |")
        records.append(dict(gpu=gpu, shape=label, splits=n, batch=b, seqlen=s, nheads=h, head_dim=d,
                            bytes=nbytes, hopattn_ms=t_hop, torch_ms=t_torch, hopattn_gbs=gbs_hop,
                            torch_gbs=gbs_torch, max_abs_diff=err))
        del o, lse, got, want
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)
        print(f"# {len(records)} records written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
