"""The profiler: measures an ONNX model (or a torch ``nn.Module``, exported first) with onnxruntime
over batch sizes and concurrency levels.

Concurrency ``c`` means ``c`` sessions run at the same time on the machine with the threads split
between them (``intra_op_num_threads = threads // c``); a point's duration is the wall time until
every session has finished its batch, so one machine's throughput is ``c * b / d``.

Per point: warm-up runs, then at least ``runs`` timed rounds; median, p95, spread (p95/median) and
the process's peak resident memory. The batch stops growing when the next batch is predicted not to
fit under the memory cap, when onnxruntime fails to allocate, or when a batch takes longer than the
duration cap; the reason is recorded (:class:`SeriesLimit`) and printed, never raised.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import os
import platform
import resource
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from profiles.errors import ProfilesError
from profiles.fit import LinearFit, fit_linear
from profiles.onnxgraph import GraphCost, InputSpec, export_torch, graph_cost, input_specs, load_onnx

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from torch import nn

__all__ = [
    "PointResult",
    "ProfileConfig",
    "ProfileResult",
    "SeriesLimit",
    "host_cpu_model",
    "profile_module",
    "profile_onnx",
]

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)


def host_cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _mem_available_mb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 4096.0


def _rss_mb(field_name: str = "VmRSS") -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux: ``echo 5 > /proc/self/clear_refs``); no-op elsewhere."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


@dataclass(frozen=True)
class ProfileConfig:
    """What to measure. ``threads``: total threads on the machine (default: all CPUs), split between
    ``concurrency`` sessions. ``runs``: timed rounds per point (at least 20 for real profiles; tests
    pass fewer), taken in ``chunks`` round-robin passes over the batches. ``max_memory_mb``: cap on
    the process's resident memory (default: half of what the machine has available).
    ``max_duration_s``: stop growing the batch once a batch takes longer."""

    hardware: str
    batches: tuple[int, ...] = DEFAULT_BATCHES
    concurrency: tuple[int, ...] = (1,)
    threads: int | None = None
    runs: int = 20
    warmup: int = 3
    min_time_s: float = 0.0
    chunks: int = 4
    max_duration_s: float = 2.0
    max_memory_mb: float | None = None
    use_gpu: bool = False
    seed: int = 0
    input_shapes: Mapping[str, Sequence[int]] | None = None

    def total_threads(self) -> int:
        return self.threads or os.cpu_count() or 1


@dataclass(frozen=True)
class PointResult:
    hardware: str
    batch: int
    concurrency: int
    threads: int
    median_s: float
    p95_s: float
    min_s: float
    spread: float
    runs: int
    peak_rss_mb: float
    mem_delta_mb: float


@dataclass(frozen=True)
class SeriesLimit:
    """Why the batch stopped growing for one concurrency level (``batch`` is the first one skipped)."""

    concurrency: int
    threads: int
    batch: int
    reason: str

    def message(self) -> str:
        head = f"concurrency {self.concurrency} x {self.threads} threads"
        return f"{head}: stopped before batch {self.batch}: {self.reason}"


@dataclass
class ProfileResult:
    model: str
    model_sha256: str
    cost: GraphCost
    provenance: dict[str, Any]
    points: list[PointResult] = field(default_factory=list)
    limits: list[SeriesLimit] = field(default_factory=list)

    def series(self, concurrency: int, threads: int | None = None) -> list[PointResult]:
        return [
            point
            for point in self.points
            if point.concurrency == concurrency and (threads is None or point.threads == threads)
        ]

    def fits(self) -> dict[tuple[int, int], LinearFit]:
        """Nexus's linear model per (concurrency, threads) series with at least one point."""
        out: dict[tuple[int, int], LinearFit] = {}
        for key in sorted({(point.concurrency, point.threads) for point in self.points}):
            pts = self.series(*key)
            out[key] = fit_linear([point.batch for point in pts], [point.median_s for point in pts])
        return out

    def entries(self, hardware: str | None = None) -> list[dict[str, Any]]:
        """Profile entries (``planner.models.ProfileEntry`` dicts plus provenance and statistics)."""
        fits = self.fits()
        out = []
        for point in self.points:
            fit = fits[(point.concurrency, point.threads)]
            entry: dict[str, Any] = {
                "hardware": hardware or point.hardware,
                "batch": point.batch,
                "concurrency": point.concurrency,
                "duration_s": round(point.median_s, 7),
                "p95_s": round(point.p95_s, 7),
                "spread": round(point.spread, 4),
                "runs": point.runs,
                "threads": point.threads,
                "peak_rss_mb": round(point.peak_rss_mb, 1),
                "fit_rel_err": round(abs(fit.predict(point.batch) - point.median_s) / point.median_s, 4),
                "model": self.model,
                "model_sha256": self.model_sha256,
                **self.provenance,
            }
            limit = next(
                (
                    lim
                    for lim in self.limits
                    if lim.concurrency == point.concurrency and lim.threads == point.threads
                ),
                None,
            )
            if limit is not None and point.batch == max(
                other.batch for other in self.series(point.concurrency, point.threads)
            ):
                entry["limit"] = limit.message()
            out.append(entry)
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "cost": self.cost.as_dict(),
            "provenance": self.provenance,
            "points": [asdict(point) for point in self.points],
            "limits": [lim.message() for lim in self.limits],
            "fits": {
                f"c{concurrency}_t{threads}": fit.as_dict()
                for (concurrency, threads), fit in self.fits().items()
            },
        }


