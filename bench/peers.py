#!/usr/bin/env python3
"""hopattn against its peers on the FlashAttention-3 paper's grid, in one process.

Implementations (same inputs, same process, interleaved shape by shape):
  fa2      PyTorch SDPA, FLASH_ATTENTION backend (FlashAttention-2)
  cudnn    PyTorch SDPA, CUDNN_ATTENTION backend
  hopattn  hopattn.flash_attn_func (FlashAttention-3's signature)

Grid: batch * seqlen = 16384 tokens, hidden 2048 (nheads = 2048 / hdim), q/k/v (B, S, H, D)
random normal. --kv-group G gives K and V nheads / G heads (GQA); the SDPA peers take them with
enable_gqa=True where their backend accepts it, else K and V repeated to nheads inside the timed
call (a record's "peer_gqa" says which). FLOPs: forward 4 * S^2 * D * H * B, halved when
causal; backward 2.5 x forward.
Timing: triton.testing.do_bench(..., return_mode="median"), which clears L2 before every rep.
--rounds N times every (implementation, direction) N times per shape, the implementations in a
rotated order each round, and records the median of the rounds (their times in "rounds_ms"): the
card's clock drifts as it heats over a process (perf-log session 40), which a fixed order hands
to one implementation, and one do_bench call of a peer can land 5-10% off its usual figure.
Forward is timed under torch.no_grad(); backward alone is timed as
torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on a graph built once.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import re
import statistics
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
TOKENS = 16384
HIDDEN = 2048
ALL_SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_SEQLENS = (1024, 4096, 16384)
IMPLS = ("fa2", "cudnn", "hopattn")
OPTIONAL_IMPLS = ("hopattn-fp8", "hopattn-fp8-cast")  # not run unless named in --impls
LABELS = {"fa2": "FA2", "cudnn": "cuDNN", "hopattn": "hopattn", "hopattn-fp8": "hopattn FP8",
          "hopattn-fp8-cast": "hopattn FP8 (cast)"}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# ---- Shapes and FLOPs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    hdim: int
    causal: bool
    seqlen: int
    kv_group: int = 1  # query heads per K/V head

    @property
    def nheads_k(self) -> int:
        return self.nheads // self.kv_group

    @property
    def batch(self) -> int:
        return TOKENS // self.seqlen

    @property
    def nheads(self) -> int:
        return HIDDEN // self.hdim


def case_flops(shape: Shape, direction: str) -> float:
    """The paper's count: 4 * S^2 * D * H * B for the forward, halved when causal; bwd 2.5x."""
    fwd = 4.0 * shape.seqlen * shape.seqlen * shape.hdim * shape.nheads * shape.batch
    if shape.causal:
        fwd /= 2
    return fwd * (2.5 if direction == "bwd" else 1.0)


# ---- Implementations -----------------------------------------------------------------------


class Unavailable(Exception):
    """The implementation cannot run this case. Recorded with its reason; the run goes on."""


