"""Charts perplexity, or the KL divergence / PPL ratio against a reference model, against bits per weight
from several `scored-ppl --json` reports, one point per report, labelled by model and grouped (one line)
per evaluation method, like published quantization tables.

    python -m scored_client.plot reports/*.json -o ppl_vs_bpw.png [--metric ppl|kld|ppl_ratio] [--title T]
    python -m scored_client.plot reports/*.json -o kld.png --metric kld,ppl_ratio   # one panel each

Each report needs `method.name` (or a string `method`), the model's stored bits per weight in
`model_info.bits_per_weight_decoder` (scored-ppl copies the server's ModelInfo there; a `model` object with
the same keys is accepted too) and the metric: `ppl`; for `kld` (mean KL(P_R || P_Q), nats) and `ppl_ratio`
(PPL(Q)/PPL(R)) a `scored-ppl --kld` report (its `kld` object; `kld_error` / `ppl_ratio_error` there become
error bars). The label is `label`, else the format, else the file name.
"""
from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # headless: render straight to PNG
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

METRICS = ("ppl", "kld", "ppl_ratio")
_AXIS_LABELS = {"ppl": "perplexity", "kld": "mean KLD (nats)", "ppl_ratio": "PPL(Q) / PPL(R)"}
_TITLES = {"ppl": "PPL", "kld": "KLD vs reference", "ppl_ratio": "PPL ratio vs reference"}


class ReportError(ValueError):
    pass


def metric_value(report: dict, metric: str, path: str) -> Tuple[float, Optional[float]]:
    """(value, error or None) of `metric` in one report."""
    if metric == "ppl":
        if report.get("ppl") is None:
            raise ReportError(f"{path}: no 'ppl' in the report")
        return float(report["ppl"]), None
    if metric not in METRICS:
        raise ReportError(f"unknown metric '{metric}' (one of {', '.join(METRICS)})")
    kld = report.get("kld")
    if isinstance(kld, (int, float)) and metric == "kld":  # a bare number: the mean KLD
        return float(kld), None
    key = "kld_mean" if metric == "kld" else "ppl_ratio"
    if not isinstance(kld, dict) or kld.get(key) is None:
        raise ReportError(f"{path}: no '{metric}' in the report (a scored-ppl --kld report has a 'kld' object)")
    error = kld.get("kld_error" if metric == "kld" else "ppl_ratio_error")
    return float(kld[key]), None if error is None else float(error)


def load_point(path: str, metric: str) -> Tuple[str, float, float, str]:
    """Returns (method, bits per weight, metric value, label) of one report."""
    method, bpw, value, _, label = _load(path, metric)
    return method, bpw, value, label


def _load(path: str, metric: str) -> Tuple[str, float, float, Optional[float], str]:
    with open(path) as f:
        report = json.load(f)
    method = report.get("method")
    method_name = method.get("name") if isinstance(method, dict) else method
    model = report.get("model_info") or report.get("model") or {}
    value, error = metric_value(report, metric, path)
    if "bits_per_weight_decoder" not in model:
        raise ReportError(f"{path}: no model_info.bits_per_weight_decoder in the report")
    if not method_name:
        raise ReportError(f"{path}: no method in the report")
    label = (report.get("label") or model.get("label") or model.get("format")
             or os.path.splitext(os.path.basename(path))[0])
    return str(method_name), float(model["bits_per_weight_decoder"]), value, error, str(label)


def _panel(ax, series: Dict[str, List[Tuple[float, float, Optional[float], str]]], metric: str,
           title: str) -> None:
    for method, points in sorted(series.items()):
        points.sort(key=lambda p: p[0])
        errors = [p[2] if p[2] is not None else 0.0 for p in points]
        ax.errorbar([p[0] for p in points], [p[1] for p in points],
                    yerr=errors if any(errors) else None, marker="o", capsize=3, label=method)
        for bpw, value, _, label in points:
            ax.annotate(label, (bpw, value), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("bits per weight (decoder linears, stored)")
    ax.set_ylabel(_AXIS_LABELS[metric])
    values = [p[1] for points in series.values() for p in points]
    if metric in ("ppl", "kld") and min(values) > 0 and max(values) / min(values) > 3:
        # Wide ranges (2-bit next to bf16 for PPL; KLD spans decades between 3 and 8 bits) read better on
        # a log axis.
        ax.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_title(title or f"{_TITLES[metric]} vs bits per weight")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="method")


def render_many(paths: Sequence[str], out: str, metrics: Sequence[str],
                title: str = "") -> Dict[str, Dict[str, List]]:
    """Renders one panel per metric, side by side, to `out` (PNG). Returns {metric: {method: [(bpw, value,
    label), ...]}}."""
    if not metrics:
        raise ReportError("no metric given")
    if not paths:
        raise ReportError("no reports given")
    per_metric: Dict[str, Dict[str, List]] = {}
    for metric in metrics:
        series: Dict[str, List] = defaultdict(list)
        for p in paths:
            method, bpw, value, error, label = _load(p, metric)
            series[method].append((bpw, value, error, label))
        per_metric[metric] = series
    fig, axes = plt.subplots(1, len(metrics), figsize=(8 * len(metrics), 5), dpi=120, squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        _panel(ax, per_metric[metric], metric, title if len(metrics) == 1 else "")
    if title and len(metrics) > 1:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)
    return {m: {method: [(p[0], p[1], p[3]) for p in pts] for method, pts in s.items()}
            for m, s in per_metric.items()}


def render(paths: Sequence[str], out: str, metric: str = "ppl", title: str = "") -> Dict[str, List]:
    """Renders the chart of one metric to `out` (PNG). Returns the plotted series {method: [(bpw, value,
    label), ...]}."""
    return render_many(paths, out, [metric], title)[metric]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", help="scored-ppl --json report files")
    ap.add_argument("-o", "--out", required=True, help="output PNG path")
    ap.add_argument("--metric", default="ppl",
                    help="ppl | kld | ppl_ratio, or several separated by commas (one panel each)")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    metrics = [m.strip() for m in args.metric.split(",") if m.strip()]
    for m in metrics:
        if m not in METRICS:
            ap.error(f"--metric: unknown '{m}' (one of {', '.join(METRICS)})")
    try:
        render_many(args.reports, args.out, metrics, args.title)
    except (ReportError, OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"scored-plot: {e}")


if __name__ == "__main__":
    main()
