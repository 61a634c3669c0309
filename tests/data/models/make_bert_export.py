"""Make ``bert_tiny_export.onnx``: a random-weight BERT sentence encoder as torch.onnx writes it.

Hugging Face's ``BertModel`` (2 layers, hidden 32, 4 heads, FFN 64, vocab 100, 64 positions;
seed 0) exported by torch's legacy TorchScript exporter (``dynamo=False``, opset 18), the
exporter most published encoder exports came from. Inputs ``input_ids`` and ``attention_mask``
(int64, dims ``batch`` x ``sequence``); outputs ``last_hidden_state`` and ``pooler_output``.
Its attention-mask path (transformers' ``masking_utils`` with SDPA attention) is what the wgpu
backend had to learn: Flatten, Range, ConstantOfShape, And, GreaterOrEqual, IsNaN, and a
GatherElements over the token-type buffer. (The dynamo exporter writes that path differently:
no Flatten or ConstantOfShape, but GatherND and Max.)

Every parameter is drawn at random, LayerNorm and biases included, so that no two are equal
(the exporter would deduplicate them) and attention is far from uniform.

Made with torch 2.13.0+cpu, transformers 5.24.0, onnx 1.23.2. torch is not a dependency of
this project; to remake the fixture (it changes only if those versions do)::

    python3 -m venv /work/torchenv
    /work/torchenv/bin/pip install torch==2.13.0 transformers onnx
    /work/torchenv/bin/python tests/data/models/make_bert_export.py

It prints the op histogram of the export.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import torch
from transformers import BertConfig, BertModel

OUT = Path(__file__).with_name("bert_tiny_export.onnx")
DIMS = {0: "batch", 1: "sequence"}


class SentenceEncoder(torch.nn.Module):
    """BertModel with positional inputs and tuple outputs, as an export wrapper needs."""

    def __init__(self, bert: BertModel):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def main() -> None:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    bert = BertModel(config).eval()
    with torch.no_grad():
        for name, parameter in bert.named_parameters():
            base = 1.0 if name.endswith("LayerNorm.weight") else 0.0
            parameter.copy_(base + 0.2 * torch.randn_like(parameter))
    input_ids = torch.randint(0, config.vocab_size, (2, 8))
    attention_mask = torch.ones(2, 8, dtype=torch.int64)
    torch.onnx.export(
        SentenceEncoder(bert),
        (input_ids, attention_mask),
        str(OUT),
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_axes={
            "input_ids": DIMS,
            "attention_mask": DIMS,
            "last_hidden_state": DIMS,
            "pooler_output": {0: "batch"},
        },
        opset_version=18,
        dynamo=False,
    )
    model = onnx.load(str(OUT))
    onnx.checker.check_model(model)
    ops = Counter(node.op_type for node in model.graph.node)
    print(f"{OUT.name}: {OUT.stat().st_size} bytes")
    for op, count in sorted(ops.items()):
        print(f"  {op}: {count}")


if __name__ == "__main__":
    main()
