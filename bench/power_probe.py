#!/usr/bin/env python3
"""Is a shape power-bound, and how much work does each implementation get per joule?

Runs each implementation's forward (or backward) back to back for a few seconds per round while
`nvidia-smi` samples the SM clock and board power every 20 ms, and prints per implementation and
round: TFLOP/s over the whole run (CUDA events), the median SM clock and power after the first
quarter of the samples (the clock settles within the first second), and TFLOP per joule. Rounds
rotate the implementations, as `peers.py --rounds` does.

A kernel that holds the board near its power limit with the clock well under its maximum gains
speed only by spending less energy per block; one that runs at the maximum clock is bound by its
instruction stream instead.

  python3 bench/power_probe.py --hdim 256 --seqlen 2048 --impls cudnn,hopattn --seconds 4
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (shapes, FLOP count and implementations are the peers grid's)


def smi_index() -> str:
    """nvidia-smi's name for the current device, so that one GPU is sampled: its index, or its PCI
    address where CUDA_VISIBLE_DEVICES renumbers the devices CUDA sees."""
    ordinal = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(ordinal)
    bus = getattr(props, "pci_bus_id", None)
    if not os.environ.get("CUDA_VISIBLE_DEVICES") or bus is None:
        return str(ordinal)
    domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:  # "[N/A]" on boards that do not report a field
        return None


def sample_power(fn, seconds: float) -> dict:
    """Run fn repeatedly for about `seconds`: ms per call and the medians of the nvidia-smi samples."""
    smi = subprocess.Popen(
        ["nvidia-smi", "-i", smi_index(), "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
         "-lms", "20"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, t0, in_flight = 0, time.monotonic(), None
        start.record()
        while time.monotonic() - t0 < seconds:
            for _ in range(10):
                fn()
            calls += 10
            # Wait for the previous chunk only: the queue never drains (the launches of short
            # calls would otherwise show as idle time), and the wall clock stays near the GPU's.
            done = torch.cuda.Event()
            done.record()
            if in_flight is not None:
                in_flight.synchronize()
            in_flight = done
        stop.record()
        torch.cuda.synchronize()
        elapsed_ms = start.elapsed_time(stop)
    finally:
        smi.terminate()
        out, _ = smi.communicate(timeout=10)
    rows = [[_number(x) for x in line.split(",")] for line in out.splitlines() if line.count(",") == 1]
    settled = rows[len(rows) // 4 :] or rows
    clocks = [r[0] for r in settled if r[0] is not None]
    powers = [r[1] for r in settled if r[1] is not None]
    if not clocks or not powers:
        raise RuntimeError(f"nvidia-smi returned no usable samples ({len(rows)} lines)")
    return {
        "ms_per_call": elapsed_ms / calls,
        "clock_mhz": statistics.median(clocks),
        "power_w": statistics.median(powers),
        "samples": len(rows),
    }


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdim", type=int, default=256)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--direction", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--impls", default="cudnn,hopattn", help="comma list of peers.py implementations")
    ap.add_argument("--seconds", type=float, default=4.0, help="per implementation and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", choices=tuple(peers.DTYPES), default="bf16")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("power_probe: no CUDA device", file=sys.stderr)
        return 2
    shape = peers.Shape(args.hdim, args.causal, args.seqlen)
    flops = peers.case_flops(shape, args.direction)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(shape.batch, shape.seqlen, h, shape.hdim, device="cuda", dtype=peers.DTYPES[args.dtype],
                    generator=gen)
        for h in (shape.nheads, shape.nheads_k, shape.nheads_k)
    )
    impls = peers.make_impls(args.impls.split(","))
    print(f"{torch.cuda.get_device_name()}: {args.direction} {args.dtype} d{shape.hdim} seqlen {shape.seqlen} "
          f"{'causal' if shape.causal else 'unmasked'}, batch {shape.batch} x {shape.nheads} heads, "
          f"{args.seconds:g} s per implementation and round")
    print(f"{'impl':<12} {'round':>5} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'TFLOP/J':>8}")
    for r in range(args.rounds):
        order = impls[r % len(impls):] + impls[: r % len(impls)]
        for impl in order:
            try:
                if args.direction == "fwd":
                    ctx = impl.context()
                    with torch.no_grad(), ctx:
                        fn = lambda: impl.forward(q, k, v, shape.causal)  # noqa: E731
                        fn()
                        res = sample_power(fn, args.seconds)
                else:
                    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                    with impl.context():
                        out = impl.forward(*leaves, shape.causal)
                    dout = torch.randn_like(out)
                    fn = lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)  # noqa: E731
                    fn()
                    res = sample_power(fn, args.seconds)
            except Exception as exc:  # one implementation failing must not hide the others
                if peers._is_cuda_fault(exc):
                    raise  # the context is broken: later figures would be meaningless
                print(f"{impl.name:<12} {r:>5} unavailable: {peers._first_line(exc)}")
                continue
            tflops = flops / (res["ms_per_call"] * 1e-3) / 1e12
            print(f"{impl.name:<12} {r:>5} {tflops:8.1f} {res['clock_mhz']:7.0f} {res['power_w']:6.0f} "
                  f"{tflops / res['power_w']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
