"""``skinflint bench abuse``: hostile traffic against a real local stack, bounded (about two minutes).

The stack is the demo's (``skinflint up``: moto on 127.0.0.1, the uvicorn front, the control loop and
the instance agents, one app). Each case sends what an attacker or a careless client would and checks
the documented answer (docs/dataplane.md, "Front API"), the front's resident memory and what the control
loop plans afterwards:

- bodies: JSON nested 100,000 deep, a 5,000-digit integer, TIFF and GIF bytes labelled JPEG/PNG, PNG
  decompression bombs (a 20000x20000 header over a few hundred KB, a 179-megapixel one), a 64 MB chunked
  body without a length: each a 4xx with its reason, never a 5xx; the front's RSS after each
  at most twice its idle RSS;
- a JSON batch of 5 and of 10 frames on the idle stack: admitted, or a 503 that says how many fit
  (``max_frames``) instead of an endless ``Retry-After``;
- 100 concurrent long polls (``GET /v1/requests/{id}?wait=5``) while ``/healthz`` is timed: its p99;
- one key flooding ``POST /frames`` while a second key sends at half the app's planned rate: the second
  key's accepted share (and the errors of its refusals), the flood's 429s, and the rate the control
  loop plans before and after;
  repeated ``--flood-runs`` times (each flood moves the planned rate, a quiet pause between them moves
  it back: plan changes under load), then every frame accepted during the floods is read back: each
  must be answered or dropped with a reason, none lost (still queued past its deadline, or unknown);
- API hygiene: security headers, no server banner, ``OPTIONS`` ``Allow``, the OpenAPI behind the key.

Every figure is measured in this run on this machine (its load is on the results page).
"""

from __future__ import annotations

import json
import struct
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.errors import OptionError, ScenarioError
from bench.results import add_results_arguments, record

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator

    import httpx

__all__ = ["Case", "add_arguments", "png_bomb", "run_command"]

#: the front's RSS after a hostile request may be at most this multiple of its idle RSS (issue #28)
RSS_FACTOR = 2.0


@dataclass
class Case:
    """One row of the table: what was sent, what the docs promise, what came back."""

    name: str
    expected: str
    got: str
    ok: bool
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "case": self.name,
            "expected": self.expected,
            "got": self.got,
            "ok": self.ok,
            "detail": self.detail,
        }


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def png_bomb(width: int, height: int, rows: int | None = None) -> bytes:
    """A greyscale PNG whose header says ``width`` x ``height``; ``rows`` of zero pixels (default all)
    compressed into its IDAT: a few hundred KB on the wire for hundreds of megapixels."""
    head = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
    comp = zlib.compressobj(9)
    row = b"\x00" * (width + 1)
    body = bytearray()
    for _ in range(height if rows is None else rows):
        body += comp.compress(row)
    body += comp.flush()
    return head + _chunk(b"IDAT", bytes(body)) + _chunk(b"IEND", b"")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ScenarioError(f"no VmRSS for process {pid}")


class _Run:
    """The stack under test: its front, key, app, and the front process's memory."""

    def __init__(self, client: httpx.Client, url: str, key: str, app: str, front_pid: int):
        self.client, self.url, self.key, self.app, self.front_pid = client, url, key, app, front_pid
        self.idle_rss = _rss_mb(front_pid)
        self.cases: list[Case] = []

    def rss(self) -> float:
        return _rss_mb(self.front_pid)

    def post(
        self, body: bytes | Iterator[bytes], content_type: str, key: str | None = None
    ) -> httpx.Response:
        return self.client.post(
            f"{self.url}/v1/apps/{self.app}/frames",
            content=body,
            headers={"content-type": content_type, "x-api-key": key or self.key},
        )

    def expect(self, name: str, response: httpx.Response, statuses: set[int], error: str | None) -> None:
        """A case answered with one of ``statuses`` (and ``error``, when given), the front's RSS within
        :data:`RSS_FACTOR` of idle afterwards."""
        try:
            code = response.json().get("error", "")
        except ValueError:
            code = "(not JSON)"
        rss = self.rss()
        ok = response.status_code in statuses and (error is None or code == error)
        ok = ok and rss <= RSS_FACTOR * self.idle_rss
        expected = "/".join(map(str, sorted(statuses))) + (f" {error}" if error else "")
        detail = f"front RSS {rss:.0f} MB (idle {self.idle_rss:.0f} MB)"
        self.cases.append(Case(name, expected, f"{response.status_code} {code}".strip(), ok, detail))


