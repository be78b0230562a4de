"""The HTML dashboard: every section, escaped labels, inlined plotly; and a real headless Chromium load."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeprof.algorithms import phases_of
from edgeprof.cli import app
from edgeprof.report.dashboard import SECTIONS, render, script_json, write_dashboard
from edgeprof.report.schema import columns_for
from edgeprof.report.writer import ReportWriter, read_report, write_sidecar

from test_analysis import CLAIM_HOLDS, rows_for

HOSTILE = "<script>alert(1)</script>"
HOSTILE_ALGO = "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\">"


def _write(folder: Path, name: str, rows: list[dict], device: str, method: str = "estimate") -> Path:
    path = folder / f"{name}.csv"
    with ReportWriter(path, columns_for(phases_of(["pflego", "fedavg"]))) as writer:
        for i, row in enumerate(rows):
            row = dict(row, run_id=name, round=str(i + 1), energy_method=method, carbon_g=f"{1e-4 * i:.6g}",
                       peak_rss_mb=f"{300 + i % 7}")
            if row["kind"] == "client" and row["algo"] == "pflego":
                row.update(cache_forward_s="0.1", head_steps_s="0.01", joint_grad_s="0.09")
            elif row["kind"] == "client" and row["algo"] == "fedavg":
                row.update(local_steps_s=row["wall_s"])
            writer.write(row)
    write_sidecar(path.with_suffix(".json"), {
        "run_id": name, "status": "complete",
        "device": {"hostname": device, "cpu_model": f"CPU of {device}", "cpu_cores_logical": 2},
        "meters": {"meters": [{"name": "cpu_estimate"}], "not_found": [{"meter": "rapl", "reason": "none"}]},
        "energy": {"carbon": {"g_per_kwh": 475.0, "source": "world average"}}})
    return path


def _eval_rows(device: str) -> list[dict]:
    rows = []
    for rnd in range(1, 4):
        rows.append(dict(device=device, algo="fedavg", engine="torch", tau="5", kind="client", wall_s="0.5",
                         energy_j="5"))
        rows.append(dict(device=device, algo="fedavg", engine="torch", tau="5", kind="eval",
                         test_accuracy=f"{0.5 + 0.1 * rnd}", train_loss="1.0"))
    return rows


@pytest.fixture
def reports(tmp_path) -> list[Path]:
    sweep = rows_for(CLAIM_HOLDS, device="laptop") + rows_for(CLAIM_HOLDS, device=HOSTILE, seed=1)
    odd = rows_for({("x", "y"): lambda t: 1.0}, device="laptop")
    sweep += [dict(r, algo=HOSTILE_ALGO, engine="torch") for r in odd]
    sweep += [dict(r, kind="server", wall_s="0.002") for r in sweep[:12]]
    train = _eval_rows("laptop")
    return [_write(tmp_path, "sweep-a", sweep, "laptop"),
            _write(tmp_path, "train-b", train, "jetson", method="counter")]


def test_page_has_every_section_and_plotly_once(reports):
    page = render([read_report(p) for p in reports])

    for sid, name in SECTIONS:
        assert f'<section id="{sid}">' in page and name in page
    assert page.count("plotly.js v") == 1 and "<script src" not in page
    assert "ESTIMATE" in page and "(an ESTIMATE, not a measurement)" in page
    assert "Peak resident memory" in page and "Devices side by side" in page
    assert "Verdict <b>flat</b>" in page and ">flat<" in page and ">linear<" in page
    figures = json.loads(re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1))
    titles = " ".join(f["layout"]["title"]["text"] for f in figures)
    for part in ("per client round", "per phase", "each client round", "total energy", "test accuracy"):
        assert part in titles
    assert "laptop: " in titles and "&lt;script&gt;alert(1)&lt;/script&gt;: " in titles  # one column per device


def test_hostile_labels_are_escaped_everywhere(reports):
    page = render([read_report(p) for p in reports], title=HOSTILE)

    assert HOSTILE not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    blob = re.search(r'id="edgeprof-figures">(.*?)</script>', page, re.S).group(1)
    assert "<" not in blob and ">" not in blob
    assert "&lt;img src=x" in json.dumps(json.loads(blob))


def test_script_json_cannot_close_its_script():
    text = script_json({"name": "</script><script>alert(1)</script>", "x": [float("nan"), 1.0], "s": "\u2028"})

    assert "</" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": "</script><script>alert(1)</script>", "x": [None, 1.0], "s": "\u2028"}


def test_dashboard_command_writes_one_file(reports, tmp_path):
    out = tmp_path / "page" / "report.html"

    result = CliRunner().invoke(app, ["dashboard", *map(str, reports), "-o", str(out)])

    assert result.exit_code == 0, result.output
    assert out.is_file() and "wrote" in result.stdout
    bad = CliRunner().invoke(app, ["dashboard", str(tmp_path / "missing.csv"), "-o", str(out)])
    assert bad.exit_code == 7 and "no report at" in bad.stderr


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--virtual-time-budget=15000"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_page_loads_in_headless_chromium_without_errors_and_draws_every_plot(reports, tmp_path):
    page = write_dashboard(reports, tmp_path / "report.html", title=HOSTILE)
    expected = page.read_text().count('class="plot"')

    dom = _chromium(tmp_path, "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri())
    shot = tmp_path / "report.png"
    _chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", page.as_uri())

    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    assert f'data-plots="{expected}"' in body and "data-pwned" not in body
    assert dom.stdout.count('class="main-svg"') >= expected > 5
    assert shot.is_file() and shot.stat().st_size > 20_000
