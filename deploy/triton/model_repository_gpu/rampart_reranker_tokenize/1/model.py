"""Tokenizer step of the GPU ensemble: (QUERY, PASSAGE) -> fixed-width int64 tensors.

Uses pair_scorer.py (copied next to this file) so tokenisation is byte-for-byte the in-process one.
"""

import json
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pair_scorer import configure_tokenizer, encode_pairs
from tokenizers import Tokenizer


def _text(value):
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args):
        params = {
            k: v["string_value"] for k, v in json.loads(args["model_config"]).get("parameters", {}).items()
        }
        self.width = int(params.get("max_length", "160"))
        here = Path(args["model_repository"]) / args["model_version"]
        self.tokenizer = configure_tokenizer(Tokenizer.from_file(str(here / "tokenizer.json")), self.width)

    def execute(self, requests):
        responses = []
        for request in requests:
            q = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy().reshape(-1)
            p = pb_utils.get_input_tensor_by_name(request, "PASSAGE").as_numpy().reshape(-1)
            ids = np.zeros((len(q), self.width), dtype=np.int64)
            mask, types = np.zeros_like(ids), np.zeros_like(ids)
            for row, (a, b) in enumerate(zip(q, p, strict=True)):
                (enc,) = encode_pairs(self.tokenizer, _text(a), [_text(b)])
                n = len(enc.ids)
                ids[row, :n], mask[row, :n], types[row, :n] = enc.ids, enc.attention_mask, enc.type_ids
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("input_ids", ids),
                        pb_utils.Tensor("attention_mask", mask),
                        pb_utils.Tensor("token_type_ids", types),
                    ]
                )
            )
        return responses