def _bodies(run: _Run) -> None:
    run.expect(
        "JSON nested 100,000 deep",
        run.post(b"[" * 100_000 + b"]" * 100_000, "application/json"),
        {400},
        "malformed_json",
    )
    huge = b'{"frames": [{"image_b64": "", "content_type": "image/jpeg", "n": ' + b"9" * 5000 + b"}]}"
    run.expect(
        "a 5,000-digit integer in a batch", run.post(huge, "application/json"), {400}, "malformed_json"
    )
    run.expect(
        "TIFF bytes labelled JPEG", run.post(b"II*\x00" + b"\x00" * 4096, "image/jpeg"), {415, 422}, None
    )
    run.expect("GIF bytes labelled PNG", run.post(b"GIF89a" + b"\x00" * 4096, "image/png"), {415, 422}, None)
    run.expect(
        "PNG bomb, 20000x20000 header",
        run.post(png_bomb(20_000, 20_000, rows=2_000), "image/png"),
        {413},
        "image_too_large",
    )
    run.expect(
        "PNG, 179 megapixels",
        run.post(png_bomb(13_000, 13_770, rows=500), "image/png"),
        {413},
        "image_too_large",
    )

    def chunked() -> Iterator[bytes]:
        block = b"\xff" * (1 << 20)
        for _ in range(64):
            yield block

    try:
        response = run.post(chunked(), "image/jpeg")
        run.expect("64 MB chunked body, no length", response, {413}, "too_large")
    except Exception as exc:  # noqa: BLE001 - the front may close the connection mid-upload: that is a refusal
        rss = run.rss()
        ok = rss <= RSS_FACTOR * run.idle_rss
        run.cases.append(
            Case(
                "64 MB chunked body, no length",
                "413 too_large",
                f"connection closed ({type(exc).__name__})",
                ok,
                f"front RSS {rss:.0f} MB (idle {run.idle_rss:.0f} MB)",
            )
        )


def _frame(seed: int) -> bytes:
    from skinflint.local.video import synthetic_frames  # the demo's frames (PIL): only when this bench runs

    return synthetic_frames(seed + 1)[seed]


def _batches(run: _Run) -> None:
    import base64

    for n in (5, 10):
        body = json.dumps(
            {
                "frames": [
                    {"image_b64": base64.b64encode(_frame(i)).decode(), "content_type": "image/jpeg"}
                    for i in range(n)
                ]
            }
        ).encode()
        response = run.post(body, "application/json")
        doc = response.json()
        admitted = response.status_code == 202
        never = response.status_code == 503 and doc.get("error") == "batch_too_large" and "max_frames" in doc
        got = f"{response.status_code} {doc.get('error', '')}".strip()
        if never:
            retry = response.headers.get("retry-after", "none")
            got += f" (max_frames {doc['max_frames']}, Retry-After {retry})"
        run.cases.append(
            Case(
                f"JSON batch of {n} on the idle stack",
                "202, or 503 batch_too_large with max_frames",
                got,
                admitted or never,
            )
        )
        time.sleep(1.5)


def _long_polls(run: _Run, polls: int) -> None:
    response = run.post(_frame(0), "image/jpeg")
    if response.status_code != 202:
        run.cases.append(Case("long polls", "a frame to poll", f"{response.status_code}", False))
        return
    rid = response.json()["accepted"][0]["request_id"]
    stop = threading.Event()
    statuses: list[int] = []

    def poll() -> None:
        import httpx as _httpx

        with _httpx.Client(timeout=30) as own:
            while not stop.is_set():
                answer = own.get(f"{run.url}/v1/requests/{rid}?wait=5", headers={"x-api-key": run.key})
                statuses.append(answer.status_code)
                # a client that follows the API: Retry-After on a 429 (too many waiters for the key),
                # and a finished frame polled again a second later, not at once
                stop.wait(float(answer.headers.get("retry-after", "1")))

    def probe(seconds: float) -> float:
        timings: list[float] = []
        end = time.time() + seconds
        while time.time() < end:
            t0 = time.perf_counter()
            run.client.get(f"{run.url}/healthz")
            timings.append(time.perf_counter() - t0)
            time.sleep(0.05)
        timings.sort()
        return timings[min(len(timings) - 1, int(0.99 * len(timings)))]

    idle = probe(5.0)  # the same probe with no polls: what this host gives anyway
    with ThreadPoolExecutor(max_workers=polls) as pool:
        for _ in range(polls):
            pool.submit(poll)
        time.sleep(1.0)
        p99 = probe(8.0)
        stop.set()
    codes = ", ".join(f"{code} x{statuses.count(code)}" for code in sorted(set(statuses)))
    run.cases.append(
        Case(
            f"{polls} concurrent long polls (the pollers run in this process)",
            "/healthz p99 <= 100 ms, no 5xx",
            f"p99 {p99 * 1e3:.0f} ms (without the polls {idle * 1e3:.0f} ms); polls: {codes}",
            p99 <= 0.1 and not any(code >= 500 for code in statuses),
        )
    )


