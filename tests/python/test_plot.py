"""PPL-vs-bits chart rendered from fixture reports."""
import json
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