def _make_inputs(specs: Sequence[InputSpec], batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        shape = (batch, *spec.shape)
        if spec.dtype.startswith("float"):
            out[spec.name] = rng.standard_normal(shape).astype(spec.dtype)
        else:
            out[spec.name] = np.zeros(shape, dtype=spec.dtype)
    return out


def _session(path: Path, threads: int, concurrency: int, use_gpu: bool) -> Any:
    import onnxruntime as ort  # optional heavy dependency: onnxruntime

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if concurrency > 1:  # spinning pool threads would steal the other sessions' cores
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]
    if use_gpu and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    return ort.InferenceSession(str(path), sess_options=so, providers=providers)


def _is_alloc_failure(exc: BaseException) -> bool:
    msg = str(exc).lower()
    return any(marker in msg for marker in ("alloc", "out of memory", "bad_alloc", "cannot allocate"))


def _time_rounds(sessions: list[Any], feeds: dict[str, np.ndarray], rounds: int) -> list[float]:
    """Wall time of ``rounds`` rounds; in each round every session runs one batch concurrently."""
    if len(sessions) == 1:
        sess = sessions[0]
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            out.append(time.perf_counter() - t0)
        return out
    n_sessions = len(sessions)
    start = threading.Barrier(n_sessions + 1)
    done = threading.Barrier(n_sessions + 1)
    stamps = np.zeros((rounds, n_sessions, 2))
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        for round_no in range(rounds):
            start.wait()
            try:
                stamps[round_no, i, 0] = time.perf_counter()
                sessions[i].run(None, feeds)
                stamps[round_no, i, 1] = time.perf_counter()
            except Exception as exc:  # reported by the main thread
                errors.append(exc)
            done.wait()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_sessions)]
    for thread in threads:
        thread.start()
    for _ in range(rounds):
        start.wait()
        done.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [float(stamps[round_no, :, 1].max() - stamps[round_no, :, 0].min()) for round_no in range(rounds)]


def _run_guarded(
    sessions: list[Any], feeds: dict[str, np.ndarray], rounds: int, batch: int
) -> list[float] | str:
    """Timed rounds, or the reason the batch cannot run (allocation failure)."""
    try:
        return _time_rounds(sessions, feeds, rounds)
    except Exception as exc:
        if _is_alloc_failure(exc):
            return "memory: onnxruntime could not allocate"
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ProfilesError(f"onnxruntime failed at batch {batch}: {first_line[:160]}") from exc