def _flood(
    run: _Run,
    second_key: str,
    rate: float,
    seconds: float,
    planned: Callable[[], float],
    accepted: list[str] | None = None,
    label: str = "",
) -> None:
    """Eight threads of one key as fast as the front answers; the second key at half the app's rate
    (within its fair share of two keys). The request ids of every frame accepted go to ``accepted``."""
    before = planned()
    polite_rate = rate / 2
    frame = _frame(1)
    counts: dict[str, dict[int, int]] = {"flood": {}, "polite": {}}
    polite_refused: dict[str, int] = {}  # "503 slot_full" -> count: why the second key was refused
    lock = threading.Lock()
    stop = threading.Event()

    def sender(who: str, key: str, every_s: float) -> None:
        import httpx as _httpx

        with _httpx.Client(timeout=10) as own:
            while not stop.is_set():
                t0 = time.time()
                answer = own.post(
                    f"{run.url}/v1/apps/{run.app}/frames",
                    content=frame,
                    headers={"content-type": "image/jpeg", "x-api-key": key},
                )
                ids: list[str] = []
                why = ""
                if answer.status_code == 202:  # noqa: PLR2004 - accepted
                    try:
                        ids = [str(a["request_id"]) for a in answer.json()["accepted"]]
                    except (ValueError, KeyError, TypeError):
                        ids = []
                elif who == "polite":
                    try:
                        why = f"{answer.status_code} {answer.json().get('error', '?')}"
                    except (ValueError, AttributeError):
                        why = str(answer.status_code)
                with lock:
                    counts[who][answer.status_code] = counts[who].get(answer.status_code, 0) + 1
                    if why:
                        polite_refused[why] = polite_refused.get(why, 0) + 1
                    if accepted is not None:
                        accepted.extend(ids)
                time.sleep(max(0.0, every_s - (time.time() - t0)))

    threads = [threading.Thread(target=sender, args=("flood", run.key, 0.0)) for _ in range(8)]
    threads.append(threading.Thread(target=sender, args=("polite", second_key, 1.0 / polite_rate)))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=15)
    polite = counts["polite"]
    sent = sum(polite.values())
    kept = polite.get(202, 0) / sent if sent else 0.0
    flood = counts["flood"]
    run.cases.append(
        Case(
            f"{label}one key flooding ({sum(flood.values())} requests in {seconds:g} s), a second at "
            f"{polite_rate:g} frames/s",
            "second key >= 95 % accepted, the flood gets 429s",
            f"second key {100 * kept:.1f} % of {sent}"
            + "".join(f", {why} x{n}" for why, n in sorted(polite_refused.items()))
            + "; flood: "
            + ", ".join(f"{code} x{n}" for code, n in sorted(flood.items())),
            kept >= 0.95 and flood.get(429, 0) > 0,
        )
    )
    time.sleep(12.0)  # an epoch or two: what the control loop plans from that traffic
    after = planned()
    run.cases.append(
        Case(
            f"{label}the planned rate after the flood",
            f"<= before + the flood key's quota (before {before:.2f})",
            f"{after:.2f} frames/s",
            after <= before + 100.0 + rate,
        )
    )


def _accounted(run: _Run, ids: list[str], runs: int, versions: int, wait_s: float) -> None:
    """Every frame accepted during the floods is answered or dropped with a reason by now (each read
    with a long poll until it is no longer queued, ``wait_s`` in all); lost: still queued, unknown."""
    end = time.time() + wait_s
    done = dropped = lost = 0
    reasons: dict[str, int] = {}
    for rid in ids:
        status, doc = "queued", {}
        while time.time() < end:
            answer = run.client.get(
                f"{run.url}/v1/requests/{rid}", params={"wait": "5"}, headers={"x-api-key": run.key}
            )
            if answer.status_code != 200:  # noqa: PLR2004
                status = f"http {answer.status_code}"
                break
            doc = answer.json()
            status = str(doc.get("status"))
            if status != "queued":
                break
        if status == "done":
            done += 1
        elif status == "dropped":
            dropped += 1
            for task in doc.get("tasks", []):
                if task.get("status") == "dropped":
                    reason = str(task.get("reason") or "no reason").split(":")[0]
                    reasons[reason] = reasons.get(reason, 0) + 1
        else:
            lost += 1
    why = ", ".join(f"{reason} x{n}" for reason, n in sorted(reasons.items()))
    run.cases.append(
        Case(
            f"the {len(ids)} frames accepted during {runs} flood run(s) ({versions} plan versions published)",
            "each answered or dropped with a reason, 0 lost",
            f"{done} answered, {dropped} dropped ({why or 'none'}), {lost} lost",
            lost == 0 and bool(ids),
        )
    )


