"""Model runtimes: onnxruntime (its CPU execution provider on a CPU class, its CUDA provider on a GPU
class) and an emulated runtime that sleeps the profile's duration and labels every result
``"emulated": true`` (GPU classes on a machine without a GPU). :func:`make_runtime` picks one from an
assignment. Every real result says which provider and device produced it (an emulated one says it
is emulated, and on which class).

A GPU class is served through the CUDA provider or not at all: :class:`OnnxRuntime` asks for that
provider alone and checks, once the session is made, that it is the one running;
otherwise it raises :class:`ProviderError` (onnxruntime would silently run the model on the CPU), and
the instance agent claims no slot (``workers.onsite.check_providers``)."""

from __future__ import annotations

import os
import subprocess
import time
from io import BytesIO
from typing import TYPE_CHECKING, Any, Protocol

from core.settings import worker_max_pixels_from_env
from workers.crops import region_box
from workers.errors import WorkerError

if TYPE_CHECKING:
    import numpy as np

    from core.schema import Assignment

__all__ = [
    "CPU_PROVIDER",
    "CUDA_PROVIDER",
    "EmulatedRuntime",
    "OnnxRuntime",
    "ProviderError",
    "Runtime",
    "decode_frame",
    "device_name",
    "fit_frame",
    "make_runtime",
]

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"


class ProviderError(WorkerError):
    """The execution provider a runtime asked for is not the one running (or not installed): the
    instance must not serve with it. Carries what was asked for, what runs and what is installed."""

    def __init__(self, wanted: str, running: list[str], available: list[str]):
        self.wanted, self.running, self.available = wanted, list(running), list(available)
        super().__init__(
            f"onnxruntime runs {', '.join(running) or 'nothing'} where {wanted} was asked for "
            f"(installed: {', '.join(available) or 'none'})"
        )


def device_name(gpu: bool, device_id: int = 0) -> str:
    """What results name as their device: ``cuda:<id> <GPU name>`` (nvidia-smi's, when it answers)
    or ``cpu <CPU model>`` (``/proc/cpuinfo``)."""
    if gpu:
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--id={device_id}", "--query-gpu=name", "--format=csv,noheader"],
                check=False,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        return f"cuda:{device_id} {out}".strip()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return f"cpu {line.split(':', 1)[1].strip()} ({os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"cpu ({os.cpu_count()} CPUs)"


class Runtime(Protocol):
    emulated: bool

    def prepare(self, data: bytes, region: list[float] | None) -> Any:
        """Decode and pre-process one request's input (runs before the batch)."""

    def run(self, inputs: list[Any]) -> list[dict[str, Any]]:
        """Run one batch; one output dict per input."""


def decode_frame(
    data: bytes, region: list[float] | None, size: tuple[int, int], max_pixels: int | None = None
) -> np.ndarray:
    """JPEG/PNG bytes -> float32 HxWx3 in [0, 1], cropped to ``region`` (fractions) and resized. A
    frame whose header names more than ``max_pixels`` (default ``SKINFLINT_WORKER_MAX_PIXELS``, the
    front's cap) is refused before it is decoded (ValueError: its request fails, and on its last
    receive it is recorded dropped with the reason)."""
    # PIL loads here, not at import: only a real model (or a worker cutting its children's crops,
    # workers/crops.py) decodes frames
    from PIL import Image

    cap = worker_max_pixels_from_env() if max_pixels is None else max_pixels
    try:
        img = Image.open(BytesIO(data))  # reads the header only
    except Image.DecompressionBombError as exc:  # past Pillow's own cap (179 MP): never decoded
        raise ValueError(f"a frame over the worker's cap of {cap:,} pixels: {exc}") from exc
    with img:
        width, height = img.size
        if width * height > cap:
            raise ValueError(f"a frame of {width}x{height} pixels is over the worker's cap of {cap:,} pixels")
        return fit_frame(img.convert("RGB"), region, size)


def fit_frame(rgb: Any, region: list[float] | None, size: tuple[int, int]) -> np.ndarray:
    """A decoded RGB image (PIL) -> float32 HxWx3 in [0, 1], cropped to ``region`` and resized."""
    import numpy as np  # as in decode_frame: real models only
    from PIL import Image

    if region:
        rgb = rgb.crop(region_box(region, *rgb.size))
    rgb = rgb.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return np.asarray(rgb, dtype=np.float32) / 255.0


class EmulatedRuntime:
    """Sleeps the planned batch duration; results say ``emulated``. Never pretends to be real."""

    emulated = True

    def __init__(self, duration_s: float, hardware: str, sleep: Any = time.sleep):
        self.duration_s = duration_s
        self.hardware = hardware
        self._sleep = sleep

    def prepare(self, data: bytes, region: list[float] | None) -> Any:
        return len(data)

    def run(self, inputs: list[Any]) -> list[dict[str, Any]]:
        self._sleep(self.duration_s)
        return [{"emulated": True, "hardware": self.hardware} for _ in inputs]


