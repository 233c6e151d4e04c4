"""A real HTTPS server on 127.0.0.1 standing in for Kubeflow Trainer's progress endpoint (KEP-2779, Trainer v2.2's
``pkg/progress``): a CA and a server certificate made here, the Bearer token checked (401 otherwise, as the real one
answers), the body checked against the API's types (422 otherwise), every request recorded."""

from __future__ import annotations

import datetime
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm-7b/status"
MAX_BODY = 1 << 16  # the real server's limit
_FIELDS = {"progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"}
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")


def check_body(body: Any, now: float | None = None) -> dict[str, str]:
    """Fail unless ``body`` is an UpdateTrainJobStatusRequest the API accepts (its types, validation markers and
    omitempty); its metrics. ``now``: the wall time lastUpdatedTime must be near."""
    assert isinstance(body, dict) and set(body) == {"trainerStatus"}, body
    status = body["trainerStatus"]
    assert isinstance(status, dict) and set(status) <= _FIELDS and "lastUpdatedTime" in status, status
    if "progressPercentage" in status:
        assert type(status["progressPercentage"]) is int and 0 <= status["progressPercentage"] <= 100, status
    if "estimatedRemainingSeconds" in status:
        assert type(status["estimatedRemainingSeconds"]) is int, status
        assert 0 <= status["estimatedRemainingSeconds"] < 2**31, status  # an int32
    assert isinstance(status["lastUpdatedTime"], str) and _TIME.fullmatch(status["lastUpdatedTime"]), status
    if now is not None:
        at = datetime.datetime.strptime(status["lastUpdatedTime"], "%Y-%m-%dT%H:%M:%SZ")
        assert abs(at.replace(tzinfo=datetime.timezone.utc).timestamp() - now) < 120, status  # UTC, now
    metrics = status.get("metrics", [])
    assert isinstance(metrics, list) and len(metrics) <= 256, status
    for m in metrics:
        assert isinstance(m, dict) and set(m) == {"name", "value"}, m
        for text in m.values():
            assert isinstance(text, str) and 1 <= len(text) <= 64, m
    names = [m["name"] for m in metrics]
    assert len(names) == len(set(names)), names
    return {m["name"]: m["value"] for m in metrics}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the server answered
    problem: str  # why it refused the request, or ""

    def metrics(self) -> dict[str, str]:
        return check_body(json.loads(self.body))

    def status_fields(self) -> dict[str, Any]:
        return dict(json.loads(self.body)["trainerStatus"])


@dataclass
class Recorded:
    tokens: set[str]  # the tokens the server takes (a TokenReview's yes)
    requests: list[Request] = field(default_factory=list)
    hang: bool = False  # each request waits for ``release`` before it is answered
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Request]:
        deadline = time.monotonic() + timeout
        while len(self.requests) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.requests) >= count, self.requests
        return list(self.requests)

    def accepted(self) -> list[Request]:
        return [r for r in self.requests if r.status == 200]


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def _cert(subject: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool, ip: str = "") -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
    else:
        usage = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(IPv4Address(ip)), x509.DNSName("trainer.kubeflow.svc")]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.add_extension(usage, critical=True).sign(issuer_key, hashes.SHA256())


def make_ca(folder: Path, name: str) -> tuple[Path, Any]:
    """A CA: its PEM file (the client's bundle) and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    path = folder / f"{name}.crt"
    path.write_bytes(_cert(name, key, name, key, ca=True).public_bytes(serialization.Encoding.PEM))
    return path, key


def server_context(folder: Path, ca_name: str, ca_key: Any, ip: str = "127.0.0.1") -> ssl.SSLContext:
    """The server's side: a certificate ``ca_name`` signed for ``ip`` (the client checks it is the URL's)."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert, key_file = folder / f"server-{ca_name}-{ip}.crt", folder / f"server-{ca_name}-{ip}.key"
    cert.write_bytes(_cert(ip, key, ca_name, ca_key, ca=False, ip=ip).public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key_file)
    return context


def _payload_problem(body: bytes) -> str:
    try:
        check_body(json.loads(body), time.time())
    except (ValueError, AssertionError) as exc:
        return f"Invalid payload: {exc}"
    return ""


def _verdict(method: str, path: str, headers: Any, body: bytes, tokens: set[str]) -> tuple[int, str]:
    """The real server's answer (``pkg/progress``: middleware, then handler) and why: the first check that fails,
    in the real server's order, or 200."""
    header = headers.get("Authorization", "")
    token = header[len("Bearer ") :] if header.startswith("Bearer ") else ""
    checks: list[tuple[Callable[[], bool], int, str]] = [
        (lambda: bool(header), 401, "Missing Authorization header"),
        (lambda: bool(token), 401, "Invalid Authorization header format"),
        (lambda: token in tokens, 401, "Invalid or expired token"),
        (lambda: len(body) <= MAX_BODY, 413, "Payload too large"),
        (lambda: method == "POST" and path == PATH, 404, "Not found"),
        (lambda: headers.get("Content-Type") == "application/json", 422, "Invalid payload: not application/json"),
    ]
    for passes, code, why in checks:
        if not passes():
            return code, why
    problem = _payload_problem(body)
    return (422, problem) if problem else (200, "")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # http.server's name
        size = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(min(size, 2 * MAX_BODY))
        record = self.server.recorded
        code, why = _verdict(self.command, self.path, self.headers, body, record.tokens)
        record.requests.append(Request(self.command, self.path, dict(self.headers.items()), body, code, why))
        record.arrived.set()
        if record.hang:
            record.release.wait(30)
        if code == 200:
            answer = body
        else:
            answer = json.dumps({"kind": "Status", "status": "Failure", "message": why, "code": code}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's name and signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    recorded: Recorded

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that refused our certificate: nothing to record


@contextmanager
def serving(context: ssl.SSLContext, tokens: set[str], *, hang: bool = False) -> Iterator[tuple[str, Recorded]]:
    """The server on 127.0.0.1 (a free port), taking ``tokens``: its status URL and what it records."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.recorded = Recorded(tokens=tokens, hang=hang)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}{PATH}", server.recorded
    finally:
        server.recorded.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
