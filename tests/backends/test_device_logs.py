"""Parsers of what the board's tools print, on verbatim output quoted from public sources (each
cited), and trtexec's flags per TensorRT release as its sampleOptions.cpp spells them."""

from __future__ import annotations

import pytest

from deploycc.device.bundle import trtexec_flags
from deploycc.device.logs import parse_tegrastats, parse_trtexec_summary, summarize_tegrastats

# TensorRT 8.0-8.4 layout, one percentile: https://github.com/NVIDIA/TensorRT/issues/1221
SUMMARY_SINGLE_PERCENTILE = """\
[06/23/2021-13:24:48] [I] === Performance summary ===
[06/23/2021-13:24:48] [I] Throughput: 1.57184 qps
[06/23/2021-13:24:48] [I] Latency: min = 634.644 ms, max = 638.123 ms, mean = 636.196 ms, \
median = 636.003 ms, percentile(99%) = 638.123 ms
"""
# TensorRT 8.5+ layout, three percentiles: https://github.com/NVIDIA/TensorRT/issues/3083 (summary,
# latency) and https://github.com/NVIDIA/TensorRT/issues/4177 (GPU compute time, walltime).
SUMMARY_THREE_PERCENTILES = """\
[06/26/2023-11:30:51] [I] === Performance summary ===
[06/26/2023-11:30:51] [I] Throughput: 234.19 qps
[06/26/2023-11:30:51] [I] Latency: min = 4.27838 ms, max = 5.82495 ms, mean = 4.29966 ms, \
median = 4.29718 ms, percentile(90%) = 4.30725 ms, percentile(95%) = 4.31128 ms, percentile(99%) = 4.32874 ms
[10/03/2024-10:47:59] [I] GPU Compute Time: min = 5.34595 ms, max = 13.3388 ms, mean = 7.58404 ms, \
median = 7.14139 ms, percentile(90%) = 10.2881 ms, percentile(95%) = 10.8175 ms, percentile(99%) = 12.9485 ms
[10/03/2024-10:47:59] [I] Total Host Walltime: 3.00082 s
"""


def test_trtexec_summary_with_one_percentile() -> None:
    summary = parse_trtexec_summary("[I] build log...\n" + SUMMARY_SINGLE_PERCENTILE)
    assert summary["throughput_qps"] == 1.57184
    assert summary["latency"] == {"min_ms": 634.644, "max_ms": 638.123, "mean_ms": 636.196,
                                  "median_ms": 636.003, "percentiles_ms": {"99": 638.123}}


def test_trtexec_summary_with_three_percentiles() -> None:
    summary = parse_trtexec_summary(SUMMARY_THREE_PERCENTILES)
    assert summary["throughput_qps"] == 234.19
    assert summary["latency"]["percentiles_ms"] == {"90": 4.30725, "95": 4.31128, "99": 4.32874}
    assert summary["gpu_compute_time"]["median_ms"] == 7.14139
    assert parse_trtexec_summary("[I] Engine built.\n") == {}  # --buildOnly: no summary


# JetPack 4.6.1 on a Nano: waggle-sensor/jetson-exporter pkg/tegrastats/tegrastats_test.go (3e88270)
NANO_JP4 = ("RAM 1923/3964MB (lfb 2x2MB) SWAP 191/1982MB (cached 6MB) IRAM 0/252kB(lfb 252kB) "
            "CPU [5%@1224,4%@1224,3%@1224,6%@1224] EMC_FREQ 0%@1600 GR3D_FREQ 0%@76 APE 25 PLL@37C CPU@40C "
            "PMIC@50C GPU@40C AO@45C thermal@40C POM_5V_IN 1750/1628 POM_5V_GPU 0/0 POM_5V_CPU 366/406")
# JetPack 5.1.2 on a Xavier NX: the same test file
XAVIER_JP5 = ("07-09-2024 13:31:31 RAM 3168/6851MB (lfb 2x4MB) SWAP 161/3426MB (cached 0MB) "
              "CPU [23%@1397,17%@1192,16%@1190,13%@1190,23%@1190,10%@1190] EMC_FREQ 2%@204 "
              "GR3D_FREQ 0%@[114] "
              "VIC_FREQ 115 APE 150 AUX@45C CPU@46.5C thermal@45.6C AO@45C GPU@45.5C PMIC@50C "
              "VDD_IN 2763mW/2846mW VDD_CPU_GPU_CV 650mW/670mW VDD_SOC 650mW/711mW")


@pytest.mark.parametrize(("line", "ram", "rails"), [
    (NANO_JP4, (1923, 3964), {"POM_5V_IN": (1750, 1628), "POM_5V_GPU": (0, 0), "POM_5V_CPU": (366, 406)}),
    (XAVIER_JP5, (3168, 6851), {"VDD_IN": (2763, 2846), "VDD_CPU_GPU_CV": (650, 670), "VDD_SOC": (650, 711)}),
])
def test_tegrastats_lines_of_jetpack_4_and_5(line: str, ram: tuple[int, int], rails: dict) -> None:
    sample = parse_tegrastats(line)
    assert (sample["ram_used_mb"], sample["ram_total_mb"]) == ram and sample["gr3d_percent"] == 0
    assert {name: (v["current_mw"], v["average_mw"]) for name, v in sample["power_mw"].items()} == rails


def test_tegrastats_summary_over_a_run() -> None:
    busy = NANO_JP4.replace("GR3D_FREQ 0%@76", "GR3D_FREQ 98%@921").replace("POM_5V_IN 1750/1628",
                                                                           "POM_5V_IN 4250/2900")
    summary = summarize_tegrastats([NANO_JP4, busy, "garbage"])
    assert summary["samples"] == 2 and summary["gr3d_mean_percent"] == 49.0
    assert summary["power_mean_mw"]["POM_5V_IN"] == 3000.0 and summary["ram_peak_mb"] == 1923


@pytest.mark.parametrize(("version", "workspace", "build_only", "streams"), [
    # samples/common/sampleOptions.cpp at each tag (line numbers of the flags there)
    ("8.2.1", "--workspace=1024", "--buildOnly", "--streams=2"),  # 8.2.1 l.574, 802, 785
    ("8.4.3", "--memPoolSize=workspace:1024", "--buildOnly", "--streams=2"),   # 8.4.3 l.698, 750
    ("8.5.2", "--memPoolSize=workspace:1024", "--buildOnly", "--streams=2"),   # 8.5.3 l.849
    ("8.6.1", "--memPoolSize=workspace:1024", "--skipInference", "--infStreams=2"),  # v8.6.1 l.968
    ("10.0.1", "--memPoolSize=workspace:1024", "--skipInference", "--infStreams=2"),  # v10.0.1 l.1228
])
def test_trtexec_flags_per_release(version: str, workspace: str, build_only: str, streams: str) -> None:
    flags = trtexec_flags(version)
    assert flags["workspace"].format(1024) == workspace
    assert flags["build_only"] == build_only and flags["streams"].format(2) == streams
