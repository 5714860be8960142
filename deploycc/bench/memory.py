"""Memory while a model loads and runs: peak resident memory of this process and its increment
over the pre-load baseline; device memory through NVML on NVIDIA dGPUs; on Jetson, where NVML
says "not supported", the unified memory and power rails from tegrastats. A figure that cannot
be measured is None with the reason, never a made-up zero.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from deploycc.budget import status_kib

CLEAR_REFS = Path("/proc/self/clear_refs")


def rss_bytes() -> int | None:
    kib = status_kib("VmRSS")
    return None if kib is None else kib * 1024


def address_space_bytes() -> int | None:
    """What this process has mapped (VmSize): what RLIMIT_AS counts."""
    kib = status_kib("VmSize")
    return None if kib is None else kib * 1024


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) so it covers only what follows (Linux >= 4.0)."""
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


@dataclass
class MemoryReport:
    baseline_rss_bytes: int | None = None
    peak_rss_bytes: int | None = None
    increment_rss_bytes: int | None = None
    rss_method: str = ""
    device_memory_bytes: int | None = None
    device_memory_method: str = ""
    device_memory_unavailable: str | None = None
    power_mw: dict[str, int] = field(default_factory=dict)


class RssPeak:
    """Peak RSS over a block: the kernel's VmHWM after a reset, else a 2 ms sampling thread."""

    def __init__(self) -> None:
        self.report = MemoryReport()
        self._stop = threading.Event()
        self._sampled = 0
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RssPeak:
        self.report.baseline_rss_bytes = rss_bytes()
        if reset_peak():
            self.report.rss_method = "VmHWM after clear_refs"
        else:
            self.report.rss_method = "VmRSS sampled every 2 ms"
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._sampled = max(self._sampled, rss_bytes() or 0)
            time.sleep(0.002)

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            peak = self._sampled or None
        else:
            kib = status_kib("VmHWM")
            peak = None if kib is None else kib * 1024
        report = self.report
        report.peak_rss_bytes = peak
        if peak is not None and report.baseline_rss_bytes is not None:
            report.increment_rss_bytes = max(0, peak - report.baseline_rss_bytes)


def nvml_process_memory(pid: int | None = None) -> tuple[int | None, str]:
    """Device memory this process holds, by NVML; (None, why) where NVML cannot say."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install 'deploycc[nvidia]')"
    pid = os.getpid() if pid is None else pid
    try:
        pynvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"NVML unavailable: {error}"
    try:
        total, found = 0, False
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except pynvml.NVMLError_NotSupported:
                return None, "NVML reports 'not supported' for per-process memory (Jetson: use tegrastats)"
            for process in processes:
                if process.pid == pid and process.usedGpuMemory is not None:
                    total += process.usedGpuMemory
                    found = True
        return (total, "NVML per-process usedGpuMemory") if found else \
            (None, "this process holds no memory on an NVIDIA device")
    finally:
        pynvml.nvmlShutdown()


def parse_tegrastats(line: str) -> tuple[int | None, dict[str, int]]:
    """(used unified memory in bytes, {rail: current mW}) from one tegrastats line, as the device
    loop reads the board's lines (device/logs.py: the JetPack 4 format, whose rails carry no unit,
    and the JetPack 5/6 one)."""
    from deploycc.device.logs import parse_tegrastats as parse_line

    sample = parse_line(line)
    used = sample.get("ram_used_mb")
    rails = {name: values["current_mw"] for name, values in sample.get("power_mw", {}).items()}
    return (int(used) << 20 if used is not None else None), rails


class Tegrastats:
    """Samples tegrastats (Jetson) during a block: peak unified memory, peak power per rail."""

    def __init__(self, interval_ms: int = 100) -> None:
        self.available = shutil.which("tegrastats") is not None
        self.interval_ms = interval_ms
        self.peak_memory: int | None = None
        self.peak_power: dict[str, int] = {}
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Tegrastats:
        if self.available:
            self._process = subprocess.Popen(["tegrastats", "--interval", str(self.interval_ms)],
                                             stdout=subprocess.PIPE, text=True)
            self._thread = threading.Thread(target=self._read, daemon=True)
            self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            used, rails = parse_tegrastats(line)
            if used is not None:
                self.peak_memory = max(self.peak_memory or 0, used)
            for rail, milliwatts in rails.items():
                self.peak_power[rail] = max(self.peak_power.get(rail, 0), milliwatts)

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=5)
