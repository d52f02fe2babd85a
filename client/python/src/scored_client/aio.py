"""AsyncScorerClient: the asyncio (grpc.aio) twin of ScorerClient, with the same methods as coroutines.

    import asyncio
    from scored_client.aio import AsyncScorerClient

    async def main():
        async with AsyncScorerClient("127.0.0.1:50051") as client:
            result = await client.score([1, 403, 407, 261])
            async for index, r in client.score_stream([(ids, 1) for ids in documents], inflight=16):
                ...

    asyncio.run(main())

Results and errors are ScorerClient's: ScoreResult, ModelInfo, ScoreError.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import AsyncIterable, AsyncIterator, Iterable, List, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from scored_client._gen.scored.v1 import scorer_pb2, scorer_pb2_grpc
from scored_client.client import (CHANNEL_OPTIONS, ModelInfo, ScoreError, ScoreResult, _status_code,
                                  score_request)

Sequences = Union[Iterable[Tuple[Sequence[int], int]], AsyncIterable[Tuple[Sequence[int], int]]]


class AsyncScorerClient:
    """Client of one scored server on the running event loop; use as an async context manager or await
    close().

    Args: as ScorerClient (address, timeout, credentials, token). Create it inside a running event loop.
    """

    def __init__(self, address: str, timeout: Optional[float] = 600.0,
                 credentials: Optional[grpc.ChannelCredentials] = None, token: Optional[str] = None):
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.aio.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
        self._stub = scorer_pb2_grpc.ScorerStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._ids = itertools.count(1)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncScorerClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def score(self, tokens: Optional[Sequence[int]] = None, *, text: Optional[str] = None,
                    add_bos: Optional[bool] = None, score_from: int = 1, top_k: int = 0,
                    want_rank: bool = False, want_entropy: bool = False, want_reference: bool = False,
                    timeout: Optional[float] = None) -> ScoreResult:
        """Scores one sequence, as ScorerClient.score. Raises ScoreError with the server's status code."""
        req = score_request(next(self._ids), tokens, text, add_bos, score_from, top_k, want_rank,
                            want_entropy, want_reference)
        try:
            resp = await self._stub.Score(req, timeout=timeout or self._timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            raise ScoreError(e.code(), e.details() or "") from None
        return ScoreResult.from_proto(resp)

    async def score_stream(self, sequences: Sequences, *, inflight: int = 8, top_k: int = 0,
                           want_rank: bool = False, want_entropy: bool = False,
                           want_reference: bool = False) -> AsyncIterator[Tuple[int, ScoreResult]]:
        """Scores many (tokens, score_from) pairs (a plain or async iterable) over one ScoreStream, keeping
        `inflight` requests outstanding.

        Yields (index into `sequences`, ScoreResult) in completion order. A failed request raises ScoreError
        (the stream is then cancelled); leaving the loop early cancels it too.
        """
        window = asyncio.Semaphore(max(1, inflight))
        call = self._stub.ScoreStream(metadata=self._metadata)

        async def pairs() -> AsyncIterator[Tuple[Sequence[int], int]]:
            if isinstance(sequences, AsyncIterable):
                async for pair in sequences:
                    yield pair
            else:
                for pair in sequences:
                    yield pair

        async def write_all() -> None:
            i = 0
            async for tokens, score_from in pairs():
                await window.acquire()
                await call.write(score_request(i, tokens, None, None, score_from, top_k, want_rank,
                                               want_entropy, want_reference))
                i += 1
            await call.done_writing()

        writer = asyncio.ensure_future(write_all())
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                window.release()
                if resp.HasField("error") and resp.error.code != 0:
                    raise ScoreError(_status_code(resp.error.code), resp.error.message)
                yield resp.request_id, ScoreResult.from_proto(resp)
            await writer  # re-raises what the writer met (an exception of the caller's iterable)
        except grpc.aio.AioRpcError as e:
            raise ScoreError(e.code(), e.details() or "") from None
        finally:
            if not writer.done():
                writer.cancel()
            call.cancel()

    async def tokenize(self, text: str, add_bos: Optional[bool] = None,
                       want_byte_lengths: bool = False) -> Tuple[List[int], List[int]]:
        """Tokenizes with the model's own tokenizer. Returns (ids, byte_lengths or [])."""
        req = scorer_pb2.TokenizeRequest(text=text, want_byte_lengths=want_byte_lengths)
        if add_bos is not None:
            req.add_bos = add_bos
        try:
            resp = await self._stub.Tokenize(req, timeout=self._timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            raise ScoreError(e.code(), e.details() or "") from None
        return list(resp.ids), list(resp.byte_lengths)

    async def model_info(self) -> ModelInfo:
        """GetModelInfo: architecture, format, limits, vocab and tokenizer facts, fingerprints."""
        try:
            r = await self._stub.GetModelInfo(scorer_pb2.GetModelInfoRequest(), timeout=self._timeout,
                                              metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            raise ScoreError(e.code(), e.details() or "") from None
        return ModelInfo.from_proto(r)

    async def health(self, timeout: float = 5.0) -> bool:
        """True when grpc.health.v1 reports SERVING for the whole server."""
        try:
            r = await self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.aio.AioRpcError:
            return False
        return r.status == health_pb2.HealthCheckResponse.SERVING