@dataclass
class _Series:
    """State of one (concurrency, threads) series while it is measured."""

    sessions: list[Any]
    concurrency: int
    threads: int
    times: dict[int, list[float]] = field(default_factory=dict)
    feeds: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    mem: dict[int, tuple[float, float]] = field(default_factory=dict)

    def limit(self, batch: int, reason: str) -> SeriesLimit:
        return SeriesLimit(self.concurrency, self.threads, batch, reason)


def _first_pass(
    st: _Series, specs: Sequence[InputSpec], cfg: ProfileConfig, first_runs: int
) -> SeriesLimit | None:
    """Walk the batches upwards: warm-up, the first share of the runs, memory and duration checks."""
    cap = cfg.max_memory_mb if cfg.max_memory_mb is not None else _rss_mb() + 0.5 * _mem_available_mb()
    batches = sorted(set(cfg.batches))
    for i, batch in enumerate(batches):
        if st.times:
            last = max(st.times)
            predicted = _rss_mb() + max(st.mem[last][1], 0.0) * batch / last
            if predicted > cap:
                return st.limit(batch, f"memory: predicted {predicted:.0f} MB > cap {cap:.0f} MB")
        feed = _make_inputs(specs, batch, cfg.seed)
        rss0 = _rss_mb()
        _reset_peak_rss()
        first = _run_guarded(st.sessions, feed, 1, batch)
        if isinstance(first, str):
            return st.limit(batch, first)
        if first[0] > 3 * cfg.max_duration_s:
            return st.limit(
                batch, f"duration: one batch took {first[0]:.2f} s > cap {cfg.max_duration_s:g} s"
            )
        skip = max(0, cfg.warmup - 1)
        rest = _run_guarded(st.sessions, feed, skip + first_runs, batch)
        if isinstance(rest, str):
            return st.limit(batch, rest)
        st.times[batch], st.feeds[batch] = rest[skip:], feed
        peak = max(_rss_mb("VmHWM"), _rss_mb())
        st.mem[batch] = (peak, peak - rss0)
        med = float(np.median(st.times[batch]))
        if med > cfg.max_duration_s and i + 1 < len(batches):
            return st.limit(
                batches[i + 1], f"duration: batch {batch} took {med:.2f} s > cap {cfg.max_duration_s:g} s"
            )
    return None


@contextlib.contextmanager
def _pinned(cores: int) -> Iterator[None]:
    """Pin this process (and the session threads created inside) to ``cores`` CPUs, the highest
    numbered ones, then restore the previous set. On a shared 2-core machine this cuts the spread
    (p95/median) of 1-thread runs roughly in half; where affinity is unsupported it does nothing."""
    getter = getattr(os, "sched_getaffinity", None)
    setter = getattr(os, "sched_setaffinity", None)
    if getter is None or setter is None:
        yield
        return
    before = getter(0)
    wanted = set(sorted(before)[-cores:]) if cores < len(before) else before
    try:
        setter(0, wanted)
        yield
    finally:
        setter(0, before)


def _measure_series(
    path: Path,
    specs: Sequence[InputSpec],
    cfg: ProfileConfig,
    *,
    concurrency: int,
    threads: int,
    tick: Callable[[str], None],
) -> tuple[list[PointResult], SeriesLimit | None]:
    """Measure one (concurrency, threads) series.

    Pass 1 walks the batches upwards (:func:`_first_pass`); the remaining runs are then taken
    round-robin over the accepted batches in ``chunks`` passes, so a burst of load from another
    process on this shared machine lands on every batch alike instead of bending the batch curve."""
    with _pinned(threads * concurrency):
        return _measure_pinned(path, specs, cfg, concurrency=concurrency, threads=threads, tick=tick)


