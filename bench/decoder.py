"""Decode steps per second on wgpu, eager against capture, for the genai-style decoder.

Run with `python bench/decoder.py` (lavapipe here; any adapter wgpu finds). For each size and
weight form: a prefill of 8 tokens, one decode step that records (capture) or warms up (eager),
then --steps timed decode steps, each fed the token the step before chose; the static mask form,
so every decode step has one shape. Prints a Markdown table: the median time per step and steps
per second in each mode, and capture's speed-up per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner.backends.wgpu.device import Device  # noqa: E402
from runner.backends.wgpu.steps import DeviceSteps  # noqa: E402
from runner.suite.spec import DecoderParams  # noqa: E402
from runner.workload.decoder import Generation, build_decoder  # noqa: E402

PROMPT = [3, 17, 42, 8, 29, 11, 5, 60]
SIZES = {
    "tiny": DecoderParams(static_mask=True, max_length=64),
    "small": DecoderParams(
        layers=4,
        hidden=256,
        heads=8,
        kv_heads=4,
        intermediate=512,
        vocab=1024,
        max_length=128,
        static_mask=True,
    ),
}


def step_times(device: Device, params: DecoderParams, capture: bool, steps: int) -> list[float]:
    """Seconds per timed decode step, after the prefill and one untimed decode step."""
    model = build_decoder(params).SerializeToString()
    generation = Generation(params, DeviceSteps(device, model, capture))
    generation.prefill(PROMPT)
    generation.decode()
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        generation.decode()
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed decode steps per mode")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    args = parser.parse_args()
    device = Device.open(None)
    print(f"adapter: {device.adapter.info['device']}, {args.steps} timed steps per mode\n")
    print(
        "| size | weights | eager ms/step | eager steps/s | capture ms/step | capture steps/s "
        "| speed-up |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for size in args.sizes:
        for quantized in (False, True):
            params = DecoderParams(**{**SIZES[size].__dict__, "quantized": quantized})
            medians = [
                statistics.median(step_times(device, params, capture, args.steps))
                for capture in (False, True)
            ]
            eager, captured = medians
            print(
                f"| {size} | {'int4' if quantized else 'float32'} | {eager * 1e3:.2f} | "
                f"{1 / eager:.0f} | {captured * 1e3:.2f} | {1 / captured:.0f} | "
                f"{eager / captured:.2f}x |"
            )


if __name__ == "__main__":
    main()
