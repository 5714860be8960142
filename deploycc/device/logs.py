"""What the board's tools print, read back on the host: trtexec's performance summary (for a
board without the TensorRT Python bindings, where run_on_device.sh times the engine with
trtexec) and tegrastats lines (RAM, GPU load, power rails) sampled while the runner times it.

trtexec (samples/common/sampleReporting.cpp): from 8.0 the summary is a `=== Performance summary
===` block of `Name: min = X ms, max = X ms, mean = X ms, median = X ms, percentile(P%) = X ms`
lines, one percentile (99) up to 8.4 and three (90, 95, 99) from 8.5, after a
`[MM/DD/YYYY-HH:MM:SS] [I] ` prefix. tegrastats: JetPack 4 prints power rails as `NAME cur/avg`
in mW without a unit and GR3D as `X%@F`; JetPack 5 and 6 add a `MM-DD-YYYY HH:MM:SS` prefix, write
`NAME curmW/avgmW`, and GR3D as `X%@[F]` or `X%@[F,F]`.
"""

from __future__ import annotations

import re
from typing import Any

# The board's logs are input: a number is read only where it is one Python reads ("..." or
# "1e5e5" would raise), and an integer has at most 12 digits (int() refuses 4,300 and more).
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_STAT = re.compile(rf"(min|max|mean|median) = ({_NUMBER}) ms|"
                   rf"percentile\((\d{{1,3}}(?:\.\d{{1,6}})?)%\) = ({_NUMBER}) ms")
_LINE = re.compile(r"(?:\[[^\]]*\]\s*)*(Latency|GPU Compute Time|Enqueue Time|H2D Latency|D2H Latency|"
                   r"End-to-End Host Latency): (.*)$")
_THROUGHPUT = re.compile(rf"Throughput: ({_NUMBER}) qps")


def _stats(text: str) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for name, value, percent, percent_value in _STAT.findall(text):
        if name:
            stats[f"{name}_ms"] = float(value)
        else:
            stats.setdefault("percentiles_ms", {})[percent] = float(percent_value)
    return stats


def parse_trtexec_summary(log: str) -> dict[str, Any]:
    """The last performance summary in a trtexec log: throughput, and per measured quantity
    (latency, GPU compute time, ...) min/max/mean/median and the percentiles it printed."""
    start = log.rfind("=== Performance summary ===")
    if start < 0:
        return {}
    summary: dict[str, Any] = {}
    for line in log[start:].splitlines()[1:]:
        throughput = _THROUGHPUT.search(line)
        if throughput:
            summary["throughput_qps"] = float(throughput.group(1))
            continue
        match = _LINE.search(line.strip())
        if match:
            key = match.group(1).lower().replace(" ", "_").replace("-", "_")
            summary[key] = _stats(match.group(2))
        elif "===" in line:  # the next section
            break
    return summary


_POWER = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d{1,12})(?:mW)?/(\d{1,12})(?:mW)?\b")
_RAM = re.compile(r"\bRAM (\d{1,12})/(\d{1,12})MB")
_GR3D = re.compile(r"\bGR3D_FREQ (\d{1,12})%")


def parse_tegrastats(line: str) -> dict[str, Any]:
    """One tegrastats line: RAM used and total (MB), GPU load (%), and every power rail's
    current and average (mW), in the JetPack 4 and the JetPack 5/6 formats."""
    sample: dict[str, Any] = {}
    ram = _RAM.search(line)
    if ram:
        sample["ram_used_mb"], sample["ram_total_mb"] = int(ram.group(1)), int(ram.group(2))
    gpu = _GR3D.search(line)
    if gpu:
        sample["gr3d_percent"] = int(gpu.group(1))
    rails = {name: {"current_mw": int(now), "average_mw": int(mean)}
             for name, now, mean in _POWER.findall(line) if name not in ("RAM", "SWAP", "IRAM")}
    if rails:
        sample["power_mw"] = rails
    return sample


def summarize_tegrastats(lines: list[str]) -> dict[str, Any]:
    """Peak RAM, mean GPU load and mean power per rail over the samples taken while timing."""
    samples = [parse_tegrastats(line) for line in lines]
    samples = [s for s in samples if s]
    if not samples:
        return {}
    summary: dict[str, Any] = {"samples": len(samples)}
    rams = [s["ram_used_mb"] for s in samples if "ram_used_mb" in s]
    if rams:
        summary["ram_peak_mb"] = max(rams)
    loads = [s["gr3d_percent"] for s in samples if "gr3d_percent" in s]
    if loads:
        summary["gr3d_mean_percent"] = round(sum(loads) / len(loads), 1)
    rails: dict[str, list[int]] = {}
    for sample in samples:
        for name, values in sample.get("power_mw", {}).items():
            rails.setdefault(name, []).append(values["current_mw"])
    if rails:
        summary["power_mean_mw"] = {name: round(sum(v) / len(v), 1) for name, v in rails.items()}
    return summary


# The rail that carries the whole module's input power, by tegrastats' names: VDD_IN on Orin and
# Xavier NX (JetPack 5/6), POM_5V_IN on the Nano (JetPack 4); AGX Xavier reports only its parts
BOARD_RAILS = ("VDD_IN", "POM_5V_IN")


def board_power_mw(summary: dict[str, Any]) -> tuple[str, float] | None:
    """(the rail, its mean mW) of the module's input power in a summarize_tegrastats summary; the
    sum of every rail, named so, where the board reports no input rail; None without rails."""
    rails = summary.get("power_mean_mw") or {}
    if not rails:
        return None
    for name in BOARD_RAILS:
        if name in rails:
            return name, float(rails[name])
    return "the sum of " + ", ".join(sorted(rails)), float(sum(rails.values()))
