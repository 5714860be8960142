"""The conditions that make a latency number meaningful, recorded with it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

GOVERNOR = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _command(*args: str) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    try:
        result = subprocess.run(list(args), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (result.stdout or result.stderr).strip() or None


def jetson_conditions() -> tuple[dict[str, str], list[str]]:
    """nvpmodel power mode and jetson_clocks state (with a warning when clocks are not locked)."""
    facts: dict[str, str] = {}
    warnings: list[str] = []
    mode = _command("nvpmodel", "-q")
    if mode is None:
        return facts, warnings
    facts["nvpmodel"] = " ".join(mode.split())
    clocks = _command("jetson_clocks", "--show")
    if clocks is None:
        warnings.append("jetson_clocks not found: clock state unknown, numbers may vary between runs")
    else:
        locked = "MinFreq" in clocks and all(
            line.split("MinFreq=")[1].split()[0] == line.split("MaxFreq=")[1].split()[0]
            for line in clocks.splitlines() if "MinFreq=" in line and "MaxFreq=" in line)
        facts["jetson_clocks"] = "on" if locked else "off"
        if not locked:
            warnings.append("clocks are not locked (run `sudo jetson_clocks`): latency will vary with DVFS")
    return facts, warnings


def conditions(threads: int | None, backend_versions: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    facts = {
        "cpu": cpu_model(),
        "cpu_count": str(os.cpu_count()),
        "machine": platform.machine(),
        "governor": _read(GOVERNOR) or "n/a: no cpufreq in this kernel/container",
        "threads": str(threads) if threads else "backend default",
        **backend_versions,
    }
    warnings = []
    if facts["governor"] not in ("performance", ) and not facts["governor"].startswith("n/a"):
        warnings.append(f"CPU governor is '{facts['governor']}', not 'performance': expect more variance")
    jetson, jetson_warnings = jetson_conditions()
    facts.update(jetson)
    return facts, warnings + jetson_warnings