def _hygiene(run: _Run) -> None:
    answer = run.client.get(f"{run.url}/v1/apps", headers={"x-api-key": run.key})
    headers = {k.lower(): v for k, v in answer.headers.items()}
    missing = [h for h in ("x-content-type-options", "cache-control") if h not in headers]
    run.cases.append(
        Case(
            "security headers, no server banner",
            "nosniff, no-store, no server header",
            f"missing {missing or 'none'}; server: {headers.get('server', 'none')}",
            not missing and "server" not in headers,
        )
    )
    options = run.client.options(f"{run.url}/v1/apps", headers={"x-api-key": run.key})
    allow = options.headers.get("allow", "")
    run.cases.append(
        Case(
            "OPTIONS /v1/apps",
            "Allow names GET and POST",
            allow or "(none)",
            "GET" in allow and "POST" in allow,
        )
    )
    spec = run.client.get(f"{run.url}/openapi.json")
    run.cases.append(
        Case(
            "/openapi.json without a key", "401 or 403", str(spec.status_code), spec.status_code in (401, 403)
        )
    )
    keyed = run.client.get(f"{run.url}/openapi.json", headers={"x-api-key": run.key})
    schemes = (
        keyed.json().get("components", {}).get("securitySchemes", {}) if keyed.status_code == 200 else {}
    )
    run.cases.append(
        Case(
            "OpenAPI security scheme",
            "x-api-key declared",
            ", ".join(schemes) or "(none)",
            any(s.get("name") == "x-api-key" for s in schemes.values()),
        )
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Hostile traffic against a real local stack (moto + the uvicorn front + workers, one app): "
        "malformed and oversized bodies, decompression bombs, JSON batches, concurrent long polls, a "
        "one-key flood beside a well-behaved key, API hygiene. A table of expected against measured; "
        "exit 1 when a case fails."
    )
    parser.add_argument("--app", default="traffic", help="demo app to serve (default traffic)")
    parser.add_argument("--rate", type=float, default=4.0, help="the app's registered frame rate (default 4)")
    parser.add_argument("--polls", type=int, default=100, help="concurrent long polls (default 100)")
    parser.add_argument("--flood-s", type=float, default=15.0, help="seconds of flood (default 15)")
    parser.add_argument(
        "--flood-runs",
        type=int,
        default=1,
        help="floods in a row, each followed by a quiet pause (default 1); then every frame accepted "
        "during them must be answered or dropped with a reason",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_results_arguments(parser)


def _print(cases: list[Case]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="hostile traffic against the local stack")
    for column in ("case", "expected", "got", "ok", "detail"):
        table.add_column(column)
    for case in cases:
        table.add_row(
            case.name, case.expected, case.got, "yes" if case.ok else "[bold red]NO[/]", case.detail
        )
    Console().print(table)


def run_command(args: argparse.Namespace) -> int:
    if args.rate <= 0 or args.polls < 1 or args.flood_s <= 0 or args.flood_runs < 1:
        raise OptionError("--rate and --flood-s must be > 0, --polls and --flood-runs >= 1")

    def body(_page: Any) -> int:
        cases = run_abuse(args.app, args.rate, args.polls, args.flood_s, args.flood_runs)
        if args.json:
            print(json.dumps([case.as_json() for case in cases], indent=2))
        else:
            _print(cases)
        return 0 if all(case.ok for case in cases) else 1

    return record("abuse", args, body)


def run_abuse(app: str, rate: float, polls: int, flood_s: float, flood_runs: int = 1) -> list[Case]:
    """Start the local stack, run every case, stop it (whatever happens)."""
    import sys

    import httpx

    from skinflint.local.launch import make_stack

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    stack = make_stack([app], rate, None, log, None)
    try:
        info = stack.start()
        second = "sk-abuse-" + str(int(time.time()))
        stack.add_api_key(second, "second key (bench abuse)")

        def planned() -> float:
            rates = [epoch.get("rates", {}).get(app, {}) for epoch in stack.epochs]
            return float(next((r["planned"] for r in reversed(rates) if "planned" in r), 0.0))

        with httpx.Client(timeout=60) as client:
            run = _Run(client, info.url, info.api_key, app, stack.pid("front"))
            log("bodies")
            _bodies(run)  # noqa: E702
            log("batches")
            _batches(run)  # noqa: E702
            log("long polls")
            _long_polls(run, polls)  # noqa: E702
            accepted: list[str] = []
            first_version = max(stack.versions(), default=0)
            for k in range(flood_runs):
                log(f"flood {k + 1} of {flood_runs}")
                label = f"flood {k + 1}: " if flood_runs > 1 else ""
                _flood(run, second, rate, flood_s, planned, accepted, label)
            log(f"reading back the {len(accepted)} frames accepted during the floods")
            versions = max(stack.versions(), default=0) - first_version
            _accounted(run, accepted, flood_runs, versions, wait_s=120.0)
            log("hygiene")
            _hygiene(run)  # noqa: E702
        return run.cases
    finally:
        stack.stop()