class Failed(Unavailable):
    """An unexpected (non-device) error: recorded, the run goes on, the exit status is 1."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _is_cuda_fault(exc: BaseException) -> bool:
    # A device fault poisons the context: never swallow it as "unavailable".
    msg = str(exc)
    return "CUDA error" in msg or "illegal memory access" in msg or "device-side assert" in msg


class Impl:
    name = ""

    def context(self):
        return contextlib.nullcontext()

    def forward(self, q, k, v, causal: bool):
        raise NotImplementedError

    def unavailable_reason(self, exc: BaseException) -> Optional[str]:
        """Why exc means 'cannot run this case', or None when it is a real failure."""
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return "out of memory"
        return None


class SdpaImpl(Impl):
    def __init__(self, name: str, backend: SDPBackend):
        self.name = name
        self.backend = backend
        self.gqa_native = {}  # (shapes, causal, grad) -> whether enable_gqa ran
        self.gqa_mode = None  # of the last GQA call: "native" or "expanded"

    def context(self):
        return sdpa_kernel(self.backend)

    def forward(self, q, k, v, causal: bool):
        # SDPA wants (B, H, S, D): transposed views of the BSHD inputs, no copies by us. Both
        # backends accept them as they are (last dim contiguous), so no copy happens inside.
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if k.shape[1] == q.shape[1]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        key = (q.shape, k.shape, causal, torch.is_grad_enabled())
        if self.gqa_native.get(key, True):
            try:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                self.gqa_native[key], self.gqa_mode = True, "native"
                return out
            except RuntimeError as exc:
                if _is_cuda_fault(exc) or key in self.gqa_native:
                    raise
                self.gqa_native[key] = False
        # The backend has no GQA: K and V repeated per query head, as its users would have to.
        self.gqa_mode = "expanded"
        group = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(
            q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), is_causal=causal
        )

    def unavailable_reason(self, exc):
        reason = super().unavailable_reason(exc)
        if reason is None and isinstance(exc, RuntimeError) and not _is_cuda_fault(exc):
            reason = _first_line(exc)  # e.g. "No available kernel" for this shape/backend
        return reason


class HopattnImpl(Impl):
    name = "hopattn"

    def __init__(self, flash_attn_func: Callable):
        self.fn = flash_attn_func

    def forward(self, q, k, v, causal: bool):
        out = self.fn(q, k, v, causal=causal)
        return out[0] if isinstance(out, (tuple, list)) else out  # some versions return lse too

    def unavailable_reason(self, exc):
        reason = super().unavailable_reason(exc)
        if reason is None and isinstance(exc, (NotImplementedError, ImportError)):
            # ImportError: the package imports, but its compiled extension is not built.
            reason = _first_line(exc)
        if reason is None and isinstance(exc, RuntimeError) and "not supported" in str(exc).lower():
            reason = _first_line(exc)
        return reason


class HopattnFp8Impl(HopattnImpl):
    """hopattn's FP8 forward on the same inputs, quantized to e4m3 once per shape (outside the
    timed region), one descale per (batch, head): compared against the bf16 peers of the run."""

    name = "hopattn-fp8"

    def __init__(self, module):
        super().__init__(module.flash_attn_func)
        self.module = module
        self._cache = None

    def to_e4m3(self, q, k, v) -> tuple:
        """(q8, k8, v8, keyword arguments of the call) from the run's inputs."""
        return self.module.quantize_qkv_fp8(q, k, v)

    def forward(self, q, k, v, causal: bool):
        if q.requires_grad and torch.is_grad_enabled():
            raise NotImplementedError("e4m3 attention is forward-only")
        key = (q.data_ptr(), k.data_ptr(), v.data_ptr(), q.shape)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self.to_e4m3(q, k, v))
        q8, k8, v8, kwargs = self._cache[1]
        return self.fn(q8, k8, v8, causal=causal, **kwargs)


class HopattnFp8CastImpl(HopattnFp8Impl):
    """hopattn's FP8 forward on the inputs cast to e4m3 as they are (no scaling) and no
    descales: the protocol of the anchors' FlashAttention-3 FP8 column ("its e4m3 forward with no
    descale"), for a like-for-like comparison with it."""

    name = "hopattn-fp8-cast"

    def to_e4m3(self, q, k, v) -> tuple:
        return (*(x.to(torch.float8_e4m3fn) for x in (q, k, v)), {})


