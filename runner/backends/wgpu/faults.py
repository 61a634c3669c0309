"""Injectable faults: bugs a WebGPU execution provider could really have, each off unless a case
names it (a suite's ``inject:``, or ``--inject`` for the whole run), each there to show that
one of the judge's detectors fires.

Declared once, here: ``FAULTS`` (name -> what it does; ``regress doctor`` lists them), the
kernel edits they make, and ``Faults``, the set active for one case, which the backend and the
executor ask. A fault never leaks into a clean case: a kernel fault compiles other programs in
a session of its own, and a capture fault records under a capture key of its own that no clean
case looks up (nor the shape-only cache).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass

from runner.backends.wgpu.kernels import Kernel, Program, compose

SHAPE_ONLY_CAPTURE_CACHE = "shape-only-capture-cache"
ROW_MEAN_SKIPS_FIRST = "row-mean-skips-first"
CAPTURE_FALLS_BACK_TO_EAGER = "capture-falls-back-to-eager"
RACY_REPLAY = "racy-replay"
STALE_INPUT_BINDING = "stale-input-binding"
INPUT_SNAPSHOT_AT_CAPTURE = "input-snapshot-at-capture"
GRAPHS_SHARE_INPUTS = "graphs-share-inputs"
LENGTHS_FROZEN_AT_CAPTURE = "lengths-frozen-at-capture"
CACHE_FROZEN_AT_CAPTURE = "cache-frozen-at-capture"
PROGRAM_KEY_WITHOUT_ATTRIBUTE = "program-key-without-attribute"
PROGRAM_KEY_WITHOUT_RANK = "program-key-without-rank"
TANH_THROUGH_EXP = "tanh-through-exp"

FAULTS: dict[str, str] = {
    SHAPE_ONLY_CAPTURE_CACHE: "key the capture cache by input/output shapes alone, so a "
    "layout change with the same shapes replays the earlier layout's bind groups and "
    "uniforms (the seed bug: silently the earlier layout's result; stale-layout)",
    ROW_MEAN_SKIPS_FIRST: "the row-mean loop of LayerNormalization and ReduceMean starts at "
    "column 1, as Softmax's max loop does, so every mean misses its row's first element: "
    "eager and capture alike differ from onnxruntime (reference-mismatch)",
    CAPTURE_FALLS_BACK_TO_EAGER: "a capture case silently runs eager: every run, replays "
    "included, creates its bind groups and writes its uniforms anew; outputs stay right "
    "(capture-not-engaged)",
    RACY_REPLAY: "replays alternate between two recorded command lists whose MatMul sums run "
    "in opposite orders, as split-K partial sums added in whichever order workgroups finish "
    "would: replays disagree in the last bits (nondeterministic)",
    STALE_INPUT_BINDING: "the capture binds input buffers of its own while replays upload the "
    "inputs into the session's, so every replay reads inputs never written (zeros): wrong "
    "and deterministic, on the capture path only (capture-mismatch; cf. onnxruntime#28325)",
    INPUT_SNAPSHOT_AT_CAPTURE: "the capture binds a copy of the inputs taken while it records, "
    "so every replay computes the recording run's inputs again, whatever was written since: "
    "plausible, deterministic, the output of an earlier run (stale-input; what onnxruntime-web's "
    "C++ builds do with a new input buffer per run)",
    GRAPHS_SHARE_INPUTS: "with graphs: N, a graph recorded after the first binds the first "
    "graph's input buffers in place of its own, so its replays return the first graph's result "
    "(wrong-graph)",
    LENGTHS_FROZEN_AT_CAPTURE: "a decoder's capture binds a copy of the recording step's "
    "attention mask, which its sequence lengths (seqlens_k, total_sequence_length) come from: "
    "every replayed decode step attends over the capture step's length while its token and "
    "caches are new (a graph that keeps its capture step's sequence length; capture-mismatch "
    "from the first replay)",
    CACHE_FROZEN_AT_CAPTURE: "a decoder's capture binds a copy of the recording step's KV "
    "caches: every replayed decode step reads the cache as the capture step had it, a cache "
    "the replays never advance (capture-mismatch from the first replay)",
    PROGRAM_KEY_WITHOUT_ATTRIBUTE: "the device's program (pipeline) cache keys a kernel by its "
    "op, element types, rank and uniform struct, not by what its attributes compile into (Gelu's "
    "approximate, Cast's target, Softmax's axis...): a second node of one op that differs only "
    "in an attribute silently runs the first one's shader, in every mode and in every session "
    "on the device (reference-mismatch; cf. onnxruntime#15710, #24317)",
    TANH_THROUGH_EXP: "Tanh computes (exp(2x) - 1) / (exp(2x) + 1), whose exp overflows float32 "
    "past |x| of about 44: infinity over infinity, NaN, in every mode (non-finite beside "
    "reference-mismatch; JSEP's own Tanh before 1.17.3, onnxruntime#19201)",
    PROGRAM_KEY_WITHOUT_RANK: "the device's program cache keys a kernel without its tensors' "
    "rank: a second node of one op over tensors of another rank runs the first one's shader, "
    "indexing its operands with the first one's dimensions (reference-mismatch; cf. "
    "onnxruntime#18387, a key missing the dispatch's dimensionality)",
}

# What the decoder faults freeze at capture: the graph inputs whose names start so.
FROZEN_INPUTS = {
    INPUT_SNAPSHOT_AT_CAPTURE: ("",),
    LENGTHS_FROZEN_AT_CAPTURE: ("attention_mask",),
    CACHE_FROZEN_AT_CAPTURE: ("past_key_values.",),
}


@dataclass(frozen=True)
class KernelEdit:
    """A one-line change to the WGSL of some kernels: ``before`` becomes ``after``.

    The edited kernel gets another name, so its programs and pipelines have keys of their own.
    """

    fault: str
    kernels: tuple[str, ...]  # kernel name prefixes it applies to
    before: str
    after: str

    def __call__(self, kernel: Kernel) -> Kernel:
        if not kernel.name.startswith(self.kernels):
            return kernel
        if self.before not in kernel.body:  # the kernel changed under the fault: say so
            raise ValueError(f"fault {self.fault}: kernel {kernel.name} has no {self.before!r}")
        body = kernel.body.replace(self.before, self.after)
        return dataclasses.replace(kernel, name=f"{kernel.name}!{self.fault}", body=body)


SKIP_FIRST_IN_MEAN = KernelEdit(
    ROW_MEAN_SKIPS_FIRST,
    ("LayerNorm[", "ReduceMean"),
    "for (var j = 0u; j < params.cols; j++) { total += ",
    "for (var j = 1u; j < params.cols; j++) { total += ",
)
# The other summation order racy replays alternate with (not a fault on its own).
REVERSED_SUM = KernelEdit(
    RACY_REPLAY,
    ("MatMul[",),
    "for (var k = 0; k < g.x; k++) {",
    "for (var k = g.x - 1; k >= 0; k--) {",
)
TANH_OVERFLOWS = KernelEdit(
    TANH_THROUGH_EXP,
    ("Tanh[",),
    "out[o] = tanh_safe(a);",
    "out[o] = (exp(2.0 * a) - 1.0) / (exp(2.0 * a) + 1.0);",
)
# Faults that change the kernels a session compiles, in both modes.
KERNEL_EDITS = {ROW_MEAN_SKIPS_FIRST: SKIP_FIRST_IN_MEAN, TANH_THROUGH_EXP: TANH_OVERFLOWS}


def _without_attributes(program: Program) -> str:
    """The kernel's label (op, element types, rank) and uniform struct: not its body."""
    return f"{program.kernel.name}|{program.layout.wgsl()}"


