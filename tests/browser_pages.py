"""Pages the course writes to disk (feedback pages, the class report) opened in headless Chromium: the shared part of
tests/test_browser.py and tests/test_autograde_class.py. Needs Debian's Chromium, node and playwright-core
(`npm ci --prefix tests/browser`; no browser download)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "browser"
OFFLINE_DRIVER = ROOT / "tests" / "browser" / "offline_pages.mjs"


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_missing() -> str | None:
    """What the pages-from-disk tests lack (they need no release)."""
    if chromium_path() is None:
        return "Chromium is not installed (install it with `apt-get install -y chromium`)"
    if shutil.which("node") is None:
        return "node is not installed (the browser test drives Chromium with playwright-core)"
    if not (ROOT / "tests" / "browser" / "node_modules" / "playwright-core").is_dir():
        return "playwright-core is not installed (run `npm ci --prefix tests/browser`)"
    return None


def open_pages(pages: list[dict], timeout_s: int = 60) -> dict:
    """Open HTML files in headless Chromium (``tests/browser/offline_pages.mjs``), JavaScript on, every request but
    the file itself recorded and aborted: per page name, its requests, dialogs, title, formulas and images drawn,
    its text."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    options = {"chromium": chromium_path(), "pages": pages, "timeout_s": timeout_s, "screenshots": str(ARTIFACTS)}
    done = subprocess.run(
        ["node", str(OFFLINE_DRIVER), json.dumps(options)],
        cwd=OFFLINE_DRIVER.parent,
        capture_output=True,
        text=True,
        timeout=timeout_s * len(pages) + 60,
    )
    assert done.returncode == 0, f"browser driver failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
