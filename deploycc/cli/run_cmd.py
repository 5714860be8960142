"""`deploycc run SEGMENTS --inputs data.npz`: run a partitioned model's chain of segments."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("run")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--inputs", "inputs", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An .npz with one array per input name.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the outputs here (.npz), atomically.")
@click.pass_context
def run_command(ctx: click.Context, folder: Path, inputs: Path, output: Path | None) -> None:
    """Run the segments in FOLDER (the output directory of `build --partition`, or its `segments/`)
    in order, each on ONNX Runtime CPU, and print each output's shape and each segment's time.

    Exit code 0 when it ran, 2 on bad input.
    """
    import numpy as np

    from deploycc.io import claim, staging_prefix
    from deploycc.runtime import Chain
    from deploycc.verify.inputs import load_npz

    with claim([], inputs=[inputs, *(p for p in folder.rglob("*") if p.is_file())], reports=[output]):
        feeds = load_npz(inputs)
        chain = Chain.load(folder)
        try:
            outputs = chain.run(feeds)
        finally:
            chain.close()
        if output is not None:
            import tempfile

            with tempfile.NamedTemporaryFile(dir=output.parent, prefix=staging_prefix(output), delete=False) \
                    as handle:
                np.savez(handle, **outputs)  # type: ignore[arg-type]
            Path(handle.name).replace(output)  # whole or not at all
    for name, array in outputs.items():
        click.echo(f"{name}: {array.dtype} {list(array.shape)}")
    for index, seconds in chain.seconds.items():
        click.echo(f"segment {index}: {seconds * 1e3:.3f} ms")
    ctx.exit(0)
