"""Python client for scored: exact per-token log-probabilities of a causal LM over gRPC.

    from scored_client import ScorerClient
    with ScorerClient("127.0.0.1:50051") as client:
        result = client.score([1, 403, 407, 261])
        print(result.sum_logprob, result.logprob)

scored_client.aio.AsyncScorerClient has the same methods as coroutines (grpc.aio).
"""
from scored_client.client import ModelInfo, ScoreError, ScoreResult, ScorerClient

__all__ = ["ModelInfo", "ScoreError", "ScoreResult", "ScorerClient"]
__version__ = "0.1.0"
