"""AsyncScorerClient (grpc.aio) against the real daemon (CPU backend, stories260K): the same answers as the
sync ScorerClient and the goldens, concurrent calls on one channel, streaming, errors."""
import asyncio

import grpc
import pytest

from scored_client import ScoreError
from scored_client.aio import AsyncScorerClient

# The CPU backend matches the float64 goldens to 1e-4 (fp32 math, fp64 reductions); the contract's bound.
LOGPROB_TOL = 1e-4


def run(coro):
    return asyncio.run(coro)


def test_score_matches_sync_client_and_golden(daemon, client, golden):
    story = golden["tinystories_sample"]["stories"][0]

    async def go():
        async with AsyncScorerClient(daemon.address) as c:
            return await c.score(story["token_ids"], top_k=3, want_rank=True, want_entropy=True)

    r = run(go())
    want = client.score(story["token_ids"], top_k=3, want_rank=True, want_entropy=True)
    assert r.num_scored == story["n_scored"] == want.num_scored
    assert r.logprob == want.logprob and r.rank == want.rank and r.top_k == want.top_k
    assert r.entropy == want.entropy and r.greedy == want.greedy
    assert max(abs(a - b) for a, b in zip(r.logprob, story["token_logprobs"])) <= LOGPROB_TOL


def test_concurrent_calls_on_one_channel(daemon, golden):
    stories = golden["tinystories_sample"]["stories"]

    async def go():
        async with AsyncScorerClient(daemon.address) as c:
            return await asyncio.gather(*(c.score(s["token_ids"]) for s in stories))

    results = run(go())
    assert len(results) == len(stories)
    for r, s in zip(results, stories):
        assert r.sum_logprob == pytest.approx(s["sum_logprob"], abs=LOGPROB_TOL * s["n_scored"])


def test_text_tokenize_model_info_and_health(daemon, golden):
    story = golden["tinystories_sample"]["stories"][0]

    async def go():
        async with AsyncScorerClient(daemon.address) as c:
            return (await c.score(text=story["text"], add_bos=True),
                    await c.tokenize(story["text"], add_bos=True, want_byte_lengths=True),
                    await c.model_info(), await c.health())

    r, (ids, lengths), info, healthy = run(go())
    assert r.tokens == story["token_ids"] and ids == story["token_ids"] and len(lengths) == len(ids)
    assert info.vocab_size == 512 and info.bos_id == 1 and healthy


@pytest.mark.parametrize("as_async_iterable", [False, True])
def test_stream_returns_every_request_matched_by_id(daemon, golden, as_async_iterable):
    stories = golden["tinystories_sample"]["stories"]
    pairs = [(s["token_ids"], 1) for s in stories] * 3

    async def source():
        for p in pairs:
            yield p

    async def go():
        async with AsyncScorerClient(daemon.address) as c:
            seqs = source() if as_async_iterable else pairs
            return [item async for item in c.score_stream(seqs, inflight=2)]

    got = run(go())
    assert sorted(i for i, _ in got) == list(range(len(pairs)))
    for i, r in got:
        s = stories[i % len(stories)]
        assert r.sum_logprob == pytest.approx(s["sum_logprob"], abs=LOGPROB_TOL * s["n_scored"])


def test_errors_carry_the_status_code(daemon, golden):
    ids = golden["tinystories_sample"]["stories"][0]["token_ids"]

    async def unary():
        async with AsyncScorerClient(daemon.address) as c:
            await c.score([1, 100000])

    with pytest.raises(ScoreError) as e:
        run(unary())
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT

    async def stream():
        async with AsyncScorerClient(daemon.address) as c:
            return [item async for item in c.score_stream([(ids, 1), ([1, 100000], 1)], inflight=1)]

    with pytest.raises(ScoreError) as e:
        run(stream())
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_unreachable_server_is_unavailable():
    async def go():
        async with AsyncScorerClient("127.0.0.1:1", timeout=5.0) as c:
            assert not await c.health(timeout=1.0)
            await c.score([1, 2, 3])

    with pytest.raises(ScoreError) as e:
        run(go())
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
