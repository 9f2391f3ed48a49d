#!/usr/bin/env python3
"""Bar charts in the style of the FlashAttention-3 paper's Figures 5-7.

For each direction (and dtype) one PNG: subplots for head dim (rows) x causal (columns), each a
grouped bar chart of TFLOP/s per sequence length, one bar per implementation.

Reads the JSON arrays written by hopattn-bench (--json) and bench/peers.py; also the raw
records of ../shared/anchors/ (pass them with --anchors so their bars are marked "(anchor)").
Records without TFLOP/s (unsupported cases) leave a gap.

    python bench/plot.py bench/results/2026-11-22-h100-80gb-hbm3.json
    python bench/plot.py results.json --anchors ../shared/anchors/2026-11-21-h100-fa3-official.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grid_records import is_plain_grid_record  # noqa: E402  (bench/, the script's folder)

BENCH_DIR = Path(__file__).resolve().parent
IMPL_ORDER = ["fa2", "cudnn", "fa3", "fa3-fp8", "hopattn"]
LABELS = {"fa2": "FlashAttention-2", "cudnn": "cuDNN", "fa3": "FlashAttention-3",
          "fa3-fp8": "FlashAttention-3 FP8", "hopattn": "hopattn", "mem_eff": "SDPA mem-efficient"}
COLORS = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#dd8452", "#937860", "#da8bc3", "#8c8c8c"]


# ---- Loading -------------------------------------------------------------------------------


def normalize(raw: dict) -> list:
    """Records {impl, direction, dtype, hdim, causal, seqlen, tflops, gpu, nheads, nheads_k} from any known format."""
    base = {"hdim": raw["hdim"], "causal": bool(raw["causal"]), "seqlen": raw["seqlen"],
            "gpu": raw.get("gpu", ""), "nheads": raw.get("nheads"), "nheads_k": raw.get("nheads_k")}
    if "direction" in raw:  # hopattn-bench / peers.py
        if not is_plain_grid_record(raw):
            return []
        return [dict(base, impl=raw["impl"], direction=raw["direction"],
                     dtype=raw.get("dtype", "bf16"), tflops=raw.get("tflops"))]
    out = []
    if "fwd_tflops" in raw:  # anchors *-peers.json
        for d in ("fwd", "bwd"):
            out.append(dict(base, impl=raw["impl"], direction=d, dtype="bf16",
                            tflops=raw.get(f"{d}_tflops")))
        return out
    columns = {"fa3_fwd": ("fa3", "fwd", "bf16"), "fa3_bwd": ("fa3", "bwd", "bf16"),
               "fa3_fp8_fwd": ("fa3-fp8", "fwd", "e4m3"), "cudnn_fwd": ("cudnn", "fwd", "bf16")}
    for key, (impl, d, dtype) in columns.items():  # anchors *-fa3-official.json
        if key in raw:
            out.append(dict(base, impl=impl, direction=d, dtype=dtype, tflops=raw[key]))
    return out


def load(path: Path, label_suffix: str = "") -> list:
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON array of records")
    records = [r for raw in data for r in normalize(raw)]
    for r in records:
        r["source"] = path.stem
        r["label_suffix"] = label_suffix
    return records


def assign_labels(records: list) -> None:
    """Bar label per record; an impl found in several files gets the file name added."""
    files_per_impl = defaultdict(set)
    for r in records:
        files_per_impl[(r["impl"], r["label_suffix"])].add(r["source"])
    for r in records:
        label = LABELS.get(r["impl"], r["impl"]) + r["label_suffix"]
        if len(files_per_impl[(r["impl"], r["label_suffix"])]) > 1:
            label += f" [{r['source']}]"
        r["label"] = label


def label_order(records: list) -> list:
    def key(label_and_impl):
        label, impl = label_and_impl
        rank = IMPL_ORDER.index(impl) if impl in IMPL_ORDER else len(IMPL_ORDER)
        return (rank, label)

    return [label for label, _ in sorted({(r["label"], r["impl"]) for r in records}, key=key)]


# ---- Drawing -------------------------------------------------------------------------------


def seqlen_label(s: int) -> str:
    return f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)


def draw_panel(ax, records: list, labels: list, colors: dict, seqlens: list) -> None:
    width = 0.8 / max(1, len(labels))
    tf = {(r["label"], r["seqlen"]): r["tflops"] for r in records}
    for i, label in enumerate(labels):
        xs, ys = [], []
        for x, s in enumerate(seqlens):
            value = tf.get((label, s))
            if value is not None:
                xs.append(x - 0.4 + width * (i + 0.5))
                ys.append(value)
        if not xs:
            continue
        bars = ax.bar(xs, ys, width, label=label, color=colors[label])
        ax.bar_label(bars, labels=[f"{y:.0f}" for y in ys], fontsize=5, rotation=90, padding=1)
    ax.set_xticks(range(len(seqlens)), [seqlen_label(s) for s in seqlens])
    ax.set_xlabel("Sequence length")
    ax.set_ylabel("Speed (TFLOP/s)")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.margins(y=0.15)


def plot_direction(records: list, direction: str, dtype: str, out_path: Path) -> None:
    hdims = sorted({r["hdim"] for r in records})
    causals = sorted({r["causal"] for r in records})
    seqlens = sorted({r["seqlen"] for r in records})
    labels = label_order(records)
    colors = {label: COLORS[i % len(COLORS)] for i, label in enumerate(labels)}
    fig, axes = plt.subplots(len(hdims), len(causals), squeeze=False,
                             figsize=(6.5 * len(causals), 3.6 * len(hdims)))
    for row, hdim in enumerate(hdims):
        for col, causal in enumerate(causals):
            ax = axes[row][col]
            panel = [r for r in records if r["hdim"] == hdim and r["causal"] == causal]
            draw_panel(ax, panel, labels, colors, seqlens)
            ax.set_title(f"{'Forward' if direction == 'fwd' else 'Backward'}, "
                         f"{'with' if causal else 'without'} causal mask, head dim {hdim}",
                         fontsize=10)
    height = fig.get_figheight()  # inches; title and legend take the top 0.8 inch
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[label]) for label in labels]
    gpus = ", ".join(sorted({r["gpu"] for r in records if r["gpu"]}))
    groups = sorted({r["nheads"] // r["nheads_k"] for r in records if r.get("nheads") and r.get("nheads_k")})
    gqa = f", GQA ({'/'.join(map(str, groups))} query heads per K/V head)" if groups and groups != [1] else ""
    # peers.py records an FP8 implementation under the case's dtype: it quantizes those inputs.
    fp8 = " inputs (the -fp8 bars: e4m3; -fp8: quantized with descales, -fp8-cast: cast, no descale)" if any("fp8" in r["impl"] for r in records) else ""
    fig.suptitle(f"Attention {'forward' if direction == 'fwd' else 'backward'} speed, {dtype}{fp8}{gqa}"
                 + (f" ({gpus})" if gpus else ""), y=1 - 0.05 / height, va="top", fontsize=12)
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 5), fontsize=9,
               bbox_to_anchor=(0.5, 1 - 0.35 / height), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.8 / height))
    fig.savefig(out_path, dpi=150, bbox_inches="tight")
    plt.close(fig)


# ---- Main ----------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="JSON arrays of records")
    p.add_argument("--anchors", type=Path, nargs="*", default=[],
                   help="records from ../shared/anchors/ (bars labelled '(anchor)')")
    p.add_argument("--outdir", type=Path, default=BENCH_DIR / "results")
    p.add_argument("--prefix", default=None, help="PNG name prefix (default: first file's stem)")
    args = p.parse_args(argv)

    records = [r for path in args.results for r in load(path)]
    records += [r for path in args.anchors for r in load(path, " (anchor)")]
    assign_labels(records)
    prefix = args.prefix or args.results[0].stem
    args.outdir.mkdir(parents=True, exist_ok=True)

    groups = defaultdict(list)
    for r in records:
        groups[(r["direction"], r["dtype"])].append(r)
    dtypes = {dtype for _, dtype in groups}
    written = 0
    for (direction, dtype), group in sorted(groups.items()):
        if all(r["tflops"] is None for r in group):
            continue
        suffix = direction if len(dtypes) == 1 else f"{direction}-{dtype}"
        out_path = args.outdir / f"{prefix}-{suffix}.png"
        plot_direction(group, direction, dtype, out_path)
        print(out_path)
        written += 1
    if not written:
        print("nothing to plot: no record has TFLOP/s")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