def _measure_pinned(
    path: Path,
    specs: Sequence[InputSpec],
    cfg: ProfileConfig,
    *,
    concurrency: int,
    threads: int,
    tick: Callable[[str], None],
) -> tuple[list[PointResult], SeriesLimit | None]:
    st = _Series(
        [_session(path, threads, concurrency, cfg.use_gpu) for _ in range(concurrency)], concurrency, threads
    )
    chunks = max(1, min(cfg.chunks, cfg.runs))
    per_chunk = [cfg.runs // chunks + (1 if i < cfg.runs % chunks else 0) for i in range(chunks)]
    limit = _first_pass(st, specs, cfg, per_chunk[0])
    for chunk in per_chunk[1:]:
        for batch, ts in st.times.items():
            got = _run_guarded(st.sessions, st.feeds[batch], chunk, batch)
            if not isinstance(got, str):  # an allocation failure after a success: keep what we have
                ts.extend(got)
    for batch, ts in st.times.items():
        while cfg.min_time_s > 0 and sum(ts) < cfg.min_time_s:
            got = _run_guarded(st.sessions, st.feeds[batch], cfg.runs, batch)
            if isinstance(got, str):
                break
            ts.extend(got)
    points = []
    for batch, ts in st.times.items():
        arr = np.asarray(ts)
        med = float(np.median(arr))
        p95 = float(np.percentile(arr, 95))
        peak, delta = st.mem[batch]
        points.append(
            PointResult(
                cfg.hardware,
                batch,
                concurrency,
                threads,
                med,
                p95,
                float(arr.min()),
                p95 / med,
                len(ts),
                peak,
                delta,
            )
        )
        tick(f"c={concurrency} t={threads} b={batch}")
    return points, limit


def _provenance(use_gpu: bool) -> dict[str, Any]:
    import onnxruntime as ort  # optional heavy dependency: onnxruntime

    gpu = use_gpu and "CUDAExecutionProvider" in ort.get_available_providers()
    return {
        "source": "measured",
        "host_cpu": host_cpu_model(),
        "host_cpus": os.cpu_count() or 1,
        "runtime": "onnxruntime",
        "runtime_version": ort.__version__,
        "provider": "CUDAExecutionProvider" if gpu else "CPUExecutionProvider",
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"),
        "host_load_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "cpu_pinning": hasattr(os, "sched_setaffinity"),
    }


def plan_series(cfg: ProfileConfig) -> list[tuple[int, int]]:
    """The (concurrency, threads-per-session) series a config measures."""
    total = cfg.total_threads()
    return [(concurrency, max(1, total // concurrency)) for concurrency in sorted(set(cfg.concurrency))]


def profile_onnx(
    path: str | Path,
    cfg: ProfileConfig,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    series: Sequence[tuple[int, int]] | None = None,
) -> ProfileResult:
    """Profile an ONNX file. ``series`` overrides the (concurrency, threads) pairs to measure;
    ``progress`` is called once per measured point with a short label."""
    if not cfg.batches or min(cfg.batches) < 1:
        raise ProfilesError("batches must be positive integers")
    if not cfg.concurrency or min(cfg.concurrency) < 1:
        raise ProfilesError("concurrency levels must be positive integers")
    if cfg.runs < 1:
        raise ProfilesError("runs must be at least 1")
    model_path = Path(path)
    model = load_onnx(model_path)
    specs = input_specs(model, cfg.input_shapes)
    cost = graph_cost(model, specs)
    sha = hashlib.sha256(model_path.read_bytes()).hexdigest()[:16]
    result = ProfileResult(name or model_path.stem, sha, cost, _provenance(cfg.use_gpu))
    tick = progress or (lambda _label: None)
    for concurrency, threads in series if series is not None else plan_series(cfg):
        points, limit = _measure_series(
            model_path, specs, cfg, concurrency=concurrency, threads=threads, tick=tick
        )
        result.points += points
        if limit is not None:
            result.limits.append(limit)
    return result


def profile_module(
    module: nn.Module,
    input_shape: Sequence[int],
    cfg: ProfileConfig,
    name: str = "module",
    progress: Callable[[str], None] | None = None,
) -> ProfileResult:
    """Profile a torch module: export it to ONNX (dynamic batch axis) in a temporary directory and
    measure that with onnxruntime, so torch and ONNX models are measured by the same runtime."""
    with tempfile.TemporaryDirectory(prefix="skinflint-profile-") as tmp:
        path = export_torch(module, input_shape, Path(tmp) / f"{name}.onnx")
        return profile_onnx(path, cfg, name=name, progress=progress)
