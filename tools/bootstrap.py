"""What a notebook's locked first cell calls once the course is importable."""
from __future__ import annotations


def ready(profile: str) -> None:
    """Print a short environment check for ``profile`` (the full table when something is missing)."""
    try:
        from tools.preflight import run_preflight
    except ImportError:  # preflight not available in this checkout
        print(f"[课程] 运行环境：{profile}")
        return
    run_preflight(profile, quiet_ok=True)
