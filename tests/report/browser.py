"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: commands on its fd 3,
replies and events on its fd 4, each a JSON message ended by NUL); no websocket, no port, no third-party package.

    with Chromium.start(tmp_path) as browser:
        page = browser.open("file:///.../timeline.html")     # loaded; console errors and exceptions collected
        page.evaluate("document.title"); page.screenshot()   # PNG bytes
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, NAMES) if path), None)


class BrowserError(RuntimeError):
    pass


@dataclass
class Page:
    browser: Chromium
    session: str
    errors: list[str] = field(default_factory=list)  # console errors, uncaught exceptions, error log entries

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, session=self.session, **params)

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, *, full_page: bool = True) -> bytes:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=full_page)["data"]
        return base64.b64decode(data)

    def hover(self, x: float, y: float) -> None:
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)


class Chromium:
    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc = proc
        self.to_browser = to_browser
        self.from_browser = from_browser
        self.buffer = b""
        self.next_id = 0
        self.pages: dict[str, Page] = {}

    @classmethod
    @contextmanager
    def start(
        cls, profile: Path, *, width: int = 1280, height: int = 900, stderr: Any = subprocess.DEVNULL
    ) -> Iterator[Chromium]:
        exe = find_chromium()
        if exe is None:
            raise BrowserError("no chromium on PATH (scripts/install-system-deps.sh installs it)")
        cmd_r, cmd_w = os.pipe()  # we write commands, it reads them on fd 3
        out_r, out_w = os.pipe()  # it writes on fd 4, we read
        # Out of the way of 3 and 4, so the child can dup2 them into place without clobbering one another.
        child_in, child_out = (
            fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10),
            fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10),
        )
        os.close(cmd_r)
        os.close(out_w)

        def fds() -> None:  # in the child: dup2 leaves 3 and 4 inheritable, the originals close at exec
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        argv = [
            exe,
            "--headless=new",
            "--no-sandbox",  # as root (CI containers) it refuses to start without this
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            close_fds=False,  # every other fd of ours is close-on-exec (PEP 446); closing would drop 3 and 4
            preexec_fn=fds,  # the test is single-threaded here
            start_new_session=True,
        )
        os.close(child_in)
        os.close(child_out)
        browser = cls(proc, cmd_w, out_r)
        try:
            yield browser
        finally:
            browser.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except (BrowserError, OSError):
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(5)
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass

    # ---- the protocol ----------------------------------------------------------------------------------------
    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium closed its pipe (exit code {self.proc.poll()})")
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def _event(self, message: dict[str, Any]) -> None:
        page = self.pages.get(message.get("sessionId", ""))
        if page is None:
            return
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            page.errors.append(f"uncaught: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            page.errors.append(
                "console." + params["type"] + ": " + " ".join(str(a.get("value")) for a in params["args"])
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            page.errors.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")

    def send(self, method: str, *, session: str | None = None, timeout: float = 30, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        msg_id = self.next_id
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self.to_browser, data) :]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._event(reply)

    def open(self, url: str, timeout: float = 30) -> Page:
        """A new tab showing ``url``, once its load event fired; console errors are collected from the start."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = self.pages[session] = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while page.evaluate("document.readyState + ' ' + location.href") != f"complete {url}":
            if time.monotonic() > deadline:
                raise BrowserError(f"{url} did not load in {timeout}s")
            time.sleep(0.05)
        return page
