"""Where the browser tests find Chromium, and what they do without it.

On a developer's machine without Chromium the browser tests skip, naming the
command that installs it: the README's test command must pass on a fresh
machine. In CI (``CI=true``, or ``RUNNERTRACE_REQUIRE_BROWSER=1``, which
``.ci/run`` sets) a missing browser fails them instead, so they can never be
skipped there without anyone noticing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest

INSTALL = "apt-get install chromium (Debian/Ubuntu), or set RUNNERTRACE_CHROMIUM=/path/to/chromium"


# Read at import (collection time): conftest clears every RUNNERTRACE_* variable
# before each test runs.
_EXPLICIT = os.environ.get("RUNNERTRACE_CHROMIUM")
_REQUIRED = os.environ.get("CI", "").lower() == "true" or os.environ.get(
    "RUNNERTRACE_REQUIRE_BROWSER", ""
) not in ("", "0")


def chromium() -> str:
    """The Chromium executable; skips the test (fails it in CI) when there is none.

    ``RUNNERTRACE_CHROMIUM`` names one explicitly (a path that does not exist
    counts as none, which is also how to run the suite as if it were missing).
    """
    explicit = _EXPLICIT
    found = (
        (explicit if os.path.isfile(explicit) else None)
        if explicit
        else shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if found:
        return found
    where = f"RUNNERTRACE_CHROMIUM={explicit} does not exist" if explicit else "no chromium on PATH"
    message = f"browser test needs Chromium ({where}): {INSTALL}"
    if _REQUIRED:
        pytest.fail(message + "; CI requires it", pytrace=False)
    pytest.skip(message)


@contextmanager
def loopback_page(width: int, height: int, args: list[str]) -> Iterator[object]:
    """A headless Chromium page (launched with ``args``) that may reach only loopback.

    Any other request is aborted and reported after the test, as is any uncaught
    error of the page's own scripts.
    """
    from playwright import sync_api as playwright_api

    executable = chromium()  # skips without one, fails in CI
    outside: list[str] = []
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=args, headless=True)
        context = browser.new_context(viewport={"width": width, "height": height})

        def guard(route: object) -> None:
            url = route.request.url  # type: ignore[attr-defined]
            if urlsplit(url).hostname in ("127.0.0.1", None) or url.startswith("data:"):
                route.continue_()  # type: ignore[attr-defined]
            else:
                outside.append(url)
                route.abort()  # type: ignore[attr-defined]

        context.route("**/*", guard)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        yield page
        assert errors == [], errors
        browser.close()
    assert outside == [], f"the page reached beyond loopback: {outside}"
