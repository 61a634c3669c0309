"""``GenaiSteps``: a decoder case through onnxruntime-genai's own generator loop, in the child
process (``backend``).

Per case, genai gets a folder of its own: the case's model as ``model.onnx`` and a
``genai_config.json`` written from the decoder's parameters as genai's model builder writes it
(``past_present_share_buffer`` true, ``max_length`` the case's), whose decoder session options
name the WebGPU EP, with ``enableGraphCapture: "1"`` for a capture case (the builder's
``enable_webgpu_graph``), or none with ``--adapter cpu`` (onnxruntime's CPU EP). Then, greedy,
as an application runs it: ``append_tokens(prompt)`` (the prefill, run 1), and per decode step
``generate_next_token()``, which runs the model on the token it chose last; after each,
``get_output`` reads the logits and every present KV cache (genai's shared cache buffers), which
are the run's outputs, judged against onnxruntime CPU's step like any backend's.

genai chooses its own tokens: each must be the one onnxruntime CPU's loop feeds the next step,
else the loops part and the case is an ``error`` saying where. genai runs each step once, so the
schedule's repeat of the last step is not run (no determinism check), and it shows no replays:
on the CPU EP, which captures nothing, every capture step after the first is reported as having
executed the model (``capture-not-engaged``, as ort-native's CPU EP runs are).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from runner.backends.base import (
    BackendOptions,
    BackendRun,
    CaseWork,
    Timings,
    Trace,
    case_timeout,
    ran_on,
)
from runner.environment import package_version
from runner.errors import EnvironmentUnusable
from runner.schedule import PREFILL_DRAW
from runner.workload.decoder import cache_names

WEBGPU_EP = "WebGpuExecutionProvider"
NO_GPU = "no WebGPU EP device: ONNX Runtime found no GPU (lavapipe and SwiftShader do not count)"
# genai's option that turns the builder's `enable_webgpu_graph` into a captured decode loop
CAPTURE_OPTIONS = {"enableGraphCapture": "1"}


class GenaiSteps:
    name = "ort-genai"

    def __init__(self, options: BackendOptions):
        """On the WebGPU EP: registers onnxruntime-ep-webgpu's library with genai (and, to
        see its devices, with onnxruntime's Python API, the same device discovery); raises
        EnvironmentUnusable saying what was tried and what was missing."""
        import onnxruntime_genai as og

        self.og, self.options = og, options
        self.device = "onnxruntime CPU EP"
        if self.options.on_cpu:
            return
        genai = f"onnxruntime-genai {package_version('onnxruntime-genai')}"
        if not hasattr(og, "register_execution_provider_library"):
            raise EnvironmentUnusable(
                f"{genai} cannot take a plugin EP: it has no register_execution_provider_library "
                "(microsoft/onnxruntime-genai#1850 added it)"
            )
        try:
            import onnxruntime_ep_webgpu
        except ImportError:
            raise EnvironmentUnusable("onnxruntime-ep-webgpu is not in the environment") from None
        import onnxruntime as ort

        library = onnxruntime_ep_webgpu.get_library_path()
        og.register_execution_provider_library("webgpu", library)
        ort.register_execution_provider_library("webgpu", library)
        devices = [d for d in ort.get_ep_devices() if d.ep_name == WEBGPU_EP]
        plugin = f"onnxruntime-ep-webgpu {package_version('onnxruntime-ep-webgpu')}"
        if not devices:
            listed = ", ".join(d.ep_name for d in ort.get_ep_devices()) or "none"
            raise EnvironmentUnusable(
                f"{genai} registered {plugin}'s library, but {NO_GPU} (onnxruntime "
                f"{ort.__version__} lists EP devices: {listed}); --adapter cpu runs genai's "
                "loop on the CPU EP"
            )
        device = devices[0].device
        self.device = f"{device.vendor} {getattr(device, 'type', '')}".strip()

    def environment(self) -> dict[str, Any]:
        on_cpu = self.options.on_cpu
        return {
            "onnxruntime_genai": package_version("onnxruntime-genai"),
            "onnxruntime_ep_webgpu": None if on_cpu else package_version("onnxruntime-ep-webgpu"),
            "provider": "CPUExecutionProvider" if on_cpu else WEBGPU_EP,
            "device": self.device,
        }

    def close(self) -> None:
        pass

    def run(self, work: CaseWork) -> BackendRun:
        folder = Path(tempfile.mkdtemp(prefix="ort-genai-"))
        try:
            return ran_on(self._case(work, folder), self.device)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _case(self, work: CaseWork, folder: Path) -> BackendRun:
        og, case, workload = self.og, work.case, work.workload
        params = case.model.decoder
        began = time.perf_counter()
        deadline = began + case_timeout(case, self.options)
        (folder / "model.onnx").write_bytes(workload.model)
        config = genai_config(params, self._provider_options(case.capture))
        (folder / "genai_config.json").write_text(json.dumps(config, indent=2))
        feeds = workload.feeds(self.options.runs)
        prompt = [int(t) for t in workload.inputs_of(feeds[0].variant)["input_ids"][0]]
        names = ["logits", *(p.replace("past_key_values", "present") for p in cache_names(params))]
        runs, times, tokens = [], [], []
        try:
            model = og.Model(str(folder))
            generator_params = og.GeneratorParams(model)
            generator_params.set_search_options(max_length=params.max_length, do_sample=False)
            generator = og.Generator(model, generator_params)
            session_ms = (time.perf_counter() - began) * 1e3
            generator.append_tokens(prompt)  # the prefill
            runs.append({name: np.array(generator.get_output(name)) for name in names})
            generator.generate_next_token()  # chooses from the prefill's logits, runs nothing
            tokens.append(int(generator.get_next_tokens()[0]))
            for index, feed in enumerate(feeds[1:], start=2):
                if feed.variant[1] == PREFILL_DRAW or len(runs) == len(feeds) - 1:
                    break  # the schedule's repeat of the last step: genai runs a step once
                fed = int(workload.inputs_of(feed.variant)["input_ids"][0, -1])
                if tokens[-1] != fed:
                    return BackendRun(
                        "error",
                        runs=tuple(runs),
                        message=(
                            f"genai's greedy token before run {index} is {tokens[-1]}, onnxruntime "
                            f"CPU's loop feeds {fed}: the loops part (tokens so far {tokens})"
                        ),
                        details={"tokens": tokens},
                    )
                start = time.perf_counter()
                generator.generate_next_token()  # runs the model on the token it chose
                runs.append({name: np.array(generator.get_output(name)) for name in names})
                times.append((time.perf_counter() - start) * 1e3)
                tokens.append(int(generator.get_next_tokens()[0]))
                if time.perf_counter() > deadline:
                    break
        except Exception as exc:  # genai's own refusal or failure is this case's error
            message = f"run {len(runs) + 1}: {type(exc).__name__}: {exc}"
            return BackendRun("error", runs=tuple(runs), message=message)
        steps = len(runs) - 1
        timed_out = steps < len(feeds) - 2
        details = {
            "provider": self.environment()["provider"],
            "tokens": tokens,
            "unrun": "the schedule's repeat of the last step (genai runs a step once)",
        }
        reruns = max(steps - 1, 0) if case.capture and self.options.on_cpu else 0
        return BackendRun(
            status="timeout" if timed_out else "ok",
            runs=tuple(runs),
            message=f"stopped after {len(runs)} runs: over the time limit" if timed_out else "",
            timings=Timings.of_runs(session_ms, times),
            trace=Trace(replay_reruns=reruns),
            details=details,
        )

    def _provider_options(self, capture: bool) -> list[dict[str, dict[str, str]]]:
        if self.options.on_cpu:
            return []
        return [{"webgpu": {**(CAPTURE_OPTIONS if capture else {}), "validationMode": "disabled"}}]


def genai_config(params, provider_options: list) -> dict[str, Any]:
    """genai_config.json for a decoder of `params`, the fields genai's model builder writes for
    a Llama model; no token is end-of-sequence (``eos_token_id`` an empty list), so genai
    decodes as many steps as the loop has."""
    return {
        "model": {
            "bos_token_id": 1,
            "context_length": params.max_length,
            "decoder": {
                "session_options": {
                    "log_id": "onnxruntime-genai",
                    "provider_options": provider_options,
                },
                "filename": "model.onnx",
                "head_size": params.head_size,
                "hidden_size": params.hidden,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": params.heads,
                "num_hidden_layers": params.layers,
                "num_key_value_heads": params.kv_heads,
            },
            "eos_token_id": [],
            "pad_token_id": 0,
            "type": "llama",
            "vocab_size": params.vocab,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": params.max_length,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": True,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }
