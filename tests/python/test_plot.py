"""PPL-vs-bits chart rendered from fixture reports."""
import json
import os
import struct

import pytest

from scored_client import plot


def report(tmp_path, name, method, bpw, ppl, label):
    p = tmp_path / f"{name}.json"
    # The shape scored-ppl --json writes: the server's ModelInfo under "model_info".
    p.write_text(json.dumps({"ppl": ppl, "method": {"name": method, "ctx": 2048},
                             "model_info": {"bits_per_weight_decoder": bpw, "format": label}}))
    return str(p)


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def test_renders_png_with_one_series_per_method(tmp_path):
    paths = [report(tmp_path, "bf16", "exl3", 16.0, 6.14, "bf16"),
             report(tmp_path, "w4", "exl3", 4.25, 6.45, "W4A16 g128"),
             report(tmp_path, "nvfp4", "exl3", 4.5, 6.52, "NVFP4A16"),
             report(tmp_path, "w4g", "gptq", 4.25, 5.92, "W4A16 g128")]
    out = tmp_path / "chart.png"
    series = plot.render(paths, str(out), title="Llama-3-8B")
    assert png_size(out) == (960, 600)
    assert sorted(series) == ["exl3", "gptq"]
    assert [p[0] for p in sorted(series["exl3"])] == [4.25, 4.5, 16.0]


def test_report_without_bits_is_an_error(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"ppl": 5.0, "method": "exl3", "model_info": {}}))
    with pytest.raises(plot.ReportError, match="bits_per_weight_decoder"):
        plot.render([str(p)], str(tmp_path / "x.png"))


# Reports written by the C++ report code (client/ppl/report.cc) from the known-answer token values of
# tests/client/kld_test.cc, scaled per quant to mimic coarser / finer formats: synthetic numbers, but the
# exact JSON scored-ppl --kld writes (kld_test checks these files against the code's output).
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
KLD_REPORTS = [os.path.join(FIXTURES, f"kld_report_{q}.json") for q in ("W4A16", "NVFP4A16", "FP8")]


def test_renders_kld_and_ppl_ratio_panels_from_kld_reports(tmp_path):
    out = tmp_path / "kld.png"
    series = plot.render_many(KLD_REPORTS, str(out), ["kld", "ppl_ratio"], title="stories")
    assert png_size(out) == (1920, 600)  # two 8 x 5 inch panels at 120 dpi
    reports = {}
    for path in KLD_REPORTS:
        with open(path) as f:
            r = json.load(f)
        reports[r["model_info"]["bits_per_weight_decoder"]] = r
    for metric, key in (("kld", "kld_mean"), ("ppl_ratio", "ppl_ratio")):
        points = sorted(series[metric]["exl3"])
        assert [p[0] for p in points] == [4.25, 4.5, 8.0]
        for bpw, value, _ in points:
            assert value == reports[bpw]["kld"][key]
    # The finer quant moves less: FP8 (8 bits) has the smallest KLD of the three.
    kld = dict((p[0], p[1]) for p in series["kld"]["exl3"])
    assert kld[8.0] < kld[4.25] < kld[4.5]


def test_single_kld_metric_and_cli(tmp_path):
    out = tmp_path / "ratio.png"
    series = plot.render(KLD_REPORTS, str(out), metric="ppl_ratio")
    assert png_size(out) == (960, 600)
    assert all(p[1] > 1.0 for p in series["exl3"])  # Q is worse than R in every fixture
    import subprocess
    import sys
    cli = tmp_path / "cli.png"
    subprocess.run([sys.executable, "-m", "scored_client.plot", *KLD_REPORTS, "-o", str(cli),
                    "--metric", "kld,ppl_ratio"], check=True)
    assert png_size(cli) == (1920, 600)


def test_ppl_report_has_no_kld(tmp_path):
    p = report(tmp_path, "bf16", "exl3", 16.0, 6.14, "bf16")
    with pytest.raises(plot.ReportError, match="--kld report"):
        plot.render([p], str(tmp_path / "x.png"), metric="kld")


def test_renders_a_real_kld_report(tmp_path):
    # A real scored-ppl --kld report (CPU backend, Q = stories260k-w4a16-channel, R = stories260K, llamacpp,
    # 40 windows; only data.path and server were rewritten to neutral values) next to the C++ fixtures.
    real = os.path.join(FIXTURES, "kld_report_real_stories260k_w4a16.json")
    out = tmp_path / "real.png"
    series = plot.render_many([real] + KLD_REPORTS, str(out), ["kld", "ppl_ratio"])
    assert png_size(out) == (1920, 600)
    (bpw, kld, label), = series["kld"]["llamacpp"]
    assert label == "w4a16-channel-sym" and 4.0 < bpw < 5.0
    assert kld == pytest.approx(0.413441, abs=1e-6)
    assert series["ppl_ratio"]["llamacpp"][0][1] == pytest.approx(1.228175, abs=1e-6)


def test_ppl_points_carry_their_stderr_and_the_format_follows_the_extension(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"ppl": 6.5, "ppl_stderr": 0.04, "method": {"name": "exl3", "ctx": 2048},
                             "model_info": {"bits_per_weight_decoder": 4.25}}))
    assert plot.metric_value(json.loads(p.read_text()), "ppl", str(p)) == (6.5, 0.04)
    # Before, every output was a PNG whatever its name.
    plot.render([str(p)], str(tmp_path / "c.pdf"))
    assert (tmp_path / "c.pdf").read_bytes()[:5] == b"%PDF-"
    plot.render([str(p)], str(tmp_path / "c.svg"))
    assert b"<svg" in (tmp_path / "c.svg").read_bytes()[:2000]
    with pytest.raises(plot.ReportError, match="extension must be one of .png, .pdf, .svg"):
        plot.render([str(p)], str(tmp_path / "c.jpeg"))


def test_points_of_one_method_measured_differently_are_refused(tmp_path):
    def write(name, max_windows, sha="ab" * 32):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps({"ppl": 6.0, "method": {"name": "llamacpp", "ctx": 512, "max_windows": max_windows},
                                 "data": {"sha256": sha}, "model_info": {"bits_per_weight_decoder": 16.0}}))
        return str(p)
    full, short = write("full", 0), write("short", 40)
    with pytest.raises(plot.ReportError, match=r"method.max_windows differs"):
        plot.render([full, short], str(tmp_path / "x.png"))
    other_data = write("other", 0, sha="cd" * 32)
    with pytest.raises(plot.ReportError, match=r"data.sha256 differs"):
        plot.render([full, other_data], str(tmp_path / "x.png"))
    assert plot.render([full, write("again", 0)], str(tmp_path / "ok.png"))


def test_kld_panels_leave_out_the_references_own_report(tmp_path, capsys):
    # The usual folder: the quants' --kld reports and the reference's plain one (README's glob).
    with open(KLD_REPORTS[0]) as f:
        kld_report = json.load(f)
    baseline = dict(kld_report)
    del baseline["kld"]
    baseline["model_info"] = dict(kld_report["model_info"], bits_per_weight_decoder=32.0)
    path = tmp_path / "r_dense.json"
    path.write_text(json.dumps(baseline))
    series = plot.render_many(KLD_REPORTS + [str(path)], str(tmp_path / "k.png"), ["kld", "ppl_ratio"])
    assert sorted(p[0] for p in series["kld"]["exl3"]) == [4.25, 4.5, 8.0]
    assert "r_dense.json: no 'kld'" in capsys.readouterr().err
