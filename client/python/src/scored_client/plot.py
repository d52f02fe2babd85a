"""Charts perplexity against bits per weight from several `scored-ppl --json` reports, one point per report,
labelled by model and grouped (one line) per evaluation method, like published quantization tables.

    python -m scored_client.plot reports/*.json -o ppl_vs_bpw.png [--metric ppl|kld] [--title T]

Each report needs `ppl` (or `kld`), `method.name` (or a string `method`), and the model's stored bits per
weight in `model_info.bits_per_weight_decoder` (scored-ppl copies the server's ModelInfo there; a `model`
object with the same keys is accepted too); the label is `label`, else the format, else the file name.
"""
from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # headless: render straight to PNG
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402


class ReportError(ValueError):
    pass


def load_point(path: str, metric: str) -> Tuple[str, float, float, str]:
    """Returns (method, bits per weight, metric value, label) of one report."""
    with open(path) as f:
        report = json.load(f)
    method = report.get("method")
    method_name = method.get("name") if isinstance(method, dict) else method
    model = report.get("model_info") or report.get("model") or {}
    if metric not in report:
        raise ReportError(f"{path}: no '{metric}' in the report")
    if "bits_per_weight_decoder" not in model:
        raise ReportError(f"{path}: no model_info.bits_per_weight_decoder in the report")
    if not method_name:
        raise ReportError(f"{path}: no method in the report")
    label = (report.get("label") or model.get("label") or model.get("format")
             or os.path.splitext(os.path.basename(path))[0])
    return str(method_name), float(model["bits_per_weight_decoder"]), float(report[metric]), str(label)


def render(paths: Sequence[str], out: str, metric: str = "ppl", title: str = "") -> Dict[str, List]:
    """Renders the chart to `out` (PNG). Returns the plotted series {method: [(bpw, value, label), ...]}."""
    series: Dict[str, List[Tuple[float, float, str]]] = defaultdict(list)
    for p in paths:
        method, bpw, value, label = load_point(p, metric)
        series[method].append((bpw, value, label))
    if not series:
        raise ReportError("no reports given")
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for method, points in sorted(series.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
        for bpw, value, label in points:
            ax.annotate(label, (bpw, value), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("bits per weight (decoder linears, stored)")
    ax.set_ylabel("perplexity" if metric == "ppl" else metric.upper())
    values = [p[1] for points in series.values() for p in points]
    if metric == "ppl" and min(values) > 0 and max(values) / min(values) > 3:
        ax.set_yscale("log")  # wide PPL ranges (2-bit next to bf16) read better on a log axis
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_title(title or f"{metric.upper()} vs bits per weight")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="method")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return dict(series)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", help="scored-ppl --json report files")
    ap.add_argument("-o", "--out", required=True, help="output PNG path")
    ap.add_argument("--metric", default="ppl", choices=["ppl", "kld"])
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    try:
        render(args.reports, args.out, args.metric, args.title)
    except (ReportError, OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"scored-plot: {e}")


if __name__ == "__main__":
    main()