class OnnxRuntime:
    """A real ONNX model. The first input is the image batch (NCHW or NHWC, float32); each row of
    the first output is summarised as its arg-max and max, with the provider and device that ran it.

    ``gpu``: the hardware class is a GPU: the session gets the CUDA provider alone (device
    ``device_id``), and :class:`ProviderError` is raised when it is not installed or not the provider
    the session runs; otherwise the CPU provider alone. ``ort`` replaces the onnxruntime module (tests
    check the selection and the refusal with a fake)."""

    emulated = False

    def __init__(
        self,
        model_path: str,
        threads: int = 1,
        *,
        gpu: bool = False,
        device_id: int = 0,
        device: str | None = None,
        ort: Any = None,
    ):
        if ort is None:
            import onnxruntime  # the heaviest import of a worker: only when a real model loads

            ort = onnxruntime

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        wanted = CUDA_PROVIDER if gpu else CPU_PROVIDER
        available = list(ort.get_available_providers())
        if wanted not in available:
            raise ProviderError(wanted, [], available)
        providers: list[Any] = [(CUDA_PROVIDER, {"device_id": device_id})] if gpu else [CPU_PROVIDER]
        self.session = ort.InferenceSession(model_path, sess_options=opts, providers=providers)
        running = list(self.session.get_providers())
        # onnxruntime falls back to the CPU provider when CUDA cannot start (a driver or library
        # mismatch) and only logs it: what the session runs first is what serves
        if not running or running[0] != wanted:
            raise ProviderError(wanted, running, available)
        self.provider = wanted
        self.device = device if device is not None else device_name(gpu, device_id)
        inp = self.session.get_inputs()[0]
        self.input_name = inp.name
        dims = [dim if isinstance(dim, int) and dim > 0 else None for dim in inp.shape[1:]]
        self.channels_first = len(dims) == 3 and dims[0] in (1, 3)
        if len(dims) == 3:
            h, w = (dims[1], dims[2]) if self.channels_first else (dims[0], dims[1])
            self.size = (h or 224, w or 224)
            self.channels = (dims[0] if self.channels_first else dims[2]) or 3
        else:
            self.size = (1, int(dims[0] or 3) // 3 or 1)
            self.channels = 3
        self.flat = len(dims) != 3
        self.flat_len = int(dims[0] or 3) if self.flat else 0

    def prepare(self, data: bytes, region: list[float] | None) -> Any:
        import numpy as np  # as in decode_frame: real models only

        if self.flat:
            arr = decode_frame(data, region, (8, 8)).reshape(-1)
            return np.resize(arr, self.flat_len).astype(np.float32)
        return self._layout(decode_frame(data, region, self.size))

    def prepare_frame(self, rgb: Any, region: list[float] | None) -> Any:
        """As :meth:`prepare`, from an image the worker already decoded (PIL RGB, under the pixel
        cap: :func:`workers.crops.open_frame`): the frame is decoded once for the model and for the
        children's crops."""
        import numpy as np  # as in decode_frame: real models only

        if self.flat:
            arr = fit_frame(rgb, region, (8, 8)).reshape(-1)
            return np.resize(arr, self.flat_len).astype(np.float32)
        return self._layout(fit_frame(rgb, region, self.size))

    def _layout(self, arr: Any) -> Any:
        if self.channels == 1:
            arr = arr.mean(axis=2, keepdims=True)
        return arr.transpose(2, 0, 1) if self.channels_first else arr

    def warm_up(self, batch: int, runs: int = 2) -> float:
        """Run the model ``runs`` times on a blank batch of ``batch`` frames decoded like a request's
        (onnxruntime's first runs allocate its memory arena, PIL loads its codecs): a share is
        ready only after this, so its first real batch takes its profiled time. Returns the
        seconds it took."""
        from PIL import Image  # as in decode_frame: real models only

        t0 = time.perf_counter()
        buf = BytesIO()
        Image.new("RGB", (64, 48)).save(buf, format="JPEG")
        prepared = self.prepare(buf.getvalue(), None)
        for _ in range(max(1, runs)):
            self.run([prepared] * max(1, batch))
        return time.perf_counter() - t0

    def run(self, inputs: list[Any]) -> list[dict[str, Any]]:
        import numpy as np  # as in decode_frame: real models only

        batch = np.stack(inputs).astype(np.float32)
        out = self.session.run(None, {self.input_name: batch})[0]
        rows = np.asarray(out).reshape(len(inputs), -1)
        labels = rows.argmax(axis=1)
        return [
            {
                "label": int(lbl),
                "score": round(float(row[lbl]), 5),
                "provider": self.provider,
                "device": self.device,
            }
            for lbl, row in zip(labels, rows, strict=True)
        ]


def make_runtime(assignment: Assignment, warm_up: bool = True, *, gpu: bool = False) -> Runtime:
    """The assignment's runtime; a real model is warmed up at the assignment's batch size first.
    ``gpu``: the assignment's hardware class is a GPU (the CUDA provider or :class:`ProviderError`)."""
    if assignment.runtime == "onnx" and assignment.model_path:
        rt = OnnxRuntime(assignment.model_path, threads=assignment.threads, gpu=gpu)
        if warm_up:
            rt.warm_up(assignment.batch)
        return rt
    seconds = assignment.model_s if assignment.model_s is not None else assignment.duration_s
    return EmulatedRuntime(seconds, assignment.hardware)
