"""``agentkit view`` ships whole: its page is in the wheel and loads nothing from elsewhere."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "src" / "agentkit" / "view" / "static"


def test_the_wheel_holds_the_page(tmp_path: Path) -> None:
    from hatchling.builders.wheel import WheelBuilder

    wheel = next(iter(WheelBuilder(str(ROOT)).build(directory=str(tmp_path))))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"agentkit/view/static/{p.name}" for p in STATIC.iterdir() if p.is_file()}
    assert {"index.html", "app.js", "app.css"} <= {Path(n).name for n in shipped}
    assert shipped <= names, shipped - names


def test_the_page_refers_only_to_its_own_files() -> None:
    for path in STATIC.iterdir():
        text = path.read_text(encoding="utf-8")
        # the SVG's XML namespace is a name, not a download
        urls = set(re.findall(r"(?:https?:)?//[A-Za-z0-9.-]+\.[a-z]{2,}[^\s\"')]*", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)
