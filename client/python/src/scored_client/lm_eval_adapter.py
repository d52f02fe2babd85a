"""lm-eval model "scored": loglikelihood and rolling perplexity scored by a scored server.

    python -m scored_client.lm_eval_cli run --model scored --model_args server=127.0.0.1:50051 --tasks ...

Conventions are those of the installed lm-eval's HF causal LM backend (lm_eval/models/huggingface.py), so that
the same task gives the same numbers at the same settings:

- Tokenization (tok_encode) follows HF's add_bos_token: unset (the default) uses the tokenizer's own default
  (the server's ModelInfo.add_bos_by_default: BOS for Llama tokenizers), True / False force BOS on / off;
  an explicit add_special_tokens=False (lm-eval passes it for a continuation with an empty context) never
  adds one. So contexts, whole strings and rolling documents are tokenized as HF tokenizes them, BOS included.
- An empty context is replaced by prefix_token_id (BOS, else EOS; or the prefix_token_id model arg).
- A (context, continuation) pair keeps its last max_length + 1 tokens (HF's model sees max_length inputs;
  the last token is only a target); loglikelihood_rolling uses lm-eval's own disjoint rolling windows
  (get_rolling_token_windows, context_len 1), each max_length + 1 ids long.
- max_length defaults to the server's max_seq_len - 1, so that every such sequence fits what the server
  accepts (a server started with --max_seq_len C + 1 gives max_length C, HF's default for a model whose
  config says C: the last id is only a target, so scored serves C + 1 without --allow_long_context). A larger
  max_length is refused at once.

Requests run concurrently over one ScoreStream, with a progress bar (lm-eval's tqdm; its --verbosity and
disable_tqdm apply).

Connection model_args: token_file=PATH (the bearer token read from a file: a token= on the command line shows
in `ps`, the shell's history and lm-eval's own log of the model arguments), tls_ca=PEM (TLS with that CA),
tls_cert=PEM and tls_key=PEM (mTLS). A server that cannot be reached fails at once with what to check.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import grpc
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from scored_client.client import ScoreError, ScorerClient


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what} {path}: {e.strerror}") from None


def _credentials(tls_ca, tls_cert, tls_key) -> Optional[grpc.ChannelCredentials]:
    if not (tls_ca or tls_cert or tls_key):
        return None
    if bool(tls_cert) != bool(tls_key):
        raise ValueError("tls_cert and tls_key go together (mTLS)")
    return grpc.ssl_channel_credentials(
        root_certificates=_read_file(tls_ca, "tls_ca") if tls_ca else None,
        private_key=_read_file(tls_key, "tls_key") if tls_key else None,
        certificate_chain=_read_file(tls_cert, "tls_cert") if tls_cert else None)


def _parse_bool(value) -> Optional[bool]:
    """lm-eval passes model_args as strings: "True"/"false"/"1"; None stays None."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    if text in ("", "none"):
        return None
    raise ValueError(f"expected a boolean, got {value!r}")


@register_model("scored")
class ScoredLM(TemplateLM):
    """model_args: server=HOST:PORT (required), max_length (default: the server's max_seq_len - 1),
    add_bos_token (default: the tokenizer's default, as lm-eval's HF backend; add_bos is an older name),
    prefix_token_id (default: BOS, else EOS), inflight (concurrent requests, default 16), token (bearer token)
    or token_file (a file holding it), tls_ca / tls_cert / tls_key (PEM files: TLS, mTLS)."""

    def __init__(self, server: str, max_length: Optional[int] = None, inflight: int = 16,
                 add_bos_token=None, add_bos=None, prefix_token_id: Optional[int] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None, batch_size=None, device=None,
                 **kwargs) -> None:
        super().__init__()
        del batch_size, device, kwargs  # lm-eval passes these to every model; the server batches itself
        if token and token_file:
            raise ValueError("give token or token_file, not both")
        if token_file:
            token = _read_file(token_file, "token_file").decode().strip()
        self._client = ScorerClient(server, token=token, credentials=_credentials(tls_ca, tls_cert, tls_key))
        try:
            self._info = self._client.model_info()
        except ScoreError as e:
            if e.code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            raise ConnectionError(
                f"cannot reach scored at {server} ({e.code.name}: {e.details}); is it running and listening "
                f"there (scored --model DIR --listen {server})? A TLS server needs tls_ca=PEM") from None
        limit = int(self._info.max_seq_len) - 1  # a sequence is max_length + 1 ids
        if limit < 1:
            raise ValueError(f"server at {server} reports max_seq_len {self._info.max_seq_len}: too small")
        self._max_length = int(max_length) if max_length else limit
        if self._max_length > limit:
            raise ValueError(f"max_length {self._max_length} needs sequences of {self._max_length + 1} ids, "
                             f"but the server accepts at most max_seq_len {self._info.max_seq_len}: use "
                             f"max_length <= {limit}. A server started with a smaller --max_seq_len than "
                             f"the model's max_position_embeddings + 1 can take up to that; past it the "
                             f"positions are extrapolation (scored refuses them without "
                             f"--allow_long_context)")
        self._inflight = int(inflight)
        self._add_bos_token = _parse_bool(add_bos_token if add_bos_token is not None else add_bos)
        self._prefix_token_id = int(prefix_token_id) if prefix_token_id is not None else None

    @property
    def eot_token_id(self) -> int:
        return self._info.eos_id

    @property
    def prefix_token_id(self) -> int:
        if self._prefix_token_id is not None:
            return self._prefix_token_id
        return self._info.bos_id if self._info.bos_id >= 0 else self._info.eos_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def tokenizer_name(self) -> str:
        return self._info.tokenizer_fingerprint

    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, **kwargs) -> List[int]:
        # HF: encode(string, add_special_tokens=...) with its tokenizer built with add_bos_token when given.
        if add_special_tokens is False:
            add_bos: Optional[bool] = False
        else:
            add_bos = self._add_bos_token  # None: the tokenizer's default
        ids, _ = self._client.tokenize(string, add_bos=add_bos)
        return ids

    def _score_all(self, sequences: Sequence[Tuple[List[int], int]],
                   disable_tqdm: bool = False) -> List[Tuple[float, bool]]:
        out: List[Optional[Tuple[float, bool]]] = [None] * len(sequences)
        with tqdm(total=len(sequences), desc="Scoring (scored)", unit="seq", disable=disable_tqdm) as bar:
            for index, result in self._client.score_stream(sequences, inflight=self._inflight):
                out[index] = (result.sum_logprob, all(result.greedy))
                bar.update(1)
        return out  # type: ignore[return-value]

    def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
        raise NotImplementedError(
            "the scored model has no chat template: drop --apply_chat_template (scored scores the prompts as "
            "the task writes them), or format the task's prompts with the model's template before scoring")

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> List[Tuple[float, bool]]:
        sequences = []
        for _, context_enc, continuation_enc in requests:
            whole = (context_enc + continuation_enc)[-(self._max_length + 1):]
            sequences.append((whole, len(whole) - len(continuation_enc)))
        results = self._score_all(sequences, disable_tqdm)
        for (key, _, _), res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", key, res)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> List[float]:
        sequences, owner = [], []
        for i, req in enumerate(requests):
            (text,) = req.args
            windows = map(make_disjoint_window, get_rolling_token_windows(
                token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                max_seq_len=self._max_length, context_len=1))
            for context, pred in windows:
                sequences.append((context + pred, len(context)))
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._score_all(sequences, disable_tqdm)):
            totals[i] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> List[str]:
        raise NotImplementedError(
            "scored scores text, it does not generate: generate_until tasks need a generating backend")
