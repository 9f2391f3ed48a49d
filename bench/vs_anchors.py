#!/usr/bin/env python3
"""A peers grid against FlashAttention-3's anchor figures, cell by cell.

The issues state their speed goals against the anchors (../shared/anchors: FlashAttention-3 and
cuDNN measured once on an H100 and an H200). This prints, for each hopattn implementation in a
bench/peers.py record file and each direction, two tables over the paper's grid:

  * TFLOP/s: hopattn / FlashAttention-3 (ours from this file, FlashAttention-3 from the anchors:
    different runs, so machine-to-machine differences of a few percent stay in);
  * ratios to cuDNN: (hopattn / cuDNN in this file) / (FlashAttention-3 / cuDNN in the anchors),
    the comparison the issues use, since cuDNN then carries the machine's state.

hopattn bf16 and fp16 compare with FlashAttention-3's forward and backward, hopattn-fp8 and
hopattn-fp8-cast with its FP8 forward (the anchors ran it on inputs cast to e4m3, no descale: the
cast protocol), always over cuDNN bf16. Cells at or above 1.00 are where we lead.

    python bench/vs_anchors.py bench/results/2026-11-28-h200-bwd-s57.json
    python bench/vs_anchors.py results.json --anchors-dir ../shared/anchors --gpu h200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grid_records import is_plain_grid_record  # bench/, the script's folder

ROOT = Path(__file__).resolve().parents[1]
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]


def load_records(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    return data["records"] if isinstance(data, dict) else data


def gpu_key(records: list[dict], forced: str | None) -> str:
    if forced:
        return forced
    names = {str(r.get("gpu", "")) for r in records}
    for key in ("h200", "h100"):
        if any(key in n.lower() for n in names):
            return key
    raise SystemExit(f"vs_anchors: cannot tell the GPU from {sorted(names)}; pass --gpu h100 or h200")


def load_anchors(directory: Path, gpu: str) -> dict:
    """(hdim, causal, seqlen) -> {"fwd": (fa3, cudnn), "bwd": (fa3, cudnn), "fp8": (fa3 fp8, cudnn bf16)}."""
    files = sorted(directory.glob(f"*-{gpu}-fa3-official.json")), sorted(directory.glob(f"*-{gpu}-peers.json"))
    if not files[0] or not files[1]:
        raise SystemExit(f"vs_anchors: no *-{gpu}-fa3-official.json / *-{gpu}-peers.json in {directory}")
    cudnn_bwd = {(r["hdim"], bool(r["causal"]), r["seqlen"]): r["bwd_tflops"]
                 for r in load_records(files[1][-1]) if r.get("impl") == "cudnn"}
    out = {}
    for r in load_records(files[0][-1]):
        key = (r["hdim"], bool(r["causal"]), r["seqlen"])
        out[key] = {"fwd": (r["fa3_fwd"], r["cudnn_fwd"]), "fp8": (r["fa3_fp8_fwd"], r["cudnn_fwd"]),
                    "bwd": (r["fa3_bwd"], cudnn_bwd.get(key))}
    return out


def is_anchor_cell(r: dict) -> bool:
    """A grid record (grid_records.py) as the anchors ran it: also no GQA, no head_dim_v of its
    own, no deterministic mode or non-default backward knob (hopattn-bench records carry those
    fields; peers.py's do not)."""
    if any(k not in r for k in ("impl", "direction", "hdim", "causal", "seqlen")) or r.get("tflops") is None:
        return False
    knobs = ("lag_dq_min_steps", "dq_convert_sms", "split_tail_tiles", "dq_from_stored_ds")
    return (is_plain_grid_record(r) and r.get("hdim_v", r["hdim"]) == r["hdim"]
            and r.get("nheads_k", r.get("nheads")) == r.get("nheads")
            and not r.get("deterministic") and all(not r.get(k) for k in knobs))


def measured(records: list[dict]) -> dict:
    """(impl, direction, hdim, causal, seqlen) -> TFLOP/s, for plain grid records. hopattn-bench
    names its e4m3 runs "hopattn" with dtype e4m3: they are filed as "hopattn-fp8"."""
    out = {}
    for r in records:
        if not is_anchor_cell(r):
            continue
        impl = r["impl"]
        if r.get("dtype") == "e4m3" and not impl.startswith("hopattn-fp8"):
            impl = f"{impl}-fp8"
        out[(impl, r["direction"], r["hdim"], bool(r["causal"]), r["seqlen"])] = r["tflops"]
    return out


def comparisons(ours: dict, anchors: dict):
    """Yields (impl, direction, anchor column, {cell: (tflops ratio, cudnn-normalized ratio)})."""
    impls = sorted({k[0] for k in ours} - {"cudnn", "fa2", "mem_eff"})
    for impl in impls:
        column = "fp8" if impl.startswith("hopattn-fp8") else "fwd"
        for direction in ("fwd", "bwd"):
            col = "bwd" if direction == "bwd" else column
            cells = {}
            for (i, dr, hdim, causal, seqlen), tflops in ours.items():
                if i != impl or dr != direction or (hdim, causal, seqlen) not in anchors:
                    continue
                fa3, fa3_cudnn = anchors[(hdim, causal, seqlen)][col]
                ours_cudnn = ours.get(("cudnn", direction, hdim, causal, seqlen))
                norm = None
                if ours_cudnn and fa3_cudnn:
                    norm = (tflops / ours_cudnn) / (fa3 / fa3_cudnn)
                cells[(hdim, causal, seqlen)] = (tflops / fa3, norm)
            if cells:
                yield impl, direction, col, cells


def table(cells: dict, which: int) -> list[str]:
    rows = ["| hdim | causal | " + " | ".join(str(s) for s in SEQLENS) + " |",
            "|---|---|" + "---|" * len(SEQLENS)]
    for hdim in sorted({k[0] for k in cells}):
        for causal in (False, True):
            vals = [cells.get((hdim, causal, s)) for s in SEQLENS]
            if not any(vals):
                continue
            text = [f"{v[which]:.2f}" if v and v[which] is not None else "-" for v in vals]
            rows.append(f"| {hdim} | {'yes' if causal else 'no'} | " + " | ".join(text) + " |")
    return rows


def summary(cells: dict, which: int) -> str:
    vals = [v[which] for v in cells.values() if v[which] is not None]
    if not vals:
        return "no cells"
    ahead = sum(v >= 1.0 for v in vals)
    return f"{ahead} of {len(vals)} cells at or above 1.00; range {min(vals):.2f}-{max(vals):.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a bench/peers.py record file")
    ap.add_argument("--anchors-dir", type=Path, default=ROOT.parent / "shared" / "anchors")
    ap.add_argument("--gpu", choices=["h100", "h200"], help="which anchors (default: from the records)")
    a = ap.parse_args(argv)
    records = load_records(a.results)
    gpu = gpu_key(records, a.gpu)
    anchors = load_anchors(a.anchors_dir, gpu)
    found = False
    for impl, direction, col, cells in comparisons(measured(records), anchors):
        found = True
        what = {"fwd": "forward", "fp8": "FP8 forward", "bwd": "backward"}[col]
        print(f"\n## {impl} {direction} against FlashAttention-3's {what} ({gpu.upper()} anchors)\n")
        print("TFLOP/s, hopattn / FlashAttention-3: " + summary(cells, 0))
        print("\n".join(table(cells, 0)))
        print("\nratios to cuDNN bf16, hopattn's (this file) / FlashAttention-3's (anchors): " + summary(cells, 1))
        print("\n".join(table(cells, 1)))
    if not found:
        print("vs_anchors: no hopattn record matches an anchor cell", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
