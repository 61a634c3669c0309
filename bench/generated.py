"""What `explore --models generated` costs per target: models drawn and judged per second, how the
pace falls with a model's size, and what the draw covers (ops, attribute values).

`python bench/generated.py [--target TARGET ...] [--models 200] [--seed 1] [--ort-web-version V]
[--dtypes float32,float16] [--opsets 20,18]` draws `--models` models from the whole vocabulary
(Hypothesis, seeded; in every float type and opset by default, as explore does), runs each one's
cases on each target exactly as explore does (``runner.explore.cases.run_cases``: a device, or
a page, of its own per model; onnxruntime CPU as the reference), and prints a Markdown row per
target: models drawn, seconds, models per second, seconds per judged model by node count, and
the models discarded (no reference, or an op the target lacks; explore learns the latter and
stops drawing it, this bench does not). Then the pace per dimension of the draw (a row per
bucket: float type, opset, widest dim, attributes left to defaults, contrib ops: judged models
and seconds per judged model on each target), and what the drawn models covered: each op and
the attribute values it was drawn with. One run on one machine; read it with the
machine's load in mind. The numbers are in docs/commands.md#explore---models-generated.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.backends import open_backend, parse_backend, resolve_targets  # noqa: E402
from runner.backends.base import BackendOptions  # noqa: E402
from runner.explore.cases import run_cases  # noqa: E402
from runner.explore.generated import (  # noqa: E402
    DTYPES,
    OPSETS,
    Coverage,
    GeneratedModel,
    buckets,
    generated_models,
)
from runner.explore.space import GeneratedModels  # noqa: E402
from runner.explore.vocabulary import OPS  # noqa: E402
from runner.oracle import ReferenceCache  # noqa: E402

HEADER = (
    "| target | models | seconds | models/s | s per judged model by nodes (1-2, 3-4, 5+) "
    "| discarded |\n"
    "| --- | --- | --- | --- | --- | --- |"
)


def drawn(
    count: int,
    seed_value: int,
    ops: tuple[str, ...],
    dtypes: tuple[str, ...],
    opsets: tuple[int, ...],
) -> list[GeneratedModel]:
    """`count` models as explore's strategy draws them (Hypothesis's own mix of sizes)."""
    models: list[GeneratedModel] = []

    @seed(seed_value)
    @settings(max_examples=count, database=None, suppress_health_check=list(HealthCheck))
    @given(generated_models(ops, dtypes, opsets))
    def collect(model: GeneratedModel) -> None:
        models.append(model)

    collect()
    return models


def row(
    backend: str, models: list[GeneratedModel], versions: dict, folder: Path, paces: dict
) -> str:
    """`backend`'s row; each judged model's seconds added to `paces` under each of its
    buckets, by target."""
    [target] = parse_backend(backend)
    if versions.get(target.name):
        target = dataclasses.replace(target, declared=versions[target.name][0])
    target = resolve_targets([target])[target]
    source = GeneratedModels(tuple(OPS), target, folder)
    options = BackendOptions(fresh_sequences=True)
    oracle = ReferenceCache(None).references
    by_size: dict[str, list[float]] = collections.defaultdict(list)
    discarded = 0
    instance = open_backend(target.name, options)
    began = time.perf_counter()
    try:
        for model in models:
            explored = source.explored(model)
            start = time.perf_counter()
            ran = run_cases(explored, instance, oracle, options)
            discarded += bool(ran.discarded)
            if not ran.discarded:  # a discard stops at its first case: no measure of a model
                took = time.perf_counter() - start
                size = "1-2" if model.nodes <= 2 else "3-4" if model.nodes <= 4 else "5+"
                by_size[size].append(took)
                for bucket in buckets(model):
                    paces[bucket][target.id].append(took)
    finally:
        instance.close()
    seconds = time.perf_counter() - began
    paces = ", ".join(
        f"{statistics.mean(by_size[s]):.2f}" if by_size[s] else "-" for s in ("1-2", "3-4", "5+")
    )
    return (
        f"| `{target.id}` | {len(models)} | {seconds:.0f} | {len(models) / seconds:.1f} | "
        f"{paces} | {discarded} |"
    )


def pace_per_dimension(paces: dict, targets: list[str]) -> str:
    """A row per bucket of the draw: judged models and seconds per judged model, per target."""
    lines = [
        "| dimension | " + " | ".join(f"`{t}`: judged, s per model" for t in targets) + " |",
        "| --- |" + " --- |" * len(targets),
    ]
    for bucket in sorted(paces):
        cells = [paces[bucket].get(t, []) for t in targets]
        shown = [f"{len(c)}, {statistics.mean(c):.3f}" if c else "0, -" for c in cells]
        lines.append(f"| {bucket} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def coverage(models: list[GeneratedModel]) -> str:
    """Each op drawn, how often, and the attribute values it was drawn with."""
    covered = Coverage()
    for model in models:
        covered.add(model)
    lines = ["| op | nodes | attribute values |", "| --- | --- | --- |"]
    for op in covered.ops():
        more = f" (+{len(op.values) - 8} more)" if len(op.values) > 8 else ""
        lines.append(f"| {op.op} | {op.nodes} | {', '.join(op.values[:8])}{more} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", default=[], help="default: wgpu")
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ort-web-version", action="append", default=[])
    parser.add_argument("--ops", default=",".join(OPS), help="default: every op")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="default: every float type")
    parser.add_argument("--opsets", default=",".join(map(str, OPSETS)), help="default: all")
    args = parser.parse_args(argv)
    dtypes = tuple(args.dtypes.split(","))
    ops = tuple(args.ops.split(","))
    models = drawn(args.models, args.seed, ops, dtypes, tuple(map(int, args.opsets.split(","))))
    versions = {"ort-web": tuple(args.ort_web_version)}
    paces: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    targets = args.target or ["wgpu"]
    with tempfile.TemporaryDirectory(prefix="bench-generated-") as folder:
        rows = [row(t, models, versions, Path(folder), paces) for t in targets]
    print(HEADER)
    print("\n".join(rows))
    print()
    print(pace_per_dimension(paces, sorted({t for b in paces.values() for t in b})))
    print()
    print(coverage(models))


if __name__ == "__main__":
    main()