class MissingImpl(Impl):
    """Stands in for an implementation that could not be imported."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.reason = reason

    def forward(self, q, k, v, causal: bool):
        raise Unavailable(self.reason)


def import_hopattn():
    """The hopattn module, or the reason it cannot be used. Falls back to <repo>/python."""
    errors = []
    for extra_path in (None, REPO_DIR / "python"):
        if extra_path is not None:
            if not extra_path.is_dir():
                break
            sys.path.insert(0, str(extra_path))
        try:
            import hopattn  # noqa: PLC0415

            if not hasattr(hopattn, "flash_attn_func"):
                return None, "hopattn has no flash_attn_func"
            return hopattn, ""
        except Exception as exc:  # ImportError, or a failing extension load
            errors.append(_first_line(exc))
            sys.modules.pop("hopattn", None)
    return None, "import hopattn failed: " + "; ".join(errors)


def make_impls(names) -> list:
    impls = []
    for name in names:
        if name == "fa2":
            impls.append(SdpaImpl("fa2", SDPBackend.FLASH_ATTENTION))
        elif name == "cudnn":
            impls.append(SdpaImpl("cudnn", SDPBackend.CUDNN_ATTENTION))
        elif name == "hopattn":
            module, reason = import_hopattn()
            impls.append(HopattnImpl(module.flash_attn_func) if module else MissingImpl(name, reason))
        elif name == "hopattn-fp8":
            module, reason = import_hopattn()
            impls.append(HopattnFp8Impl(module) if module else MissingImpl(name, reason))
        elif name == "hopattn-fp8-cast":
            module, reason = import_hopattn()
            impls.append(HopattnFp8CastImpl(module) if module else MissingImpl(name, reason))
    return impls


# ---- Timing --------------------------------------------------------------------------------


def make_timer(warmup_ms: float, rep_ms: float) -> tuple:
    """(timer(fn) -> median ms, description)."""
    try:
        import triton
        from triton.testing import do_bench
    except ImportError:
        return _fallback_timer(warmup_ms, rep_ms), "CUDA events, L2 cleared per rep (no triton)"

    def timer(fn):
        try:
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
        except TypeError:  # older triton: no return_mode
            ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5])
        return float(ms[0] if isinstance(ms, (list, tuple)) else ms)

    return timer, f"triton {triton.__version__} do_bench median"


def _fallback_timer(warmup_ms: float, rep_ms: float):
    """do_bench's method without triton: L2 cleared (256 MB written) before each timed call."""
    cache = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def timer(fn):
        fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            cache.zero_()
            fn()
        stop.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(stop) / 5, 1e-3)
        for _ in range(max(1, int(warmup_ms / estimate))):
            fn()
        n = max(1, int(rep_ms / estimate))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n)]
        for s, e in events:
            cache.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return float(torch.tensor([s.elapsed_time(e) for s, e in events]).median())

    return timer


def time_forward(impl: Impl, q, k, v, causal: bool, timer) -> float:
    with torch.no_grad(), impl.context():
        fn = lambda: impl.forward(q, k, v, causal)  # noqa: E731
        fn()  # unsupported cases fail here, before timing
        return timer(fn)


def time_backward(impl: Impl, q, k, v, causal: bool, timer) -> float:
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with impl.context():  # the backend is chosen in the forward; backward follows the graph
        out = impl.forward(*leaves, causal)
    if out.grad_fn is None:
        raise Unavailable("output has no autograd graph (backward not implemented)")
    dout = torch.randn_like(out)  # same strides as out, so no layout fix-up inside backward
    fn = lambda: torch.autograd.grad(out, leaves, dout, retain_graph=True)  # noqa: E731
    fn()
    return timer(fn)