def _without_rank(program: Program) -> str:
    """The whole program but the rank: its label without ``;rN`` and its body without the
    per-dimension lines (what a key of the op, types and attributes alone would see)."""
    kernel = program.kernel
    label = re.sub(r";r\d+", "", kernel.name)
    body = re.sub(r"  let c\d+ = .*\n(?:  \w+ [-+]= .*\n)*", "", kernel.body)
    return f"{label}|{body}|{kernel.helpers}"


# Faults that coarsen the program cache's key: programs that differ in what the key leaves out
# share the pipeline compiled first, under a key of the fault's own (no clean program's).
PROGRAM_KEYS = {
    PROGRAM_KEY_WITHOUT_ATTRIBUTE: _without_attributes,
    PROGRAM_KEY_WITHOUT_RANK: _without_rank,
}


@dataclass(frozen=True)
class Faults:
    """The faults of this backend active for one case."""

    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *injected: Iterable[str]) -> Faults:
        """Ours among the case's and the run's faults (other backends' are ignored)."""
        return cls(frozenset().union(*injected) & FAULTS.keys())

    def __contains__(self, name: str) -> bool:
        return name in self.names

    @property
    def in_kernels(self) -> tuple[str, ...]:
        """Those that change the compiled kernels or their keys: part of the session key."""
        return tuple(sorted(self.names & (KERNEL_EDITS.keys() | PROGRAM_KEYS.keys())))

    @property
    def in_recording(self) -> tuple[str, ...]:
        """Those that change what a capture records: part of the capture key."""
        recording = {
            RACY_REPLAY,
            STALE_INPUT_BINDING,
            GRAPHS_SHARE_INPUTS,
            *FROZEN_INPUTS,
        }
        return tuple(sorted(self.names & recording))

    @property
    def frozen_inputs(self) -> tuple[str, ...]:
        """Prefixes of the inputs whose recording-run values the capture binds a copy of."""
        return tuple(
            p for name in sorted(self.names & FROZEN_INPUTS.keys()) for p in FROZEN_INPUTS[name]
        )

    @property
    def shares_captures_by_shape(self) -> bool:
        """Whether a capture this case records may be found by shape: only a clean one."""
        return self.names <= {SHAPE_ONLY_CAPTURE_CACHE}

    def compose(self, kernel: Kernel, order: tuple[str, ...]) -> Program:
        """``kernel``'s program under the uniform `order`, as the active kernel faults compile
        it and the active key faults key it (``kernels.compose`` without one)."""
        for name in sorted(self.names & KERNEL_EDITS.keys()):
            kernel = KERNEL_EDITS[name](kernel)
        program = compose(kernel, order)
        for name in sorted(self.names & PROGRAM_KEYS.keys()):
            program = dataclasses.replace(program, key=f"!{name}|{PROGRAM_KEYS[name](program)}")
        return program
