"""The Python client's side of issue 17 without a server: ScoreResult / ModelInfo from real protobuf
messages carrying the reference fields, and want_reference in the requests the client builds."""
import pytest

from scored_client import ScorerClient
from scored_client._gen.scored.v1 import scorer_pb2
from scored_client.client import ModelInfo, ScoreResult


def test_score_result_exposes_reference_fields():
    r = scorer_pb2.ScoreResponse(request_id=7, first_scored=1, logprob=[-1.5, -0.25], greedy=[False, True],
                                 sum_logprob=-1.75, num_scored=2, ref_logprob=[-1.25, -0.5], kld=[0.01, 0.002],
                                 ref_greedy=[False, True], same_top=[True, False], sum_ref_logprob=-1.75,
                                 sum_kld=0.012)
    s = ScoreResult.from_proto(r)
    assert s.ref_logprob == [-1.25, -0.5]
    assert s.kld == pytest.approx([0.01, 0.002])  # float32 on the wire
    assert s.ref_greedy == [False, True] and s.same_top == [True, False]
    assert s.sum_ref_logprob == -1.75 and s.sum_kld == 0.012  # doubles: exact
    # Without want_reference: empty lists and zero sums.
    plain = ScoreResult.from_proto(scorer_pb2.ScoreResponse(logprob=[-1.0], num_scored=1))
    assert plain.ref_logprob == [] and plain.kld == [] and plain.same_top == [] and plain.sum_kld == 0.0


def test_model_info_reference():
    info = scorer_pb2.ModelInfo(architecture="LlamaForCausalLM", format="W4A16", vocab_size=512,
                                model_fingerprint="q" * 64)
    assert ModelInfo.from_proto(info).reference is None
    info.reference.CopyFrom(scorer_pb2.ModelInfo(architecture="LlamaForCausalLM", format="bf16",
                                                 vocab_size=512, model_fingerprint="r" * 64,
                                                 bits_per_weight_decoder=16.0))
    m = ModelInfo.from_proto(info)
    assert m.format == "W4A16" and m.model_fingerprint == "q" * 64
    assert m.reference is not None and m.reference.format == "bf16"
    assert m.reference.model_fingerprint == "r" * 64 and m.reference.bits_per_weight_decoder == 16.0
    assert m.reference.reference is None


def test_requests_carry_want_reference():
    # The channel is lazy: building requests contacts no server.
    with ScorerClient("127.0.0.1:1") as c:
        req = c._request([1, 2, 3], None, None, 1, 0, False, False, None, want_reference=True)
        assert req.want_reference and list(req.tokens.ids) == [1, 2, 3]
        assert not c._request([1, 2], None, None, 1, 0, False, False, None).want_reference
