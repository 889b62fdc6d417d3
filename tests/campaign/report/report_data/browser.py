"""A headless Chromium driven over the DevTools protocol (CDP) through a pipe: open a page, collect
what its JavaScript logged, evaluate expressions, take a screenshot.

The browser is Debian's ``chromium``. It gets the DevTools pipe as fds 3 (commands in) and 4
(replies out) (``--remote-debugging-pipe``; bash moves the pipe's ends there); messages are
JSON, each ended by a NUL byte. Name
resolution is turned off (``--host-resolver-rules``), so a page that loads anything from the
network shows it as errors.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0")
#: Seconds a reply may take: only a hung browser reaches it (a test never waits on a timing).
PATIENCE = 120.0


_PACKED = re.compile(r'<script type="application/gzip;base64">([A-Za-z0-9+/=]*)</script>')


def page_source(page: Path) -> str:
    """The report's HTML with its compressed scripts (campaign._report._packed) unpacked in
    place, as the page's loader inserts them: what the browser ends up with."""
    return _PACKED.sub(lambda m: gzip.decompress(base64.b64decode(m.group(1))).decode(),
                       page.read_text())


def chromium() -> str | None:
    return shutil.which("chromium")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page (``session``); use as a context manager."""

    def __init__(self, profile: Path, log: Path):
        exe = chromium()
        if exe is None:
            raise BrowserError("chromium is not installed (apt-get install chromium)")
        to_r, self._w = os.pipe()
        self._r, from_w = os.pipe()
        self._log = open(log, "wb")
        script = f'exec "$0" "$@" 3<&{to_r} 4>&{from_w}'  # bash: dash takes only fds 0-9
        self.proc = subprocess.Popen(
            ["bash", "-c", script, exe, *FLAGS, f"--user-data-dir={profile}",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(to_r, from_w), stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT)
        os.close(to_r)
        os.close(from_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=self.session)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("Browser.close")
            except (BrowserError, OSError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + PATIENCE
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._r], [], [], max(0.0, left))
            if not ready:
                raise BrowserError(f"chromium sent nothing for {PATIENCE:.0f} s")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise BrowserError(f"chromium closed its DevTools pipe (exit {self.proc.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._w, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, session=self.session, **params)

    def wait_event(self, method: str) -> dict[str, Any]:
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._read())

    def open(self, url: str, *, width: int = 1400, height: int = 1000,
             before: str | None = None) -> None:
        """Load ``url`` at this window size and wait for its load event; ``before``, a script
        run in the page before any of its own."""
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        if before is not None:
            self.page("Page.addScriptToEvaluateOnNewDocument", source=before)
        self.page("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (a promise is awaited); raises on an exception."""
        reply = self.page("Runtime.evaluate", expression=expression, awaitPromise=True,
                          returnByValue=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"JavaScript raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def errors(self) -> list[str]:
        """What the page logged as errors: uncaught exceptions, console.error, failed loads."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:2000])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error",
                                                                                  "assert"):
                found.append(" ".join(str(a.get("value", a.get("description")))
                                      for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"{params['entry'].get('text')} {params['entry'].get('url', '')}")
        return found

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (not only the window) at ``path``."""
        shot = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path
