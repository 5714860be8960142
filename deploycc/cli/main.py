"""`deploycc` entry point: the command group, lazy subcommands, errors and exit codes.

Exit codes: 0 success; 1 findings (illegal nodes, failed verification); 2 unusable input or
options, or a full disk; 3 an internal error (a bug: rerun with --debug and report it).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from typing import Any, NoReturn

import click

from deploycc.errors import EXIT_USAGE, DeployccError
from deploycc.io.files import disk_full

EXIT_INTERNAL = 3

# name -> "module:attribute"; modules are imported only when their command runs, so
# `deploycc --help` stays fast and loads no backend.
COMMANDS = {
    "targets": ("deploycc.cli.targets_cmd:targets", "List deployment targets, or show one in full."),
    "inspect": ("deploycc.cli.inspect_cmd:inspect_command", "Look inside an ONNX model."),
    "audit": ("deploycc.cli.audit_cmd:audit_command",
              "The conversion-success matrix of many models across targets."),
    "bench": ("deploycc.cli.bench_cmd:bench_command",
              "Latency, throughput, memory and FLOPs of a build's engine or a model as-is."),
    "build": ("deploycc.cli.build_cmd:build_command",
              "Legalize, build the target's engine, verify it: one deployable directory."),
    "check": ("deploycc.cli.check_cmd:check_command", "Judge every node of a model against targets."),
    "device": ("deploycc.cli.device_cmd:device_command",
               "Results from the device: import the result.json the bundle's runner wrote."),
    "legalize": ("deploycc.cli.legalize_cmd:legalize_command",
                 "Rewrite a model into one a target accepts, proving every rewrite."),
    "probe": ("deploycc.cli.probe_cmd:probe_command",
              "What a backend really runs: the ONNX conformance cases, raw and legalized."),
    "rules": ("deploycc.cli.rules_cmd:rules_command", "List the rewrite rule catalog."),
    "run": ("deploycc.cli.run_cmd:run_command", "Run a partitioned model's segments in order."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attribute = COMMANDS[cmd_name][0].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit codes: 0 ok, 1 findings (illegal/failed), 2 bad input or options (or a full disk), "
                    "3 internal error.")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
@click.option("--memory-budget", metavar="SIZE",
              help="Memory a command may use (4G, 512M): what it makes is checked against it first, and "
                   "the process is capped at it. Default: 1 GiB plus 128 times the model's bytes and 64 "
                   "times its inputs', at most half the machine's memory.")
@click.option("--run-seconds", type=click.FloatRange(min=1), metavar="S",
              help="Seconds one run of the model may take. Default: 20 plus 1 per 5 MB of model.")
@click.version_option(package_name="deploycc")
@click.pass_context
def cli(ctx: click.Context, debug: bool, memory_budget: str | None, run_seconds: float | None) -> None:
    """deploycc: a target-aware deployment compiler driver for ONNX models."""
    from deploycc import budget

    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if memory_budget is not None:  # the environment carries them to an audit's cells
        try:
            os.environ[budget.MEMORY_ENV] = str(budget.parse_size(memory_budget))
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--memory-budget") from None
    if run_seconds is not None:
        os.environ[budget.RUN_SECONDS_ENV] = str(run_seconds)
    budget.enable_ceiling()


_MAIN_PID = os.getpid()
# The signal that ended the command, once one did: the Terminated it raises can come back as
# another error (Python wraps one raised while a class is made in a RuntimeError, and a library
# calling back into Python may too), which must still end the command as interrupted (130).
_SIGNALLED: list[int] = []


def _terminate(signum: int, frame: Any) -> None:
    from deploycc.errors import Terminated

    if os.getpid() != _MAIN_PID:  # a forked helper (a library's subprocess) just ends, quietly
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _SIGNALLED.append(signum)
    raise Terminated(f"terminated by signal {signum}")


def _exit_if_signalled() -> None:
    if _SIGNALLED:  # the command may have finished its output: whole, or not there at all
        _interrupted(f"terminated by signal {_SIGNALLED[0]}", "no partial output is left")


def _interrupted(reason: str, outcome: str = "nothing was written") -> NoReturn:
    """Exit 130 once the staging folders are gone (they were, on the way out here), without the
    interpreter's teardown: a runtime's worker threads still busy in the interrupted call crashed it
    there (SIGSEGV after a SIGTERM mid-build)."""
    click.echo(f"deploycc: {reason}; {outcome}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def main(argv: list[str] | None = None) -> Any:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    if not debug:
        # The graph libraries log what they pass over ("Skipping constant folding for op Split with
        # multiple outputs", on stderr for every such node): notes for their developers, not
        # findings of deploycc's. --debug shows them.
        for library in ("onnxscript", "onnx_ir"):
            logging.getLogger(library).setLevel(logging.ERROR)
    # SIGTERM unwinds like Ctrl-C, so every command's staging files are removed on the way out.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as KeyboardInterrupt, always
    try:
        code = cli.main(args=args, prog_name="deploycc", standalone_mode=False)
    except DeployccError as error:
        _exit_if_signalled()  # a signal's Terminated, wrapped in another error on its way out
        if debug:
            raise
        click.echo(f"deploycc: error: {error.for_cli()}", err=True)
        sys.exit(error.exit_code)
    except click.exceptions.Abort:
        click.echo("deploycc: aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        if debug:
            raise
        click.echo(f"deploycc: error: {error.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (errors.Terminated)
        _interrupted(str(interrupt) or "interrupted")
    except MemoryError:  # past the ceiling budget.enable_ceiling set: the model asked too much
        if debug:
            raise
        from deploycc import budget

        click.echo(f"deploycc: error: {budget.out_of_memory('this command').for_cli()}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as error:
        _exit_if_signalled()
        if debug:
            raise
        if not disk_full(error):
            _internal(error)
        # the machine's, not deploycc's: an audit that filled the disk said "internal error"
        where = f" writing {error.filename}" if error.filename else ""
        click.echo(f"deploycc: error: {error.strerror}{where}: free some space or write elsewhere "
                   "(--output)", err=True)
        sys.exit(EXIT_USAGE)
    except Exception as error:
        _exit_if_signalled()
        if debug:
            raise
        _internal(error)
    _exit_if_signalled()  # a signal's Terminated, caught on its way out as a stage's failure
    sys.exit(code if isinstance(code, int) else 0)


def _internal(error: Exception) -> NoReturn:
    first = str(error).splitlines()[0] if str(error) else ""
    click.echo(f"deploycc: internal error: {type(error).__name__}: {first} "
               "(rerun with --debug and report it)", err=True)
    sys.exit(EXIT_INTERNAL)
