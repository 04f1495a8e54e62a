"""Screenshots of the built site's main pages, opened from disk in headless Chromium with no network.

Usage: ``python docs/screenshots.py [SITE_DIR] [OUT_DIR]`` (``make screenshots``: ``site`` into
``site_screenshots/``). For a person to look at the pages as a reader sees them; not a test.
Every host name resolves to nothing, so a page that still needed a CDN script or a web font
would show it here (raw TeX, fallback fonts). Needs Chromium (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

PAGES = ["index", "adamw", "moving-average", "updaters", "writing-an-optimizer", "writing-a-wrapper", "api"]
BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic", "--hide-scrollbars",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000", "--window-size=1280,2400"]


def main(site: str = "site", out: str = "site_screenshots") -> int:
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        print("make screenshots needs Chromium (Debian: apt-get install chromium); none found.", file=sys.stderr)
        return 1
    os.makedirs(out, exist_ok=True)
    for name in PAGES:
        page = os.path.abspath(os.path.join(site, "index.html" if name == "index" else f"{name}/index.html"))
        if not os.path.exists(page):
            print(f"{page} does not exist: build the site first (make docs).", file=sys.stderr)
            return 1
        png = os.path.abspath(os.path.join(out, f"{name}.png"))
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", f"file://{page}"],
                           check=True, capture_output=True, timeout=120)
        print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
