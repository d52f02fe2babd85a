"""lm-eval model "scored": loglikelihood and rolling perplexity scored by a scored server.

    python -m scored_client.lm_eval_cli run --model scored --model_args server=127.0.0.1:50051 --tasks ...

Conventions follow lm-eval's HF causal LM: contexts are tokenized without BOS (add_bos=True to change it);
an empty context is replaced by the prefix token (BOS, or EOS where there is no BOS); sequences longer than
max_length keep their last max_length + 1 tokens; loglikelihood_rolling uses lm-eval's own disjoint rolling
windows (get_rolling_token_windows with context_len 1). Requests run concurrently over one ScoreStream.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from scored_client.client import ScorerClient


@register_model("scored")
class ScoredLM(TemplateLM):
    """model_args: server=HOST:PORT (required), max_length (default: the server's max_seq_len),
    inflight (concurrent requests, default 16), add_bos (default False), token (bearer token)."""

    def __init__(self, server: str, max_length: Optional[int] = None, inflight: int = 16,
                 add_bos: bool = False, token: Optional[str] = None, batch_size=None, device=None,
                 **kwargs) -> None:
        super().__init__()
        del batch_size, device, kwargs  # lm-eval passes these to every model; the server batches itself
        self._client = ScorerClient(server, token=token)
        self._info = self._client.model_info()
        self._max_length = int(max_length) if max_length else int(self._info.max_seq_len)
        self._inflight = int(inflight)
        self._add_bos = str(add_bos).lower() in ("1", "true", "yes")

    @property
    def eot_token_id(self) -> int:
        return self._info.eos_id

    @property
    def prefix_token_id(self) -> int:
        return self._info.bos_id if self._info.bos_id >= 0 else self._info.eos_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return self._info.tokenizer_fingerprint

    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, **kwargs) -> List[int]:
        add_bos = self._add_bos if add_special_tokens is None else bool(add_special_tokens)
        ids, _ = self._client.tokenize(string, add_bos=add_bos)
        return ids

    def _score_all(self, sequences: Sequence[Tuple[List[int], int]]) -> List[Tuple[float, bool]]:
        out: List[Optional[Tuple[float, bool]]] = [None] * len(sequences)
        for index, result in self._client.score_stream(sequences, inflight=self._inflight):
            out[index] = (result.sum_logprob, all(result.greedy))
        return out  # type: ignore[return-value]

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> List[Tuple[float, bool]]:
        sequences = []
        for _, context_enc, continuation_enc in requests:
            whole = (context_enc + continuation_enc)[-(self._max_length + 1):]
            sequences.append((whole, len(whole) - len(continuation_enc)))
        results = self._score_all(sequences)
        for (key, _, _), res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", key, res)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        sequences, owner = [], []
        for i, req in enumerate(requests):
            (text,) = req.args
            windows = map(make_disjoint_window, get_rolling_token_windows(
                token_list=self.tok_encode(text, add_special_tokens=False), prefix_token=self.prefix_token_id,
                max_seq_len=self._max_length, context_len=1))
            for context, pred in windows:
                sequences.append((context + pred, len(context)))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._score_all(sequences)):
            totals[i] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        raise NotImplementedError(
            "scored scores text, it does not generate: generate_until tasks need a generating backend")
