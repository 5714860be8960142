"""The fuzz suite of issue 49 in full: every hostile file of tests/hostile/bombs.py through every
command it applies to (check, legalize, build, device import) as a user types it, and one audit
over the folder of all the hostile models, each in a process of its own, measured from outside:
exit code, wall seconds, peak RSS (the process's own high-water mark from wait4, and the largest
process of its tree sampled while it runs, audit workers included).

The goal: 0 exit 3, 0 killed, 0 over 60 s, peak RSS under 2 GB for every run. This machine is
protected from what the suite measures: a run whose tree passes SAFETY_BYTES or SAFETY_SECONDS is
killed and counted as a failure.

    python benchmarks/hostile/run.py [--only NAME,...] [--commands check,build] [--out /tmp/hostile]

Writes benchmarks/hostile/results.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from rich.progress import Progress

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
from tests.hostile.bombs import all_bombs, argv_for  # noqa: E402

GOAL_SECONDS, GOAL_BYTES = 60.0, 2 << 30
SAFETY_SECONDS, SAFETY_BYTES = float(os.environ.get("HOSTILE_SAFETY_SECONDS", 180)), 6 << 30
CLI = (sys.executable, "-m", "deploycc.cli")


@dataclass
class Run:
    bomb: str
    kind: str
    command: str
    exit_code: int | None
    seconds: float
    peak_rss_mb: float
    killed: str | None  # why this suite killed it, or the signal that ended it
    message: str

    @property
    def meets_goal(self) -> bool:
        return (
            self.exit_code in (0, 1, 2)
            and self.killed is None
            and self.seconds <= GOAL_SECONDS
            and self.peak_rss_mb * (1 << 20) < GOAL_BYTES
        )


def measured(argv: list[str], cwd: Path) -> tuple[int | None, float, float, str | None, str]:
    """Exit code, seconds, peak RSS in MB, why it was killed, the last line of its stderr."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(
            argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
        watched, peak, killed, status, usage = psutil.Process(child.pid), 0, None, None, None
        while status is None:
            pid, status_word, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                status = status_word
                break
            try:
                tree = [watched, *watched.children(recursive=True)]
                peak = max(peak, *(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            elapsed = time.perf_counter() - started
            if killed is None and (peak > SAFETY_BYTES or elapsed > SAFETY_SECONDS):
                killed = (
                    f"over {SAFETY_BYTES >> 30} GB" if peak > SAFETY_BYTES else f"over {SAFETY_SECONDS:g} s"
                )
                os.killpg(child.pid, signal.SIGKILL)
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        peak = max(peak, usage.ru_maxrss * 1024 if usage else 0)
        stderr.seek(0)
        lines = [line for line in stderr.read().decode(errors="replace").splitlines() if line.strip()]
    code = child.returncode
    if code < 0:
        killed = killed or signal.Signals(-code).name
    return (
        (code if code >= 0 else None),
        seconds,
        peak / (1 << 20),
        killed,
        (lines[-1][:240] if lines else ""),
    )


def audit_run(folder: Path, models: list[Path]) -> Run:
    corpus = folder / "audit-corpus"
    corpus.mkdir()
    for model in models:
        shutil.copy(model, corpus / model.name)
    argv = [
        *CLI,
        "audit",
        str(corpus),
        "--target",
        "ort-cpu",
        "--target",
        "jetson-nano",
        "-o",
        str(folder / "audit-out"),
        "--jobs",
        "2",
    ]
    code, seconds, peak, killed, message = measured(argv, folder)
    return Run(
        f"{len(models)} models", "audit", "audit", code, round(seconds, 2), round(peak, 1), killed, message
    )


def markdown(runs: list[Run]) -> str:
    bad = [run for run in runs if not run.meets_goal]
    kinds = sorted({run.kind for run in runs})
    lines = [
        f"{len(runs)} runs of {len({r.bomb for r in runs})} hostile files; "
        f"exit 3: {sum(r.exit_code == 3 for r in runs)}, killed: {sum(r.killed is not None for r in runs)}, "
        f"over {GOAL_SECONDS:g} s: {sum(r.seconds > GOAL_SECONDS for r in runs)}, "
        f"peak RSS over 2 GB: {sum(r.peak_rss_mb * (1 << 20) >= GOAL_BYTES for r in runs)}; "
        f"largest peak RSS {max(r.peak_rss_mb for r in runs):.0f} MB, "
        f"longest {max(r.seconds for r in runs):.1f} s.",
        "",
        "| class | files | runs | exit 0 / 1 / 2 / 3 | killed | max s | max RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        some = [r for r in runs if r.kind == kind]
        codes = " / ".join(str(sum(r.exit_code == c for r in some)) for c in (0, 1, 2, 3))
        lines.append(
            f"| {kind} | {len({r.bomb for r in some})} | {len(some)} | {codes} | "
            f"{sum(r.killed is not None for r in some)} | {max(r.seconds for r in some):.1f} | "
            f"{max(r.peak_rss_mb for r in some):.0f} |"
        )
    lines += ["", "| file | command | exit | s | RSS MB | message |", "|---|---|---|---|---|---|"]
    for run in sorted(runs, key=lambda r: (r.meets_goal, r.kind, r.bomb, r.command)):
        flag = "" if run.meets_goal else " **(fails the goal)**"
        message = run.message.replace("|", "\\|")
        lines.append(
            f"| {run.bomb}{flag} | {run.command} | {run.exit_code if run.killed is None else run.killed} | "
            f"{run.seconds:.1f} | {run.peak_rss_mb:.0f} | {message} |"
        )
    return "\n".join(lines) + ("\n" if not bad else "\n\nRuns failing the goal: " + str(len(bad)) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated bomb names")
    parser.add_argument("--commands", default="check,legalize,build,device-import,audit")
    parser.add_argument("--out", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--results", type=Path, default=HERE / "results")
    args = parser.parse_args()
    commands = args.commands.split(",")
    bombs = [b for b in all_bombs() if not args.only or b.name in args.only.split(",")]
    folder = args.out or Path(tempfile.mkdtemp(prefix="deploycc-hostile-"))
    folder.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    models: list[Path] = []
    planned = [(b, c) for b in bombs for c in b.commands if c in commands]
    with Progress() as progress:
        task = progress.add_task("hostile files", total=len(planned) + ("audit" in commands))
        written: dict[str, Path] = {}
        for bomb, command in planned:
            if bomb.name not in written:
                written[bomb.name] = bomb.write(folder)
                if bomb.kind in ("memory", "time", "declared-size", "malformed"):
                    models.append(written[bomb.name])
            progress.update(task, description=f"{bomb.name} {command}")
            code, seconds, peak, killed, message = measured(
                argv_for(bomb, written[bomb.name], command, folder, CLI), folder
            )
            runs.append(
                Run(bomb.name, bomb.kind, command, code, round(seconds, 2), round(peak, 1), killed, message)
            )
            progress.advance(task)
        if "audit" in commands and models:
            progress.update(task, description="audit")
            runs.append(audit_run(folder, models))
            progress.advance(task)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.results}.json").write_text(json.dumps([asdict(run) for run in runs], indent=1) + "\n")
    Path(f"{args.results}.md").write_text(markdown(runs))
    print(markdown(runs).split("\n\n")[0])


if __name__ == "__main__":
    main()
