"""Triton python-backend model: (QUERY, PASSAGE) rows -> SCORE (relevance logit).

Scoring is ``pair_scorer.py``, copied next to this file from ``services/rerank/pair_scorer.py`` so the
server runs exactly the in-process code. All rows of all requests in a dynamic batch are scored
together; a request with undecodable or malformed input gets its own error, the others still
succeed. Bytes that are not UTF-8 are decoded with replacement characters, never rejected.
"""

import json
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pair_scorer import PairScorer


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        here = Path(args["model_repository"]) / args["model_version"]
        manifest = json.loads((here / "manifest.json").read_text(encoding="utf-8"))
        variant = params.get("variant") or "int8"
        info = manifest["variants"][variant]
        max_length = int(params.get("max_length") or manifest.get("max_length", 256))
        providers = ["CPUExecutionProvider"]
        if args.get("model_instance_kind") == "GPU":
            providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        self.scorer = PairScorer.load(
            str(here / info["file"]),
            str(here / "tokenizer.json"),
            max_length=max_length,
            batch_size=int(params.get("batch_size") or 32),
            threads=int(params.get("threads") or 0),
            parallel=int(params.get("parallel") or 0),
            providers=providers,
        )

    def execute(self, requests):
        pairs, spans, errors = [], [], {}
        for r, request in enumerate(requests):
            try:
                q = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy().reshape(-1)
                p = pb_utils.get_input_tensor_by_name(request, "PASSAGE").as_numpy().reshape(-1)
                if len(q) != len(p):
                    raise ValueError(f"QUERY has {len(q)} rows but PASSAGE has {len(p)}")
            except Exception as exc:  # one bad request must not fail the batch
                errors[r] = str(exc)
                spans.append((len(pairs), len(pairs)))
                continue
            start = len(pairs)
            pairs.extend((_text(a), _text(b)) for a, b in zip(q, p, strict=True))
            spans.append((start, len(pairs)))
        try:
            scores = self.scorer.score_pairs(pairs)
        except Exception as exc:
            message = f"reranker failed on the batch: {exc}"
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(message)) for _ in requests]
        responses = []
        for r, (start, end) in enumerate(spans):
            if r in errors:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(errors[r])))
                continue
            out = pb_utils.Tensor("SCORE", scores[start:end].reshape(-1, 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses

    def finalize(self):
        if self.scorer is not None:
            self.scorer.close()
        self.scorer = None