def measure(impl: Impl, direction: str, q, k, v, causal: bool, timer) -> Union[float, Unavailable]:
    """Median ms, or Unavailable with the reason (backend warnings appended), or Failed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run = time_forward if direction == "fwd" else time_backward
            return run(impl, q, k, v, causal, timer)
        except Unavailable as exc:
            return exc
        except Exception as exc:
            if _is_cuda_fault(exc):
                raise  # the CUDA context is unusable; records so far are still written
            reason = impl.unavailable_reason(exc)
            if reason is None:
                traceback.print_exc()
                return Failed("failed: " + _first_line(exc))
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            hints = sorted({str(w.message).strip().splitlines()[0] for w in caught})
            return Unavailable("; ".join([reason] + hints[:3]))


# ---- Records, table, output ----------------------------------------------------------------


def gpu_slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")
    return slug or "gpu"


def median_result(results: list):
    """One record's result from its rounds: the median time, or the first round's failure."""
    failed = [r for r in results if isinstance(r, Unavailable)]
    return failed[0] if failed else statistics.median(float(r) for r in results)


def make_record(gpu, impl, direction, dtype, shape: Shape, result) -> dict:
    rec = {
        "gpu": gpu, "impl": impl, "direction": direction, "dtype": dtype, "hdim": shape.hdim,
        "causal": shape.causal, "seqlen": shape.seqlen, "batch": shape.batch,
        "nheads": shape.nheads, "nheads_k": shape.nheads_k,
    }
    if isinstance(result, Unavailable):
        rec.update(ms=None, tflops=None, error=str(result))
    else:
        rec.update(ms=result, tflops=case_flops(shape, direction) / (result * 1e9))
    return rec


def write_records(path: Path, records: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(records, indent=2) + "\n")
    tmp.replace(path)


def print_table(records: list, impls: list, directions: list, shapes: list) -> None:
    """Markdown table in the layout of shared/anchors/README.md."""
    tf = {(r["impl"], r["direction"], r["hdim"], r["causal"], r["seqlen"]): r["tflops"]
          for r in records}
    cols = []  # (header, function of shape -> text)
    for d in directions:
        for impl in impls:
            cols.append((f"{LABELS[impl]} {d}",
                         lambda s, i=impl, d=d: _fmt(tf.get((i, d, s.hdim, s.causal, s.seqlen)))))
        for ours in ("hopattn", "hopattn-fp8", "hopattn-fp8-cast"):
            if ours in impls and "cudnn" in impls:
                cols.append((f"{LABELS[ours]}/cuDNN {d}", lambda s, d=d, o=ours: _ratio(
                    tf.get((o, d, s.hdim, s.causal, s.seqlen)),
                    tf.get(("cudnn", d, s.hdim, s.causal, s.seqlen)))))
    print()
    print("| hdim | causal | seqlen | " + " | ".join(h for h, _ in cols) + " |")
    print("|---" * (3 + len(cols)) + "|")
    for s in shapes:
        cells = [str(s.hdim), "yes" if s.causal else "no", str(s.seqlen)] + [f(s) for _, f in cols]
        print("| " + " | ".join(cells) + " |")
    reasons = sorted({f"{r['impl']} {r['direction']}: {r['error']}" for r in records if "error" in r})
    if reasons:
        print("\nUnavailable (TFLOP/s shown as n/a):")
        for line in reasons:
            print("  " + line)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def _ratio(a, b) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


# ---- Main ----------------------------------------------------------------------------------


def _int_list(text: str) -> list:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hdims", type=_int_list, default=[64, 128, 256])
    p.add_argument("--seqlens", type=_int_list, default=None,
                   help="default: 512..16384 (or 1024,4096,16384 with --quick)")
    p.add_argument("--quick", action="store_true", help="seqlens 1024, 4096, 16384 only")
    p.add_argument("--causal", choices=["both", "no", "yes"], default="both")
    p.add_argument("--directions", default="fwd,bwd", help="comma list of fwd, bwd")
    p.add_argument("--impls", default=",".join(IMPLS), help="comma list of " + ", ".join(IMPLS + OPTIONAL_IMPLS))
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--warmup-ms", type=float, default=25.0, help="do_bench warmup (ms)")
    p.add_argument("--rep-ms", type=float, default=100.0, help="do_bench rep (ms)")
    p.add_argument("--rounds", type=int, default=1,
                   help="times per (implementation, direction) and shape, in rotated order; the median is recorded")
    p.add_argument("--kv-group", type=int, default=1, help="query heads per K/V head (GQA; 1: MHA)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path (default bench/results/<date>-<gpu>.json)")
    args = p.parse_args(argv)
    args.seqlens = args.seqlens or list(QUICK_SEQLENS if args.quick else ALL_SEQLENS)
    args.directions = [d for d in args.directions.split(",") if d]
    args.impls = [i for i in args.impls.split(",") if i]
    for d in args.directions:
        if d not in ("fwd", "bwd"):
            p.error(f"--directions: unknown {d!r}")
    for i in args.impls:
        if i not in IMPLS + OPTIONAL_IMPLS:
            p.error(f"--impls: unknown {i!r}")
    for h in args.hdims:
        if h <= 0 or h > HIDDEN:  # d192: HIDDEN // 192 = 10 heads
            p.error(f"--hdims: {h} is not in [1, {HIDDEN}]")
    for h in args.hdims:
        if args.kv_group <= 0 or (HIDDEN // h) % args.kv_group:
            p.error(f"--kv-group: {args.kv_group} does not divide the {HIDDEN // h} heads of hdim {h}")
    if args.rounds < 1:
        p.error(f"--rounds: {args.rounds} is not >= 1")
    for s in args.seqlens:
        if s <= 0 or TOKENS % s:
            p.error(f"--seqlens: {s} does not divide {TOKENS}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("peers.py needs a CUDA GPU", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    gpu = torch.cuda.get_device_name()
    dtype = DTYPES[args.dtype]
    out_path = args.out or BENCH_DIR / "results" / f"{datetime.date.today().isoformat()}-{gpu_slug(gpu)}.json"
    timer, timer_desc = make_timer(args.warmup_ms, args.rep_ms)
    impls = make_impls(args.impls)
    causals = {"both": [False, True], "no": [False], "yes": [True]}[args.causal]
    shapes = [Shape(h, c, s, args.kv_group) for h in args.hdims for c in causals for s in args.seqlens]

    print(f"# {gpu}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; {timer_desc}"
          + (f"; median of {args.rounds} rotated rounds" if args.rounds > 1 else ""))
    if args.kv_group > 1:
        print(f"# GQA: {args.kv_group} query heads per K/V head")
    for impl in impls:
        if isinstance(impl, MissingImpl):
            print(f"# {impl.name}: unavailable ({impl.reason})")

    records = []
    failures = 0
    try:
        for shape in shapes:
            q = torch.randn(shape.batch, shape.seqlen, shape.nheads, shape.hdim, device="cuda", dtype=dtype)
            k, v = (torch.randn(shape.batch, shape.seqlen, shape.nheads_k, shape.hdim, device="cuda", dtype=dtype)
                    for _ in range(2))
            results = {(impl.name, d): [] for impl in impls for d in args.directions}
            for rnd in range(args.rounds):
                shift = rnd % len(impls)
                for impl in impls[shift:] + impls[:shift]:
                    for direction in args.directions:
                        done = results[(impl.name, direction)]
                        if done and isinstance(done[-1], Unavailable):
                            continue  # unavailable or failed: not retried
                        result = measure(impl, direction, q, k, v, shape.causal, timer)
                        done.append(result)
                        shown = (f"{case_flops(shape, direction) / (result * 1e9):7.1f} TFLOP/s"
                                 if not isinstance(result, Unavailable) else "n/a")
                        print(f"  hdim {shape.hdim:3d} causal {int(shape.causal)} seqlen {shape.seqlen:5d} "
                              f"{impl.name:8s} {direction} round {rnd}: {shown}", file=sys.stderr, flush=True)
            for impl in impls:
                for direction in args.directions:
                    rounds = results[(impl.name, direction)]
                    result = median_result(rounds)
                    failures += isinstance(result, Failed)
                    rec = make_record(gpu, impl.name, direction, args.dtype, shape, result)
                    if args.rounds > 1 and rec["tflops"] is not None:
                        rec["rounds_ms"] = [float(r) for r in rounds]
                    if shape.kv_group > 1 and isinstance(impl, SdpaImpl) and rec["tflops"] is not None:
                        rec["peer_gqa"] = impl.gqa_mode
                    records.append(rec)
            del q, k, v
            write_records(out_path, records)  # after every shape: a crash keeps what was measured
    finally:
        if records:
            write_records(out_path, records)
    print_table(records, args.impls, args.directions, shapes)
    print(f"\n# {len(records)} records written to {out_path}")
    if failures:
        print(f"# {failures} case(s) failed unexpectedly (tracebacks above)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
