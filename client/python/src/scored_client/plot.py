"""Charts perplexity, or the KL divergence / PPL ratio against a reference model, against bits per weight
from several `scored-ppl --json` reports, one point per report, labelled by model and grouped (one line)
per evaluation method, like published quantization tables.

    python -m scored_client.plot reports/*.json -o ppl_vs_bpw.png [--metric ppl|kld|ppl_ratio] [--title T]
    python -m scored_client.plot reports/*.json -o kld.png --metric kld,ppl_ratio   # one panel each

Each report needs `method.name` (or a string `method`), the model's stored bits per weight in
`model_info.bits_per_weight_decoder` (scored-ppl copies the server's ModelInfo there; a `model` object with
the same keys is accepted too) and the metric: `ppl`; for `kld` (mean KL(P_R || P_Q), nats) and `ppl_ratio`
(PPL(Q)/PPL(R)) a `scored-ppl --kld` report (its `kld` object; `kld_error` / `ppl_ratio_error` there become
error bars; a PPL point's bar is its `ppl_stderr`). The label is `label`, else the format, else the file
name. With a KLD metric, reports without a `kld` object (typically the reference's own report in the same
folder) are left out with a note on stderr; with none left, that is an error.

The points of one method are comparable only when they were measured alike: reports of one method that
differ in the method's parameters (ctx, stride, max_windows, ...) or in the data file (its SHA-256) are
refused naming the field, as `scored-ppl compare` refuses them. The output format follows the extension of
`-o` (.png, .pdf, .svg; anything else is refused).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # headless: render straight to the file
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

METRICS = ("ppl", "kld", "ppl_ratio")
_AXIS_LABELS = {"ppl": "perplexity", "kld": "mean KLD (nats)", "ppl_ratio": "PPL(Q) / PPL(R)"}
_TITLES = {"ppl": "PPL", "kld": "KLD to the reference", "ppl_ratio": "PPL ratio to the reference"}
_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}


class ReportError(ValueError):
    pass


def metric_value(report: dict, metric: str, path: str) -> Tuple[float, Optional[float]]:
    """(value, error or None) of `metric` in one report."""
    if metric == "ppl":
        if report.get("ppl") is None:
            raise ReportError(f"{path}: no 'ppl' in the report")
        stderr = report.get("ppl_stderr")
        return float(report["ppl"]), None if stderr is None else float(stderr)
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


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _measured_alike(report: dict) -> Dict[str, object]:
    """What must agree between two points of one method: the method's parameters and the data file."""
    method = report.get("method")
    fields: Dict[str, object] = {}
    if isinstance(method, dict):
        fields.update({f"method.{k}": v for k, v in method.items() if k != "name"})
    data = report.get("data")
    if isinstance(data, dict) and data.get("sha256"):
        fields["data.sha256"] = data["sha256"]
    return fields


def _check_alike(method: str, reports: List[Tuple[str, dict]]) -> None:
    first_path, first = reports[0]
    want = _measured_alike(first)
    for path, report in reports[1:]:
        got = _measured_alike(report)
        for key in sorted(set(want) | set(got)):
            if want.get(key) != got.get(key):
                raise ReportError(
                    f"{path}: {key} differs from {first_path} ({got.get(key)!r} vs {want.get(key)!r}); points "
                    f"of one method ({method}) must be measured alike (scored-ppl compare refuses the same mix)")


def _load(path: str, metric: str) -> Tuple[str, float, float, Optional[float], str]:
    return _point(path, _read(path), metric)


def _method_name(report: dict):
    method = report.get("method")
    return method.get("name") if isinstance(method, dict) else method


def _point(path: str, report: dict, metric: str) -> Tuple[str, float, float, Optional[float], str]:
    """(method, bits per weight, value, error or None, label) of `metric` in `report` (read from `path`)."""
    method_name = _method_name(report)
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
        # A thin dotted line groups a method's points; it is no interpolation between them.
        ax.errorbar([p[0] for p in points], [p[1] for p in points],
                    yerr=errors if any(errors) else None, marker="o", capsize=3, label=method,
                    linestyle=":", linewidth=0.8)
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
    """Renders one panel per metric, side by side, to `out` (PNG, PDF or SVG by its extension). Returns {metric: {method: [(bpw, value,
    label), ...]}}."""
    if not metrics:
        raise ReportError("no metric given")
    if not paths:
        raise ReportError("no reports given")
    fmt = _FORMATS.get(os.path.splitext(out)[1].lower())
    if fmt is None:
        raise ReportError(f"{out}: the output's extension must be one of {', '.join(_FORMATS)}")
    reports = [(p, _read(p)) for p in paths]  # each file read once
    by_method: Dict[str, List[Tuple[str, dict]]] = defaultdict(list)
    for p, report in reports:
        by_method[str(_method_name(report))].append((p, report))
    for method, alike in by_method.items():
        _check_alike(method, alike)
    per_metric: Dict[str, Dict[str, List]] = {}
    for metric in metrics:
        series: Dict[str, List] = defaultdict(list)
        for p, report in reports:
            if metric != "ppl" and not isinstance(report.get("kld"), (dict, int, float)):
                print(f"scored-plot: {p}: no 'kld' (not a --kld report, e.g. the reference's own): "
                      f"left out of the {metric} panel", file=sys.stderr)
                continue
            method, bpw, value, error, label = _point(p, report, metric)
            series[method].append((bpw, value, error, label))
        if not series:
            raise ReportError(f"no report has '{metric}' (a scored-ppl --kld report has a 'kld' object)")
        per_metric[metric] = series
    fig, axes = plt.subplots(1, len(metrics), figsize=(8 * len(metrics), 5), dpi=120, squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        _panel(ax, per_metric[metric], metric, title if len(metrics) == 1 else "")
    if title and len(metrics) > 1:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, format=fmt)
    plt.close(fig)
    return {m: {method: [(p[0], p[1], p[3]) for p in pts] for method, pts in s.items()}
            for m, s in per_metric.items()}


def render(paths: Sequence[str], out: str, metric: str = "ppl", title: str = "") -> Dict[str, List]:
    """Renders the chart of one metric to `out` (PNG, PDF or SVG by its extension). Returns the plotted series {method: [(bpw, value,
    label), ...]}."""
    return render_many(paths, out, [metric], title)[metric]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", help="scored-ppl --json report files")
    ap.add_argument("-o", "--out", required=True, help="output file: .png, .pdf or .svg")
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
