"""ScorerClient: a typed wrapper over the scored.v1.Scorer gRPC service."""
from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from scored_client._gen.scored.v1 import scorer_pb2, scorer_pb2_grpc

# Token lists of a few 100k ids exceed gRPC's default 4 MiB message limit.
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES)]


class ScoreError(RuntimeError):
    """A request failed: `code` is the grpc.StatusCode, `details` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


@dataclasses.dataclass
class ScoreResult:
    """Per-token results of one scored sequence; entry i is position first_scored + i."""

    request_id: int
    first_scored: int
    logprob: List[float]
    greedy: List[bool]
    sum_logprob: float
    num_scored: int
    rank: List[int] = dataclasses.field(default_factory=list)
    entropy: List[float] = dataclasses.field(default_factory=list)
    top_k: List[List[Tuple[int, float]]] = dataclasses.field(default_factory=list)
    tokens: List[int] = dataclasses.field(default_factory=list)  # echoed ids when text was scored
    # With want_reference (the server's reference model R; this model is Q), per scored position: R's
    # logprob of the target, KL(P_R || P_Q) in nats, whether the target is R's argmax, whether Q's and R's
    # argmaxes agree; and the sums over the scored positions (double on the server). Empty / 0 otherwise.
    ref_logprob: List[float] = dataclasses.field(default_factory=list)
    kld: List[float] = dataclasses.field(default_factory=list)
    ref_greedy: List[bool] = dataclasses.field(default_factory=list)
    same_top: List[bool] = dataclasses.field(default_factory=list)
    sum_ref_logprob: float = 0.0
    sum_kld: float = 0.0

    @staticmethod
    def from_proto(r: "scorer_pb2.ScoreResponse") -> "ScoreResult":
        return ScoreResult(
            request_id=r.request_id, first_scored=r.first_scored, logprob=list(r.logprob),
            greedy=list(r.greedy), sum_logprob=r.sum_logprob, num_scored=r.num_scored, rank=list(r.rank),
            entropy=list(r.entropy), top_k=[[(t.id, t.logprob) for t in tt.tokens] for tt in r.top_k],
            tokens=list(r.tokens), ref_logprob=list(r.ref_logprob), kld=list(r.kld),
            ref_greedy=list(r.ref_greedy), same_top=list(r.same_top), sum_ref_logprob=r.sum_ref_logprob,
            sum_kld=r.sum_kld)


@dataclasses.dataclass
class ModelInfo:
    """What GetModelInfo reports (see proto/scored/v1/scorer.proto for each field)."""

    architecture: str
    format: str
    format_notes: str
    bits_per_weight_decoder: float
    bits_per_weight_head: float
    num_parameters: int
    resident_bytes: int
    backend: str
    compute_dtype: str
    tp: int
    max_seq_len: int
    max_batch_tokens: int
    vocab_size: int
    tokenizer_size: int
    tokenizer_kind: str
    bos_id: int
    eos_id: int
    add_bos_by_default: bool
    model_fingerprint: str
    tokenizer_fingerprint: str
    server_version: str
    # The reference model (`scored --reference_model R`) described by the same fields; None without one.
    reference: Optional["ModelInfo"] = None

    @staticmethod
    def from_proto(r: "scorer_pb2.ModelInfo") -> "ModelInfo":
        fields = {f.name: getattr(r, f.name) for f in dataclasses.fields(ModelInfo) if f.name != "reference"}
        reference = ModelInfo.from_proto(r.reference) if r.HasField("reference") else None
        return ModelInfo(**fields, reference=reference)


class ScorerClient:
    """Client of one scored server. Thread-safe; use as a context manager or call close().

    Args:
        address: "host:port" of scored's gRPC listener.
        timeout: default per-call deadline in seconds (None: no deadline).
        credentials: grpc.ChannelCredentials for TLS; None for a plaintext channel.
        token: bearer token sent as "authorization: Bearer <token>" metadata, if the server requires one.
    """

    def __init__(self, address: str, timeout: Optional[float] = 600.0,
                 credentials: Optional[grpc.ChannelCredentials] = None, token: Optional[str] = None):
        if credentials is None:
            self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
        self._stub = scorer_pb2_grpc.ScorerStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._timeout = timeout
        self._metadata = [("authorization", f"Bearer {token}")] if token else None
        self._ids = itertools.count(1)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "ScorerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, tokens: Optional[Sequence[int]], text: Optional[str], add_bos: Optional[bool],
                 score_from: int, top_k: int, want_rank: bool, want_entropy: bool,
                 request_id: Optional[int], want_reference: bool = False) -> "scorer_pb2.ScoreRequest":
        return score_request(next(self._ids) if request_id is None else request_id, tokens, text, add_bos,
                             score_from, top_k, want_rank, want_entropy, want_reference)

    def score(self, tokens: Optional[Sequence[int]] = None, *, text: Optional[str] = None,
              add_bos: Optional[bool] = None, score_from: int = 1, top_k: int = 0, want_rank: bool = False,
              want_entropy: bool = False, want_reference: bool = False,
              timeout: Optional[float] = None) -> ScoreResult:
        """Scores one sequence: logprob of every token at positions [max(1, score_from), n).

        want_reference also compares with the server's reference model (ScoreResult.ref_logprob, kld,
        ref_greedy, same_top and their sums); INVALID_ARGUMENT when the server has none
        (model_info().reference is None).
        Raises ScoreError with the server's status code (INVALID_ARGUMENT, OUT_OF_RANGE, ...) on failure.
        """
        req = self._request(tokens, text, add_bos, score_from, top_k, want_rank, want_entropy, None,
                            want_reference)
        try:
            resp = self._stub.Score(req, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ScoreError(e.code(), e.details()) from None
        return ScoreResult.from_proto(resp)

    def score_stream(self, sequences: Iterable[Tuple[Sequence[int], int]], *, inflight: int = 8,
                     top_k: int = 0, want_rank: bool = False,
                     want_entropy: bool = False,
                     want_reference: bool = False) -> Iterator[Tuple[int, ScoreResult]]:
        """Scores many (tokens, score_from) pairs over one ScoreStream, keeping `inflight` in flight.

        Yields (index into `sequences`, ScoreResult) in completion order. A failed request raises
        ScoreError (the stream is then closed).
        """
        window = threading.Semaphore(max(1, inflight))
        done = threading.Event()

        def requests() -> Iterator["scorer_pb2.ScoreRequest"]:
            for i, (tokens, score_from) in enumerate(sequences):
                window.acquire()
                if done.is_set():
                    return
                yield self._request(tokens, None, None, score_from, top_k, want_rank, want_entropy, i,
                                    want_reference)

        call = self._stub.ScoreStream(requests(), metadata=self._metadata)
        try:
            for resp in call:
                window.release()
                if resp.HasField("error") and resp.error.code != 0:
                    raise ScoreError(_status_code(resp.error.code), resp.error.message)
                yield resp.request_id, ScoreResult.from_proto(resp)
        except grpc.RpcError as e:
            raise ScoreError(e.code(), e.details()) from None
        finally:
            done.set()
            window.release()
            call.cancel()

    def tokenize(self, text: str, add_bos: Optional[bool] = None,
                 want_byte_lengths: bool = False) -> Tuple[List[int], List[int]]:
        """Tokenizes with the model's own tokenizer. Returns (ids, byte_lengths or [])."""
        req = scorer_pb2.TokenizeRequest(text=text, want_byte_lengths=want_byte_lengths)
        if add_bos is not None:
            req.add_bos = add_bos
        try:
            resp = self._stub.Tokenize(req, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ScoreError(e.code(), e.details()) from None
        return list(resp.ids), list(resp.byte_lengths)

    def model_info(self) -> ModelInfo:
        """GetModelInfo: architecture, format, limits, vocab and tokenizer facts, fingerprints."""
        try:
            r = self._stub.GetModelInfo(scorer_pb2.GetModelInfoRequest(), timeout=self._timeout,
                                        metadata=self._metadata)
        except grpc.RpcError as e:
            raise ScoreError(e.code(), e.details()) from None
        return ModelInfo.from_proto(r)

    def health(self, timeout: float = 5.0) -> bool:
        """True when grpc.health.v1 reports SERVING for the whole server."""
        try:
            r = self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
        return r.status == health_pb2.HealthCheckResponse.SERVING


def score_request(request_id: int, tokens: Optional[Sequence[int]], text: Optional[str],
                  add_bos: Optional[bool], score_from: int, top_k: int, want_rank: bool, want_entropy: bool,
                  want_reference: bool) -> "scorer_pb2.ScoreRequest":
    """The ScoreRequest of one sequence (shared by ScorerClient and scored_client.aio.AsyncScorerClient)."""
    if (tokens is None) == (text is None):
        raise ValueError("give exactly one of tokens and text")
    req = scorer_pb2.ScoreRequest(request_id=request_id, score_from=score_from, top_k=top_k,
                                  want_rank=want_rank, want_entropy=want_entropy,
                                  want_reference=want_reference)
    if tokens is not None:
        req.tokens.ids.extend(int(t) for t in tokens)
    else:
        req.text.text = text
        if add_bos is not None:
            req.text.add_bos = add_bos
    return req


def _status_code(code: int) -> grpc.StatusCode:
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c
    return grpc.StatusCode.UNKNOWN
