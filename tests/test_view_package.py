"""``agentkit view`` ships whole: its page is in the wheel and loads nothing from elsewhere."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "src" / "agentkit" / "view" / "static"
VENDOR = STATIC / "vendor"
#: The charting library, shipped unmodified (vendor/README.md names its source).
CHART_JS = VENDOR / "chart.umd.min.js"


def _shipped() -> set[str]:
    return {
        f"agentkit/view/{p.relative_to(STATIC.parent).as_posix()}"
        for p in STATIC.rglob("*")
        if p.is_file()
    }


def test_the_wheel_holds_the_page_and_the_charting_library(tmp_path: Path) -> None:
    from hatchling.builders.wheel import WheelBuilder

    wheel = next(iter(WheelBuilder(str(ROOT)).build(directory=str(tmp_path))))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped = _shipped()
        assert {
            "agentkit/view/static/index.html",
            "agentkit/view/static/app.js",
            "agentkit/view/static/app.css",
            "agentkit/view/static/vendor/chart.umd.min.js",
            "agentkit/view/static/vendor/chart.js.LICENSE.md",
            "agentkit/view/static/vendor/README.md",
        } <= shipped
        assert shipped <= names, shipped - names
        in_wheel = archive.read("agentkit/view/static/vendor/chart.umd.min.js")
    assert in_wheel == CHART_JS.read_bytes()


def test_the_charting_library_is_the_release_its_readme_names() -> None:
    """The shipped file's sha256 is the one vendor/README.md records (an edited or
    replaced file, or a README not updated with it, fails here)."""
    readme = (VENDOR / "README.md").read_text(encoding="utf-8")
    (recorded,) = re.findall(r"sha256 of `chart\.umd\.min\.js`: `([0-9a-f]{64})`", readme)
    assert hashlib.sha256(CHART_JS.read_bytes()).hexdigest() == recorded
    (version,) = re.findall(r"\| `chart\.js` \(npm\) \| ([0-9.]+) \|", readme)
    assert f"chart.js-{version}.tgz" in readme
    assert CHART_JS.read_bytes().startswith(f"/*!\n * Chart.js v{version}\n".encode())
    assert "MIT License" in (VENDOR / "chart.js.LICENSE.md").read_text(encoding="utf-8")


def test_the_page_refers_only_to_its_own_files() -> None:
    """Our own files name no other host (the vendored file is checked by its sha256, and
    in the browser tests no request leaves 127.0.0.1)."""
    for path in STATIC.rglob("*"):
        if not path.is_file() or VENDOR in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        # the SVG's XML namespace is a name, not a download
        urls = set(re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"')]*", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)


def test_the_page_preloads_every_module_it_has() -> None:
    """index.html names every JavaScript module of the page (<link rel="modulepreload">),
    so that the browser fetches them side by side instead of one import after another,
    and names no module that is not there (it would be a request that fails)."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    preloaded = re.findall(r'<link rel="modulepreload" href="/static/([^"]+)">', html)
    modules = {
        p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*.js") if VENDOR not in p.parents
    }
    assert len(preloaded) == len(set(preloaded))
    assert set(preloaded) == modules
